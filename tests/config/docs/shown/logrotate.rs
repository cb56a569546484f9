//! The operating chapter's logrotate stanza (`docs/src/operating.md`) is a file for
//! logrotate, not an output, so it cannot be printed by the binary; what it claims is
//! checked instead, by doing what logrotate would do to a real `tollgate serve`: the file
//! it rotates is the reference's `access_log` example, the `create` mode is the one the
//! gateway makes the file with, it delays compression and does not copy-truncate, and its
//! `postrotate` command (run as written, `pidof` aside: other gateways of the test suite
//! run beside this one) makes the gateway write the next line to a fresh file after
//! `mv`, the old one keeping every line written before.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use crate::common::process::{spawn_logged, tollgate};
use crate::common::shown::block;
use crate::common::temp::TempDir;
use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logrotate_stanza_rotates_a_real_gateways_access_log() {
    let stanza = block("logrotate");
    let lines: Vec<&str> = stanza.text.lines().map(str::trim).collect();
    let path = lines[0]
        .strip_suffix(" {")
        .expect("a stanza opens with `PATH {`");
    let server_md = std::fs::read_to_string(repo_path("docs/src/reference/server.md")).unwrap();
    assert!(
        server_md.contains(&format!("| `\"{path}\"` |")),
        "{}: rotates {path}, not the reference's `access_log` example",
        stanza.place
    );
    assert!(lines.contains(&"delaycompress") && !lines.contains(&"copytruncate"));
    let mode = lines
        .iter()
        .find_map(|l| l.strip_prefix("create "))
        .and_then(|l| l.split_whitespace().next())
        .map(|m| u32::from_str_radix(m, 8).unwrap())
        .expect("a `create MODE OWNER GROUP` line");
    let postrotate = lines
        .iter()
        .skip_while(|l| **l != "postrotate")
        .nth(1)
        .expect("a postrotate command");

    let up = echo_upstream().await;
    let dir = TempDir::new("shown-logrotate");
    let config = dir.file(
        "gateway.toml",
        config(up, "", "")
            .replace("admin_listen = \"127.0.0.1:0\"\n", "")
            .as_bytes(),
    );
    let log = dir.0.join("access.log");
    let mut serve = tollgate();
    serve
        .args(["serve", "--access-log-buffer", "0", "-c"])
        .arg(&config)
        .arg("--access-log")
        .arg(&log);
    let mut gw = spawn_logged(serve).unwrap_or_else(|(s, l)| panic!("{s}: {l}"));
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(status(&raw(gw.addr, &get("/before")).await), 200);
    let made = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        made, mode,
        "the gateway makes its access log {made:o}, the stanza creates {mode:o}"
    );

    // logrotate: rename, then the postrotate script.
    let rotated = dir.0.join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    let script = postrotate.replace("$(pidof tollgate)", &gw.child.id().to_string());
    let ran = Command::new("sh").args(["-c", &script]).status().unwrap();
    assert!(ran.success(), "{script}");
    // The reopen happens on the gateway's own time: wait until it says it reopened.
    let said = gw.lines.clone();
    eventually(
        "SIGUSR1: access log reopened",
        Duration::from_secs(5),
        || {
            let said = said.clone();
            async move {
                said.lock()
                    .unwrap()
                    .iter()
                    .any(|l| l.contains("access log reopened"))
            }
        },
    )
    .await;
    assert_eq!(status(&raw(gw.addr, &get("/after")).await), 200);
    gw.stop();
    let fresh = std::fs::read_to_string(&log).unwrap();
    assert!(
        fresh.contains("/after") && !fresh.contains("/before"),
        "{fresh}"
    );
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(old.contains("/before") && !old.contains("/after"), "{old}");
}
