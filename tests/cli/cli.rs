//! The `tollgate` binary as users run it: `check` on every fixture, `serve` under SIGTERM,
//! and `demo`.

use std::process::Command;
use std::time::Duration;

use crate::common::process::tollgate;
use crate::common::*;
use http::{Response, StatusCode};

fn toml_files(dir: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(repo_path(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {dir}");
    files
}

#[test]
fn every_invalid_fixture_fails_with_its_message() {
    for fixture in config_fixtures::config_fixtures("invalid") {
        let file = &fixture.path;
        let expect = fixture
            .expect
            .as_deref()
            .unwrap_or_else(|| panic!("{} has no `# expect:` line", file.display()));
        let out = fixture.check();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", file.display());
        // `# expect: KEY: FRAGMENT` — some line says `FILE: KEY: …FRAGMENT…`.
        let (key, fragment) = expect.split_once(": ").unwrap();
        let prefix = format!("{}: {key}: ", file.display());
        let found = stderr
            .lines()
            .any(|l| l.starts_with(&prefix) && l.contains(fragment));
        assert!(
            found,
            "{}:\nwanted: {prefix}…{fragment}…\ngot:    {stderr}",
            file.display()
        );
    }
}

#[test]
fn shipped_config_and_valid_fixtures_pass_check() {
    let mut files = toml_files("tests/common/fixtures/valid");
    files.push(repo_path("config.toml"));
    for file in files {
        let out = tollgate()
            .args(["check", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Without `-c`, `TOLLGATE_CONFIG` names the file. A valid file must pass and be named in the
/// output, and an invalid one must fail with *its* message: clap's own "missing --config"
/// error also exits 2, so the exit code alone would prove nothing.
#[test]
fn config_comes_from_env_when_flag_is_absent() {
    let valid = repo_path("tests/common/fixtures/valid/minimal.toml");
    let out = tollgate()
        .arg("check")
        .env("TOLLGATE_CONFIG", &valid)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), format!("{}: ok", valid.display()));

    let invalid = repo_path("tests/common/fixtures/invalid/bad_listen.toml");
    let out = tollgate()
        .arg("check")
        .env("TOLLGATE_CONFIG", &invalid)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: server.listen: ", invalid.display())),
        "{stderr}"
    );
}

#[test]
fn demo_runs_without_any_service() {
    let out = tollgate().arg("demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .to_string()
    };
    assert!(row("polite client").contains("200×10"), "{stdout}");
    assert!(!row("polite client").contains("429"), "{stdout}");
    assert!(row("abusive client").contains("429×"), "{stdout}");
    assert!(row("behind CGNAT").contains("200×40"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_request_and_exits_zero() {
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let (arrived_tx, mut arrived_rx) = tokio::sync::mpsc::channel::<()>(1);
    let up = upstream(move |_req| {
        let mut release_rx = release_rx.clone();
        let arrived_tx = arrived_tx.clone();
        async move {
            let _ = arrived_tx.send(()).await;
            let _ = release_rx.wait_for(|r| *r).await;
            Response::new(body("done"))
        }
    })
    .await;
    let cfg = process::temp_file("sigterm.toml", &config(up, "shutdown_grace = \"20s\"", ""));
    let mut gw = process::spawn_serve(&cfg);
    let addr = gw.addr;

    let in_flight = tokio::spawn(send_h1(addr, get(&format!("http://{addr}/slow"))));
    arrived_rx.recv().await.unwrap();
    let kill = Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    // Until the upstream answers, the process must still be alive, draining.
    assert!(
        gw.child.try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );
    release_tx.send(true).unwrap();
    let resp = in_flight.await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await, "done");
    let status = tokio::task::spawn_blocking(move || {
        for _ in 0..400 {
            if let Some(s) = gw.child.try_wait().unwrap() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        None
    })
    .await
    .unwrap()
    .expect("tollgate did not exit within 10 s of draining");
    assert_eq!(status.code(), Some(0));
}

/// Each worker thread runs its own runtime, which needs its own descriptors (epoll, its
/// waker, the signal pipe): under `ulimit -n 64` with 64 workers, the accept runtime and
/// the listener fit but the workers run out part-way. `serve` must then stop with a
/// message and a non-zero exit, not listen with workers that silently drop connections.
#[test]
fn serve_fails_loudly_when_worker_threads_cannot_start() {
    use std::io::{BufRead, BufReader};
    let cfg = process::temp_file("workers.toml", "[server]\nlisten = \"127.0.0.1:0\"\n");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "-c"])
        .arg(&cfg)
        .env("TOLLGATE_WORKERS", "64")
        .env("TOLLGATE_LOG_FORMAT", "json")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read until the process closes stderr (it exited) or says it is listening (the bug).
    let mut stderr = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.contains("tollgate listening") {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "listening although workers could not start:\n{}",
                stderr.join("\n")
            );
        }
        stderr.push(line);
    }
    let status = child.wait().unwrap();
    let stderr = stderr.join("\n");
    assert_eq!(status.code(), Some(1), "{stderr}");
    let said = stderr
        .lines()
        .find(|l| l.starts_with("error: starting tollgate: cannot start worker threads: worker "))
        .unwrap_or_else(|| panic!("no clear message: {stderr}"));
    assert!(said.contains("Too many open files"), "{said}");
}
