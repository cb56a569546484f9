//! Real `redis-server` processes for tests: a single server or a Redis Cluster, each node on
//! free loopback ports with its own temp dir, so tests can run in parallel without sharing
//! state, and each process is killed by pid when its handle drops.
#![allow(dead_code)]

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A free port can be taken by someone else between our probe and the server's bind.
const START_ATTEMPTS: usize = 5;
const READY_TIMEOUT: Duration = Duration::from_secs(5);
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(10);

/// One `redis-server` on `127.0.0.1:port`, by default without persistence, so a restart comes back empty.
pub struct RedisServer {
    pub port: u16,
    /// `None` while stopped.
    child: Option<Child>,
    dir: PathBuf,
    /// The cluster bus port of a cluster node, kept so a restarted node is the same node.
    bus_port: Option<u16>,
    /// Append-only file, fsynced on every write: a kill -9 loses nothing.
    persistent: bool,
    /// A TLS port besides the plain one (which the harness itself uses), with the shipped
    /// development certificate; `.1`: clients must present a certificate it vouches for.
    tls: Option<(u16, bool)>,
    /// More `redis-server` arguments (`--replicaof HOST PORT`).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a standalone server and returns once it answers on its port.
    pub fn start() -> Self {
        Self::launch(false, false)
    }

    /// A standalone server that also speaks TLS (`tls_url`) with `certs/localhost.pem`;
    /// with `client_auth`, TLS clients must present a certificate that one vouches for.
    pub fn start_tls(client_auth: bool) -> Self {
        Self::launch_with(false, false, Some(client_auth))
    }

    /// A replica of `master` (returns once it answers; replication may still be syncing).
    pub fn start_replica_of(master: &RedisServer) -> Self {
        let extra = vec![
            "--replicaof".to_string(),
            "127.0.0.1".to_string(),
            master.port.to_string(),
        ];
        Self::launch_full(false, false, None, extra)
    }

    /// `rediss://localhost:TLS_PORT` (the certificate names localhost).
    pub fn tls_url(&self) -> String {
        let (port, _) = self.tls.expect("started with start_tls");
        format!("rediss://localhost:{port}")
    }

    /// A standalone server that keeps every write across a kill -9 and restart (AOF with
    /// `appendfsync always`), like a production Redis that crashed and came back.
    pub fn start_persistent() -> Self {
        Self::launch(false, true)
    }

