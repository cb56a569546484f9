//! A real `redis-server` for the scripts' tests: one standalone server on a free loopback
//! port with its own temp dir, without persistence, killed by pid when its handle drops.
//! A small copy of the gateway's `tests/common/redis.rs` (no cluster, TLS or restarts).

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A free port can be taken by someone else between our probe and the server's bind.
const START_ATTEMPTS: usize = 5;
const READY_TIMEOUT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(10);

/// One `redis-server` on `127.0.0.1:port`.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a server and returns once it answers on its port as itself.
    pub fn start() -> Self {
        let mut errors = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let mut server = RedisServer {
                port: free_port(),
                child: None,
                dir: fresh_dir(),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => errors.push(e),
            }
        }
        panic!(
            "redis-server did not start in {START_ATTEMPTS} attempts:\n{}",
            errors.join("\n---\n")
        );
    }

    /// A multiplexed connection to this server (the scripts' tests call it directly).
    pub async fn connect(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port))
            .expect("a redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connecting to the test redis")
    }

    /// Runs `redis-cli -p PORT args...` and returns its stdout, trimmed. Error replies come
    /// back as text ("ERR ..."); a server that cannot be reached panics.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = match Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
        {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                panic!("redis-cli not found: run scripts/test.sh, which installs it")
            }
            other => other.expect("run redis-cli"),
        };
        assert!(
            out.status.success(),
            "redis-cli -p {} {args:?} failed: {}",
            self.port,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Runs the server and waits until it answers as itself (its pid, not another test's
    /// server that grabbed the port); on failure it is killed and its output returned.
    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("redis.log");
        let log = File::create(&log_path).expect("create redis.log");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "yes", "--dir"])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log);
        let child = match cmd.spawn() {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                panic!("redis-server not found: run scripts/test.sh, which installs it")
            }
            other => other.expect("spawn redis-server"),
        };
        let pid = child.id();
        let child = self.child.insert(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        let outcome = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Err(format!("redis-server exited with {status}"));
            }
            match info_server(self.port) {
                Ok(info) if info.contains(&format!("process_id:{pid}\r")) => break Ok(()),
                Ok(_) => break Err(format!("port {} is another redis-server's", self.port)),
                Err(_) if Instant::now() < deadline => std::thread::sleep(POLL),
                Err(e) => break Err(format!("no answer within {READY_TIMEOUT:?}: {e}")),
            }
        };
        outcome.map_err(|e| {
            self.stop();
            let output = fs::read_to_string(&log_path).unwrap_or_default();
            format!("{e}; its output:\n{output}")
        })
    }

    /// Kills the server by pid and waits for it.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `INFO server` over raw TCP (polling through `redis-cli` would spawn a process per try).
fn info_server(port: u16) -> io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    conn.write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")?;
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let len = (line.trim_end().strip_prefix('$'))
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| io::Error::other(format!("unexpected reply {line:?}")))?;
    let mut buf = vec![0; len + 2];
    reader.read_exact(&mut buf)?;
    buf.truncate(len);
    String::from_utf8(buf).map_err(io::Error::other)
}

/// A port the OS found free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("a bound address").port()
}

/// An empty temp dir of its own for one server.
fn fresh_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tollgate-limit-redis-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}
