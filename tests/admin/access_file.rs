//! The access log's own file (`serve --access-log FILE`, `[server] access_log`): access
//! lines go there and nowhere else, every other line stays on stderr; SIGUSR1 reopens it by
//! path, so a rotation under load loses and splits no line; a path that cannot be opened
//! stops `serve` with the path named (exit 1 for the flag, 2 for the config key).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::common::process::{Logged, spawn_logged, temp_file, tollgate};
use crate::common::*;

/// `tollgate serve -c CONFIG ARGS…` with access lines at info; returns once it listens.
fn start(config: &Path, args: &[&str]) -> Logged {
    let mut cmd = tollgate();
    cmd.args(["serve", "-c"])
        .arg(config)
        .args(args)
        .env("RUST_LOG", "info")
        .env("TOLLGATE_WORKERS", "2");
    spawn_logged(cmd).unwrap_or_else(|(s, log)| panic!("exited ({s}) before listening:\n{log}"))
}

/// The access lines in `file`, each parsed: a line that is not a whole JSON object of the
/// access log fails the test.
fn access_lines(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: not a whole JSON line ({e}): {l}", file.display()));
            assert_eq!(v["target"], "tollgate::access", "{}: {l}", file.display());
            v
        })
        .collect()
}

/// Poll until `file` holds `n` access lines (at most 10 s); the lines.
fn wait_lines(file: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = access_lines(file);
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `n` requests on one keep-alive connection; the request id each answer carried.
async fn client(addr: SocketAddr, tag: usize, n: usize, done: Arc<AtomicUsize>) -> Vec<String> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        sender.ready().await.unwrap();
        let resp = sender
            .send_request(get(&format!("http://{addr}/c{tag}/{i}")))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        ids.push(resp.headers()["x-request-id"].to_str().unwrap().to_owned());
        resp.into_body().collect().await.unwrap();
        done.fetch_add(1, Ordering::Relaxed);
    }
    ids
}