    /// A multiplexed connection to this server (the scripts' tests call it directly).
    pub async fn connect(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("a redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connecting to the test redis")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The server's working dir (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `redis-cli -p PORT args...` and returns its stdout, trimmed. Error replies come
    /// back as text ("ERR ..."); a server that cannot be reached panics. Blocks the thread,
    /// so run slow commands (DEBUG SLEEP) on `spawn_blocking` or a thread.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// Scripts this server has run (EVAL and EVALSHA calls): how a test sees a call the
    /// store sent again.
    pub fn scripts_run(&self) -> u64 {
        scripts_run_in(&self.cli(&["INFO", "commandstats"]))
    }

    /// Kills the server (SIGKILL, so nothing is saved) and starts it again on the same port:
    /// every key and loaded script is gone, like a Redis that crashed and came back.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Kills the server by pid and waits for it, so its port refuses connections on return.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a stopped server again on the same port, empty.
    pub fn start_again(&mut self) {
        assert!(
            self.child.is_none(),
            "redis-server on port {} is running",
            self.port
        );
        if let Err(e) = self.spawn() {
            panic!("redis-server did not come back on port {}: {e}", self.port);
        }
    }

    fn launch(cluster: bool, persistent: bool) -> Self {
        Self::launch_with(cluster, persistent, None)
    }

    fn launch_with(cluster: bool, persistent: bool, tls: Option<bool>) -> Self {
        Self::launch_full(cluster, persistent, tls, Vec::new())
    }

    fn launch_full(cluster: bool, persistent: bool, tls: Option<bool>, extra: Vec<String>) -> Self {
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir: fresh_dir(),
            bus_port: None,
            persistent,
            tls: None,
            extra,
        };
        let mut errors = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let ports = free_ports(if cluster || tls.is_some() { 2 } else { 1 });
            server.port = ports[0];
            if let Some(auth) = tls {
                server.tls = Some((ports[1], auth));
            } else {
                server.bus_port = ports.get(1).copied();
            }
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

    /// Runs the server and waits until it answers as itself (its pid, not another test's
    /// server that grabbed the port); on failure it is killed and its output returned.
    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("redis.log");
        let log = File::create(&log_path).expect("create redis.log");
        let port = self.port.to_string();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(if self.persistent {
                ["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                ["--appendonly", "no", "--appendfsync", "everysec"]
            })
            .args(["--daemonize", "no"])
            .args(["--enable-debug-command", "yes", "--dir"])
            .arg(&self.dir);
        cmd.args(&self.extra);
        if let Some((tls_port, auth)) = self.tls {
            let cert = Path::new(env!("CARGO_MANIFEST_DIR")).join("certs/localhost.pem");
            let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("certs/localhost-key.pem");
            cmd.args(["--tls-port", &tls_port.to_string(), "--tls-cert-file"])
                .arg(&cert)
                .arg("--tls-key-file")
                .arg(&key)
                .arg("--tls-ca-cert-file")
                .arg(&cert)
                .args(["--tls-auth-clients", if auth { "yes" } else { "no" }]);
        }
        if let Some(bus) = self.bus_port {
            cmd.args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                .args(["--cluster-port", &bus.to_string(), "--cluster-config-file"])
                .arg(self.dir.join("nodes.conf"));
        }
        cmd.stdin(Stdio::null())
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
            match command(self.port, &["INFO", "server"]) {
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
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A real Redis Cluster of masters only, formed with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` nodes, creates the cluster, and returns once every node reports
    /// `cluster_state:ok` and knows every other node.
    pub fn start(masters: usize) -> Self {
        assert!(masters >= 3, "a Redis Cluster needs at least 3 masters");
        let cluster = RedisCluster {
            nodes: (0..masters)
                .map(|_| RedisServer::launch(true, false))
                .collect(),
        };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = run_cli(|cmd| {
            cmd.args(["--cluster", "create"]).args(&addrs).args([
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ]);
        });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_until_ok();
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redis-cli` against node `node`; pass `-c` first to follow MOVED redirects.
    pub fn cli(&self, node: usize, args: &[&str]) -> String {
        self.nodes[node].cli(args)
    }

    /// The index of the node that owns `key` (the others answer `MOVED`).
    pub fn owner(&self, key: &str) -> usize {
        (0..self.nodes.len())
            .find(|&i| !self.cli(i, &["EXISTS", key]).contains("MOVED"))
            .expect("some node owns the key")
    }

    fn wait_until_ok(&self) {
        let known = format!("cluster_known_nodes:{}\r", self.nodes.len());
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let infos: Vec<String> = self
                .nodes
                .iter()
                .map(|n| command(n.port, &["CLUSTER", "INFO"]).unwrap_or_else(|e| e.to_string()))
                .collect();
            if infos
                .iter()
                .all(|i| i.contains("cluster_state:ok\r") && i.contains(&known))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster not ok within {CLUSTER_TIMEOUT:?}:\n{}",
                infos.join("\n---\n")
            );
            std::thread::sleep(POLL);
        }
    }
}

pub(super) fn cli(port: u16, args: &[&str]) -> String {
    let out = run_cli(|cmd| {
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args);
    });
    assert!(
        out.status.success(),
        "redis-cli -p {port} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn run_cli(build: impl FnOnce(&mut Command)) -> Output {
    let mut cmd = Command::new("redis-cli");
    build(&mut cmd);
    match cmd.stdin(Stdio::null()).output() {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("redis-cli not found: run scripts/test.sh, which installs it")
        }
        other => other.expect("run redis-cli"),
    }
}

/// Sends one command as a RESP array and returns a status, integer or bulk reply as text.
/// Raw TCP because polling through `redis-cli` would spawn a process per try.
pub(super) fn command(port: u16, args: &[&str]) -> io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    conn.write_all(req.as_bytes())?;
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end();
    match line.split_at_checked(1) {
        Some(("+" | ":", rest)) => Ok(rest.to_string()),
        Some(("$", len)) => {
            let len: usize = len.parse().map_err(io::Error::other)?;
            let mut buf = vec![0; len + 2];
            reader.read_exact(&mut buf)?;
            buf.truncate(len);
            String::from_utf8(buf).map_err(io::Error::other)
        }
        _ => Err(io::Error::other(format!("unexpected reply {line:?}"))),
    }
}

/// Ports the OS found free a moment ago; held together so they differ from each other.
pub(super) fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

pub(super) fn fresh_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tollgate-redis-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// EVAL and EVALSHA calls counted in an `INFO commandstats` answer.
pub fn scripts_run_in(commandstats: &str) -> u64 {
    commandstats
        .lines()
        .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
