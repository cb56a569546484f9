//! The three gateways on one real `redis-server` admit at most `burst + elapsed × rate` for
//! both the central and the lease policy; `run.sh` starts Redis and the three gateways and
//! stops them all on SIGTERM; the README's backend lines serve `/items`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http::StatusCode;

use crate::common::process::{GatewayProcess, spawn_serve_with_env, temp_file};
use crate::common::redis::RedisServer;
use crate::common::*;
use crate::running::{keyed, offer};
use crate::{SECRETS, examples, read, rewrite};

/// The three gateway configs of `three-gateways-redis`, on `redis`, free ports and `up`.
fn three_gateway_configs(redis: &RedisServer, up: SocketAddr) -> Vec<PathBuf> {
    let dir = examples().join("three-gateways-redis");
    (1..=3)
        .map(|i| {
            let cfg = rewrite(
                &read(&dir.join(format!("gw{i}.toml"))),
                &[
                    ("redis://127.0.0.1:6379", &redis.url()),
                    ("http://127.0.0.1:3000", &format!("http://{up}")),
                    (&format!("\"127.0.0.1:808{i}\""), "\"127.0.0.1:0\""),
                    (&format!("\"127.0.0.1:991{i}\""), "\"127.0.0.1:0\""),
                    // The bound is the store's: a 10 ms timeout on a busy test machine would
                    // send slow answers to the L/N fallback, whose bound is another one.
                    ("timeout = \"10ms\"", "timeout = \"1s\""),
                ],
            );
            temp_file(&format!("gw{i}.toml"), &cfg)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_one_redis_admit_one_limit_central_and_lease() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let nodes: Vec<GatewayProcess> = three_gateway_configs(&redis, up)
        .iter()
        .map(|c| spawn_serve_with_env(c, SECRETS))
        .collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();

    // per_account (central): 600 a minute, burst 100.
    let (admitted, elapsed) = offer(&addrs, "/items", "central-key").await;
    let bound = 100 + (elapsed * 10.0).floor() as u64;
    assert!(
        admitted <= bound,
        "central: {admitted} admitted > {bound} in {elapsed:.2}s"
    );
    assert!(
        admitted >= 100,
        "central: {admitted}: the burst was not shared but starved"
    );

    // search_per_account (lease): 100/s, burst 50; never above the limit.
    let (admitted, elapsed) = offer(&addrs, "/search", "lease-key").await;
    let bound = 50 + (elapsed * 100.0).floor() as u64;
    assert!(
        admitted <= bound,
        "lease: {admitted} admitted > {bound} in {elapsed:.2}s"
    );
    assert!(
        admitted >= 25,
        "lease: {admitted} admitted in {elapsed:.2}s"
    );
    let mut lease_calls = 0.0;
    for n in &nodes {
        let m = metrics_text(n.admin.unwrap()).await;
        lease_calls += metric_sum(&m, "tollgate_store_calls_total{op=\"lease\"}");
    }
    assert!(
        lease_calls < admitted as f64,
        "{lease_calls} lease calls for {admitted} admitted: cells come in batches"
    );
}

/// `redis-cli -p port args...`, its output trimmed.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (scripts/test.sh installs redis-tools)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `run.sh`, killed with SIGTERM on drop (its trap stops what it started).
struct RunSh(Child);

impl Drop for RunSh {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/PID; its state letter is Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sh_starts_redis_and_three_gateways_and_stops_them_on_sigterm() {
    let up = echo_upstream().await;
    let ports = peers::free_ports(6);
    let list = |p: &[SocketAddr]| {
        p.iter()
            .map(|a| a.port().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut child = Command::new("bash")
        .arg(examples().join("three-gateways-redis/run.sh"))
        .env("TOLLGATE", env!("CARGO_BIN_EXE_tollgate"))
        .env("UPSTREAM", format!("http://{up}"))
        .env("LISTEN_PORTS", list(&ports[..3]))
        .env("ADMIN_PORTS", list(&ports[3..]))
        .env_remove("TOLLGATE_ACCOUNT_HASH_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let run = RunSh(child);
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut pids = Vec::new();
    let mut redis_port = None;
    loop {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("run.sh says ready within 30 s");
        if let Some(rest) = line.split(" pid ").nth(1) {
            pids.push(rest.split(' ').next().unwrap().parse::<u32>().unwrap());
        }
        if line.starts_with("redis-server") {
            let port = line.rsplit(':').next().unwrap().parse::<u16>().unwrap();
            redis_port = Some(port);
        }
        if line.starts_with("ready") {
            break;
        }
    }
    assert_eq!(pids.len(), 4, "redis-server and three gateways");
    let redis_port = redis_port.unwrap();
    assert_eq!(redis_cli(redis_port, &["PING"]), "PONG");
    for addr in &ports[..3] {
        assert_eq!(keyed(*addr, "/items", "k").await, StatusCode::OK, "{addr}");
    }
    // The gateways share the key in that Redis.
    let keys = redis_cli(redis_port, &["KEYS", "tg:*"]);
    assert!(keys.contains("per_account"), "{keys}");

    drop(run);
    for pid in &pids {
        eventually(
            "run.sh's processes stopped",
            Duration::from_secs(10),
            || async { !alive(*pid) },
        )
        .await;
    }
    for addr in &ports[..3] {
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "{addr} still open"
        );
    }
}

/// A process started by `sh -c`, killed by pid on drop.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The README's backend lines run as written (issue 52: `python3 -m http.server` answered
/// 404 to `/items`, so the passes it showed were 404s): its folder and port alone replaced,
/// a gateway in front of it answers `/items` with 200 and the file's `[]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_backend_answers_items() {
    let readme = read(&examples().join("three-gateways-redis/README.md"));
    let dir = crate::common::temp::TempDir::new("tg-backend");
    let port = peers::free_ports(1)[0];
    let lines: Vec<String> = readme
        .lines()
        .filter(|l| l.contains("/tmp/tg-backend"))
        .map(|l| {
            l.split(" #")
                .next()
                .unwrap()
                .trim()
                .trim_end_matches('&')
                .replace("/tmp/tg-backend", &dir.0.display().to_string())
                .replace(" 3000 ", &format!(" {} ", port.port()))
        })
        .collect();
    assert_eq!(
        lines.len(),
        2,
        "the README's backend is a mkdir line and an http.server line: {lines:?}"
    );
    let made = Command::new("sh").args(["-c", &lines[0]]).status().unwrap();
    assert!(made.success(), "{}", lines[0]);
    let _backend = Started(
        Command::new("sh")
            .args(["-c", &format!("exec {}", lines[1])])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    eventually(
        "the README's backend listening",
        Duration::from_secs(10),
        || async move { tokio::net::TcpStream::connect(port).await.is_ok() },
    )
    .await;

    let redis = RedisServer::start();
    let config = &three_gateway_configs(&redis, port)[0];
    let gw = spawn_serve_with_env(config, SECRETS);
    let req = http::Request::get(format!("http://{}/items", gw.addr))
        .header("x-api-key", "k1")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send_h1(gw.addr, req).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await.trim(), "[]");
}
