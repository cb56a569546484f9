//! `tollgate simulate`'s command line: `--plot` draws an SVG, and bad options fail with a
//! message and a non-zero exit. (The figures themselves: `simulate.rs`.)

use crate::common::simulate::{DESIGNS, simulate};
use crate::common::temp::TempDir;

#[test]
fn plot_writes_an_svg() {
    let dir = TempDir::new("plot");
    let path = dir.0.join("designs.svg");
    let out = simulate(&["--reps", "1", "--plot", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("plot written to"), "{stdout}");
    let svg = std::fs::read_to_string(&path).expect("the plot file exists");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    for design in DESIGNS {
        assert!(svg.contains(design), "the plot has no `{design}`");
    }
}

#[test]
fn plot_into_a_missing_folder_fails() {
    let dir = TempDir::new("plot-missing");
    let path = dir.0.join("no-such-folder").join("designs.svg");
    let out = simulate(&["--reps", "1", "--plot", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("drawing"), "{stderr}");
    assert!(!path.exists());
}

#[test]
fn bad_options_fail_with_a_message() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--weights", "1,2", "--nodes", "3"],
            "--weights has 2 entries but --nodes is 3",
        ),
        (
            &["--weights", "0,0"],
            "--weights needs at least one non-zero weight",
        ),
        (
            &["--nodes", "0"],
            "--weights needs at least one non-zero weight",
        ),
        (&["--load", "0"], "--load must be positive"),
        (&["--load=-1"], "--load must be positive"),
        (&["--load", "NaN"], "--load must be positive"),
        (&["--requests", "0"], "--requests must be at least 1"),
        (&["--limit", "0"], "--limit must be at least 1"),
        (&["--burst", "0"], "--burst must be at least 1"),
        // The lease knobs take the ranges `[policies.NAME]` lease knobs take.
        (&["--lease-max", "0"], "--lease-max must be 1 to 100000"),
        (
            &["--lease-max", "100001"],
            "--lease-max must be 1 to 100000",
        ),
        (
            &["--lease-ttl", "0s"],
            "--lease-ttl must be at least 1ms and at most 1h",
        ),
        (
            &["--lease-ttl", "999us", "--lease-target", "999us"],
            "--lease-ttl must be at least 1ms and at most 1h",
        ),
        (
            &["--lease-ttl", "1h 1ms"],
            "--lease-ttl must be at least 1ms and at most 1h",
        ),
        (
            &["--lease-target", "0s"],
            "--lease-target must be at least 1ms and at most 1h",
        ),
        (
            &["--lease-target", "500us"],
            "--lease-target must be at least 1ms and at most 1h",
        ),
        (
            &["--lease-ttl", "2h", "--lease-target", "2h"],
            "--lease-ttl must be at least 1ms and at most 1h",
        ),
        (
            &["--lease-target", "100ms", "--lease-ttl", "50ms"],
            "--lease-ttl (50ms) must be no shorter than --lease-target (100ms)",
        ),
        (&["--lease-ttl", "soon"], "--lease-ttl"),
        (
            &["--gossip-interval", "0s"],
            "--gossip-interval must be at least 1ms and at most 1h",
        ),
        (
            &["--gossip-interval", "5ms,2h"],
            "--gossip-interval must be at least 1ms and at most 1h",
        ),
        (&["--gossip-interval", "often"], "--gossip-interval"),
        (&["--peer-delay", "2h"], "--peer-delay must be at most 1h"),
        (&["--seed", "0xZZ"], "--seed"),
    ];
    for (args, message) in cases {
        let out = simulate(&[&["--reps", "1"], *args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{args:?} succeeded:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(out.stdout.is_empty(), "{args:?} printed a report");
        assert!(
            stderr.contains(message),
            "{args:?}: wanted `{message}` in:\n{stderr}"
        );
    }
}
