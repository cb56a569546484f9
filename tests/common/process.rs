//! `tollgate serve` as a separate process, for tests that need several gateways or signals.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `tollgate serve`; killed by pid on drop.
pub struct GatewayProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// The log lines written before it listened (start-up warnings among them).
    pub early_log: Vec<String>,
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

/// Start `tollgate serve -c config` and read the bound addresses from its JSON log.
pub fn spawn_serve(config: &Path) -> GatewayProcess {
    spawn_serve_with_env(config, &[])
}

/// [`spawn_serve`] with these variables in the child's environment (secrets a config
/// names with `*_env` keys: the test process's own environment is never changed).
pub fn spawn_serve_with_env(config: &Path, env: &[(&str, &str)]) -> GatewayProcess {
    try_spawn_serve_with_env(config, env)
        .unwrap_or_else(|log| panic!("tollgate exited before listening:\n{log}"))
}

/// [`spawn_serve_with_env`], or what the process wrote before it exited without listening.
pub fn try_spawn_serve_with_env(
    config: &Path,
    env: &[(&str, &str)],
) -> Result<GatewayProcess, String> {
    let mut child = tollgate()
        .args(["serve", "-c"])
        .arg(config)
        .env("RUST_LOG", "info,tollgate::access=warn")
        .env("TOLLGATE_LOG_FORMAT", "json")
        .env("TOLLGATE_WORKERS", "2")
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let (addr, admin) = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.wait();
            return Err(seen.join("\n"));
        };
        seen.push(line.clone());
        let v: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if v["message"] == "tollgate listening" {
            // Absent when no proxy runs (a file of `[rls]` alone): the unspecified address.
            let addr = (v["listen"].as_str())
                .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |s| s.parse().unwrap());
            // admin_listen is the address as text, absent without an admin listener.
            let admin = v["admin_listen"].as_str().map(|s| s.parse().unwrap());
            break (addr, admin);
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(GatewayProcess {
        child,
        addr,
        admin,
        early_log: seen,
    })
}

/// A file in a fresh temp folder for this test.
pub fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// The variable that tells a re-run test binary it is the child of [`in_own_process`].
const OWN_PROCESS: &str = "TOLLGATE_TEST_OWN_PROCESS";

/// For a test that changes process-wide state (a global tracing subscriber, say), which
/// the other tests of its area binary would share: `true` in a fresh process of this same
/// test binary running only `name` (the test's path inside the binary, `file::test`), where
/// the caller then runs its body. In the test binary itself it runs that child, fails if
/// the child failed or ran no test, and returns `false`: the caller returns at once.
pub fn in_own_process(name: &str) -> bool {
    if std::env::var_os(OWN_PROCESS).is_some_and(|v| v == name) {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([name, "--exact", "--test-threads=1"])
        .env(OWN_PROCESS, name)
        .output()
        .expect("running the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} in its own process: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    false
}

/// A `tollgate serve` with JSON logs whose stderr is kept line by line: for tests that read
/// what it logged, signal it, or watch how it exits. Killed on drop.
pub struct Logged {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// Every stderr line read so far.
    pub lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `cmd` (a `tollgate serve …` command line) until it says it listens, or until it
/// exits without listening: then its exit status and everything it wrote to stderr.
pub fn spawn_logged(mut cmd: Command) -> Result<Logged, (std::process::ExitStatus, String)> {
    let mut child = cmd
        .env("TOLLGATE_LOG_FORMAT", "json")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let (stderr, sink) = (child.stderr.take().unwrap(), lines.clone());
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && v["message"] == "tollgate listening"
            {
                let addr: SocketAddr = v["listen"].as_str().unwrap().parse().unwrap();
                let admin = v["admin_listen"].as_str().map(|s| s.parse().unwrap());
                let _ = tx.send((addr, admin));
            }
            sink.lock().unwrap().push(line);
        }
    });
    // The sender is dropped when stderr closes: the process exited without listening.
    match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok((addr, admin)) => Ok(Logged {
            child,
            addr,
            admin,
            lines,
            reader: Some(reader),
        }),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().unwrap();
            let _ = reader.join();
            let text = lines.lock().unwrap().join("\n");
            Err((status, text))
        }
    }
}

impl Logged {
    /// Send `signal` (`TERM`, `USR1`, …) with kill(1).
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal}");
    }

    /// The exit status once the process has exited, waiting at most `within`.
    pub fn wait_exit(&mut self, within: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // Its stderr is closed: read it to the end.
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return Some(s);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status (at most 30 s), with stderr read to its end.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        self.wait_exit(std::time::Duration::from_secs(30))
            .expect("tollgate exits within 30 s of SIGTERM")
    }

    /// The stderr lines read so far.
    pub fn stderr(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

/// `tollgate serve -c config` with `env`, its stderr kept line by line: for tests that read
/// what the gateway logged (the access log at `TOLLGATE_ACCESS_LOG_BUFFER=0`, warnings).
pub struct LoggedServe {
    child: Child,
    /// The traffic listener, read from the start-up line (JSON or text format).
    pub addr: SocketAddr,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl LoggedServe {
    pub fn start(config: &Path, env: &[(&str, &str)]) -> LoggedServe {
        let mut child = tollgate()
            .args(["serve", "-c"])
            .arg(config)
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (stderr, sink) = (child.stderr.take().unwrap(), lines.clone());
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("tollgate listening") {
                    let _ = tx.send(line.clone());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let listening = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("tollgate listens");
        LoggedServe {
            child,
            addr: listen_addr(&listening),
            lines,
            reader,
        }
    }

    /// The lines read so far (the process still running).
    pub fn lines_so_far(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// SIGTERM (which flushes the access log), then every line the process wrote: read to
    /// the end of its stderr, so none is still on its way when the caller looks.
    pub fn stop(mut self) -> Vec<String> {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().unwrap();
        self.reader.join().unwrap();
        let lines = self.lines.lock().unwrap();
        lines.clone()
    }
}

/// The `listen` address in the start-up line, JSON (`"listen":"…"`) or text (`listen=…`).
fn listen_addr(line: &str) -> SocketAddr {
    let rest = line
        .split_once("\"listen\":\"")
        .or_else(|| line.split_once("listen="))
        .unwrap_or_else(|| panic!("no listen address: {line}"))
        .1;
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    addr.parse()
        .unwrap_or_else(|_| panic!("bad address in {line}"))
}