fn stderr_access(gw: &Logged) -> Vec<String> {
    gw.stderr()
        .into_iter()
        .filter(|l| l.contains("tollgate::access"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_lines_go_to_the_file_and_the_rest_stays_on_stderr() {
    let up = echo_upstream().await;
    let cfg = temp_file("file.toml", &config(up, "", ""));
    let log = cfg.with_file_name("access.log");
    let mut gw = start(
        &cfg,
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-buffer",
            "0",
        ],
    );
    for i in 0..5 {
        let resp = send_h1(gw.addr, get(&format!("http://{}/r{i}", gw.addr))).await;
        assert_eq!(resp.status(), 200);
        text(resp).await;
    }
    // Unbuffered: every line is in the file while the gateway still runs.
    let paths: Vec<Value> = wait_lines(&log, 5)
        .iter()
        .map(|v| v["path"].clone())
        .collect();
    assert_eq!(paths, ["/r0", "/r1", "/r2", "/r3", "/r4"]);
    assert_eq!(gw.stop().code(), Some(0));
    assert_eq!(access_lines(&log).len(), 5, "nothing more at stop");
    let stderr = gw.stderr();
    assert!(stderr_access(&gw).is_empty(), "{stderr:?}");
    for said in ["tollgate listening", "shutting down", "stopped"] {
        assert!(
            stderr.iter().any(|l| l.contains(said)),
            "{said}: {stderr:?}"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "not world-readable: {mode:o}");
    }
}

/// Renamed and reopened five times while 3000 requests run on 6 connections, with a
/// buffer that fills often: every request's line is in exactly one file, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_loses_and_duplicates_no_line() {
    const CLIENTS: usize = 6;
    const EACH: usize = 500;
    const ROTATIONS: usize = 5;
    let up = echo_upstream().await;
    let cfg = temp_file("rotate.toml", &config(up, "", ""));
    let log = cfg.with_file_name("access.log");
    let mut gw = start(
        &cfg,
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-buffer",
            "4096",
        ],
    );
    let done = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| tokio::spawn(client(gw.addr, c, EACH, done.clone())))
        .collect();
    let total = CLIENTS * EACH;
    let mut files = Vec::new();
    for k in 1..=ROTATIONS {
        // Rotate at evenly spaced points of progress, not on a timer.
        let at = total * k / (ROTATIONS + 1);
        let deadline = Instant::now() + Duration::from_secs(60);
        while done.load(Ordering::Relaxed) < at {
            assert!(Instant::now() < deadline, "stuck at {done:?} of {total}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let rotated: PathBuf = log.with_extension(format!("log.{k}"));
        std::fs::rename(&log, &rotated).unwrap();
        gw.signal("USR1");
        // The reopen creates the file again: wait for it before the next rename.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !log.exists() {
            assert!(
                Instant::now() < deadline,
                "SIGUSR1 {k} did not reopen {}",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        files.push(rotated);
    }
    let mut sent = Vec::new();
    for c in clients {
        sent.extend(c.await.unwrap());
    }
    assert_eq!(gw.stop().code(), Some(0));
    files.push(log.clone());
    let mut logged = Vec::new();
    for f in &files {
        let lines = access_lines(f);
        assert!(!lines.is_empty(), "{} got no line", f.display());
        logged.extend(
            lines
                .iter()
                .map(|v| v["request_id"].as_str().unwrap().to_owned()),
        );
    }
    assert_eq!(logged.len(), total, "lines across {} files", files.len());
    let unique: HashSet<&String> = logged.iter().collect();
    assert_eq!(unique.len(), total, "a request logged twice");
    assert_eq!(
        unique,
        sent.iter().collect::<HashSet<_>>(),
        "the ids answered"
    );
    let reopened = gw
        .stderr()
        .iter()
        .filter(|l| l.contains("SIGUSR1: access log reopened"))
        .count();
    assert_eq!(reopened, ROTATIONS);
    assert!(stderr_access(&gw).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_key_names_the_file_and_the_flag_wins() {
    let up = echo_upstream().await;
    let cfg = temp_file(
        "key.toml",
        &config(up, "access_log = \"from-config.log\"", ""),
    );
    let from_config = cfg.with_file_name("from-config.log");
    let mut gw = start(&cfg, &["--access-log-buffer", "0"]);
    let resp = send_h1(gw.addr, get(&format!("http://{}/key", gw.addr))).await;
    assert_eq!(resp.status(), 200);
    text(resp).await;
    assert_eq!(wait_lines(&from_config, 1)[0]["path"], "/key");
    assert_eq!(gw.stop().code(), Some(0));
    assert!(stderr_access(&gw).is_empty());

    std::fs::remove_file(&from_config).unwrap();
    let flag = cfg.with_file_name("from-flag.log");
    let mut gw = start(&cfg, &["--access-log", flag.to_str().unwrap()]);
    let resp = send_h1(gw.addr, get(&format!("http://{}/flag", gw.addr))).await;
    text(resp).await;
    // Buffered (the default): the line is written at the latest when the gateway stops.
    assert_eq!(gw.stop().code(), Some(0));
    assert_eq!(access_lines(&flag)[0]["path"], "/flag");
    assert!(!from_config.exists(), "the config's file was not opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_without_a_file_does_nothing() {
    let up = echo_upstream().await;
    let cfg = temp_file("nofile.toml", &config(up, "", ""));
    let mut gw = start(&cfg, &[]);
    gw.signal("USR1");
    let resp = send_h1(gw.addr, get(&format!("http://{}/after", gw.addr))).await;
    assert_eq!(resp.status(), 200, "alive after SIGUSR1");
    assert_eq!(gw.stop().code(), Some(0));
    assert_eq!(
        stderr_access(&gw).len(),
        1,
        "the access log stays on stderr"
    );
}

/// `serve` with `args` must exit without listening: its exit code and stderr.
fn refused(config: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = tollgate();
    cmd.args(["serve", "-c"]).arg(config).args(args);
    match spawn_logged(cmd) {
        Ok(_) => panic!("listening with {args:?}"),
        Err((status, stderr)) => (status.code(), stderr),
    }
}

#[test]
fn an_unopenable_file_stops_serve_naming_the_path() {
    let cfg = temp_file("bad.toml", "[server]\nlisten = \"127.0.0.1:0\"\n");
    let missing = cfg.with_file_name("no-such-folder").join("access.log");
    let (code, stderr) = refused(&cfg, &["--access-log", missing.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    let said = format!("error: --access-log: cannot open `{}`: ", missing.display());
    assert!(stderr.contains(&said), "{stderr}");

    // The key: a missing folder is a bad config (as `check` says it).
    let key = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"{}\"\n",
        missing.display()
    );
    std::fs::write(&cfg, key).unwrap();
    let (code, stderr) = refused(&cfg, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    let said = format!(
        "{}: server.access_log: the folder of `{}` does not exist",
        cfg.display(),
        missing.display()
    );
    assert!(stderr.contains(&said), "{stderr}");

    // A path `check` passes that `serve` cannot open (a link into a missing folder).
    #[cfg(unix)]
    {
        let link = cfg.with_file_name("dangling.log");
        std::os::unix::fs::symlink(&missing, &link).unwrap();
        std::fs::write(
            &cfg,
            "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"dangling.log\"\n",
        )
        .unwrap();
        let check = tollgate().args(["check", "-c"]).arg(&cfg).output().unwrap();
        assert_eq!(check.status.code(), Some(0), "{check:?}");
        let (code, stderr) = refused(&cfg, &[]);
        assert_eq!(code, Some(2), "{stderr}");
        let said = format!(
            "{}: server.access_log: cannot open `{}`: ",
            cfg.display(),
            link.display()
        );
        assert!(stderr.contains(&said), "{stderr}");
    }
}
