//! The access log's buffer (`--access-log-buffer`, `--access-log-flush`): a line reaches
//! stderr when the buffer fills, when the flush interval passes, or when the gateway stops
//! — never lost on a clean stop, never held past its interval on a quiet gateway.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::process::{temp_file, tollgate};

/// A gateway whose stderr is read line by line into `lines`.
struct Logged {
    child: Child,
    addr: SocketAddr,
    /// Every stderr line read so far.
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Logged {
    /// `tollgate serve` with JSON logs, the access log on and `args` on its command line;
    /// returns once it listens. Its one route goes to a closed port: every answer is a 502.
    fn start(args: &[&str]) -> Logged {
        Self::start_as("json", args)
    }

    /// [`Self::start`] with logs in `format` (`json` or `text`).
    fn start_as(format: &str, args: &[&str]) -> Logged {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let config = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.app]\nurls = [\"http://127.0.0.1:{port}\"]\n\
             [[routes]]\nname = \"all\"\nupstream = \"app\"\n"
        );
        let path = temp_file("access_buffer.toml", &config);
        let mut child = tollgate()
            .args(args)
            .args(["serve", "-c"])
            .arg(&path)
            .env("RUST_LOG", "info")
            .env("TOLLGATE_LOG_FORMAT", format)
            .env("TOLLGATE_WORKERS", "1")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("tollgate listening") {
                    let _ = tx.send(listen_address(&line));
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("tollgate listens")
            .parse()
            .unwrap();
        Logged {
            child,
            addr,
            lines,
            reader: Some(reader),
        }
    }

    /// Send one request on a fresh connection; its status code.
    fn get(&self, path: &str) -> u16 {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let head = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text.split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }

    /// The paths of the access lines read so far, in order.
    fn logged_paths(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "tollgate::access")
            .map(|v| v["path"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    /// Poll until `n` access lines are read or 10 s have passed; the paths read.
    fn wait_for(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let paths = self.logged_paths();
            if paths.len() >= n || Instant::now() > deadline {
                return paths;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then wait for the exit and for stderr to be read to its end.
    fn stop(&mut self) -> std::process::ExitStatus {
        let kill = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let status = self.child.wait().unwrap();
        self.reader.take().unwrap().join().unwrap();
        status
    }
}

/// The address in a "tollgate listening" line, JSON (`"listen":"…"`) or text (`listen=…`).
fn listen_address(line: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
        return v["listen"].as_str().unwrap_or("").to_owned();
    }
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("listen="))
        .unwrap_or("")
        .to_owned()
}

fn requests() -> Vec<String> {
    (0..5).map(|i| format!("/r{i}")).collect()
}

#[test]
fn lines_wait_for_their_interval_and_are_written_when_the_gateway_stops() {
    let mut gw = Logged::start(&["--access-log-flush", "1h"]);
    for p in requests() {
        assert_eq!(gw.get(&p), 502);
    }
    assert_eq!(
        gw.logged_paths(),
        Vec::<String>::new(),
        "five lines fill no 64 KiB buffer, and the interval is an hour"
    );
    assert!(gw.stop().success());
    assert_eq!(
        gw.logged_paths(),
        requests(),
        "every line, in order, at stop"
    );
}

#[test]
fn a_full_buffer_is_written_at_once() {
    let gw = Logged::start(&["--access-log-buffer", "1", "--access-log-flush", "1h"]);
    for p in requests() {
        assert_eq!(gw.get(&p), 502);
    }
    assert_eq!(gw.wait_for(5), requests());
}

#[test]
fn a_quiet_gateway_writes_its_lines_within_the_interval() {
    let gw = Logged::start(&["--access-log-flush", "100ms"]);
    assert_eq!(gw.get("/alone"), 502);
    // No other request comes to fill the buffer: the interval alone must write the line.
    assert_eq!(gw.wait_for(1), vec!["/alone".to_owned()]);
}

#[test]
fn text_logs_to_a_file_or_pipe_carry_no_colour_codes() {
    let mut gw = Logged::start_as("text", &[]);
    assert_eq!(gw.get("/plain"), 502);
    assert!(gw.stop().success());
    let lines = gw.lines.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("tollgate::access") && l.contains("/plain")),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains('\u{1b}')), "{lines:?}");
}

#[test]
fn bad_buffer_settings_exit_2_naming_the_setting() {
    /// Command-line arguments, environment, the setting the error must name.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 5] = [
        (&["--access-log-flush", "0s"], &[], "--access-log-flush"),
        (&["--access-log-flush", "soon"], &[], "--access-log-flush"),
        (&["--access-log-buffer", "lots"], &[], "--access-log-buffer"),
        (
            &["--access-log-buffer", "67108865"],
            &[],
            "--access-log-buffer",
        ),
        (
            &[],
            &[("TOLLGATE_ACCESS_LOG_BUFFER", "64k")],
            "--access-log-buffer",
        ),
    ];
    for (args, env, named) in cases {
        let out = tollgate()
            .args(args)
            .args(["serve", "-c", "unused.toml"])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?} {env:?}: {stderr}");
    }
}
