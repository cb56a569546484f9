//! `tollgate demo`'s output as getting started shows it (`docs/src/getting-started.md`).
//! What the machine decides is masked: the ports, the latencies, and the counts that depend
//! on how fast the requests went out (the abusive client's burst and the IPv6 pair's split
//! of theirs: the page says so). The polite and CGNAT clients' counts, the columns and the
//! closing text are the binary's.

use crate::common::process::tollgate;
use crate::common::shown::{Mask, PORT, assert_text};

#[test]
fn the_demo_prints_what_getting_started_shows() {
    let out = tollgate().arg("demo").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let masks: &[Mask] = &[
        PORT,
        // Columns are padded to the widest value: compare words, not spaces.
        (r" {2,}", " "),
        (r"\d+\.\d\d \d+\.\d\d", "<P50> <P99>"),
        (
            r"(?m)^(abusive client \S+ 60) 200×\d+ 429×\d+",
            "$1 <STATUSES>",
        ),
        (r"(?m)^(ipv6 \w+ \S+ 10) .*? (<P50>)", "$1 <STATUSES> $2"),
    ];
    assert_text("demo", &printed, masks);
}
