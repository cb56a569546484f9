//! Proves the Redis test harness itself: real `redis-server` processes (single and cluster)
//! and the fault-injecting proxy, so failure tests built on them test the gateway, not luck.

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::faulty::{Fault, FaultyProxy};
use crate::common::redis::{RedisCluster, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

const PATIENCE: Duration = Duration::from_secs(5);

/// Sends an inline command and reads the first reply line, e.g. "+PONG".
async fn roundtrip(conn: &mut TcpStream, cmd: &str) -> io::Result<String> {
    conn.write_all(format!("{cmd}\r\n").as_bytes()).await?;
    read_line(conn).await
}

async fn read_line(conn: &mut TcpStream) -> io::Result<String> {
    let mut line = Vec::new();
    while !line.ends_with(b"\r\n") {
        let mut byte = [0u8];
        if conn.read(&mut byte).await? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        line.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&line[..line.len() - 2]).into_owned())
}

async fn ping(addr: SocketAddr) -> String {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    timeout(PATIENCE, roundtrip(&mut conn, "PING"))
        .await
        .expect("PING answered")
        .unwrap()
}

fn pid_of(server: &RedisServer) -> u32 {
    let info = server.cli(&["INFO", "server"]);
    let line = info.lines().find(|l| l.starts_with("process_id:")).unwrap();
    line["process_id:".len()..].trim().parse().unwrap()
}

fn refuses(addr: SocketAddr) -> bool {
    matches!(std::net::TcpStream::connect(addr), Err(e) if e.kind() == ErrorKind::ConnectionRefused)
}

#[tokio::test]
async fn single_server_answers_ping_and_set_get() {
    let server = RedisServer::start();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port));
    assert_eq!(ping(server.addr()).await, "+PONG");
    let mut conn = TcpStream::connect(server.addr()).await.unwrap();
    assert_eq!(
        roundtrip(&mut conn, "SET greeting hello").await.unwrap(),
        "+OK"
    );
    assert_eq!(server.cli(&["GET", "greeting"]), "hello");
    assert_eq!(roundtrip(&mut conn, "GET greeting").await.unwrap(), "$5");
    assert_eq!(read_line(&mut conn).await.unwrap(), "hello");
}

#[test]
fn restart_loses_keys_and_keeps_the_port() {
    let mut server = RedisServer::start();
    let (port, pid) = (server.port, pid_of(&server));
    assert_eq!(server.cli(&["SET", "k", "v"]), "OK");
    assert_eq!(server.cli(&["EXISTS", "k"]), "1");
    server.restart();
    assert_eq!(server.port, port);
    assert_ne!(pid_of(&server), pid, "a new process");
    assert_eq!(server.cli(&["EXISTS", "k"]), "0");
}

#[test]
fn stopped_server_refuses_then_starts_again() {
    let mut server = RedisServer::start();
    server.stop();
    assert!(refuses(server.addr()));
    server.start_again();
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn drop_kills_the_process_and_removes_its_dir() {
    let server = RedisServer::start();
    let (addr, pid, dir) = (server.addr(), pid_of(&server), server.dir().to_owned());
    assert!(Path::new(&format!("/proc/{pid}")).exists() && dir.exists());
    drop(server);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} reaped"
    );
    assert!(!dir.exists());
    assert!(refuses(addr));
}

#[test]
fn parallel_starts_get_their_own_servers() {
    let servers: Vec<RedisServer> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6).map(|_| s.spawn(RedisServer::start)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut pids: Vec<u32> = servers.iter().map(pid_of).collect();
    let mut ports: Vec<u16> = servers.iter().map(|s| s.port).collect();
    pids.sort();
    pids.dedup();
    ports.sort();
    ports.dedup();
    assert_eq!((pids.len(), ports.len()), (6, 6));
}

#[test]
fn cluster_forms_with_three_masters() {
    let cluster = RedisCluster::start(3);
    assert_eq!(cluster.urls().len(), 3);
    for node in 0..3 {
        assert!(
            cluster
                .cli(node, &["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
        );
    }
    let nodes = cluster.cli(0, &["CLUSTER", "NODES"]);
    assert_eq!(
        nodes.lines().filter(|l| l.contains("master")).count(),
        3,
        "{nodes}"
    );
    // Keys land on different nodes; -c follows the MOVED redirects.
    for key in ["a", "b", "c", "d"] {
        assert_eq!(cluster.cli(0, &["-c", "SET", key, "1"]), "OK");
    }
    let keys: Vec<String> = (0..3).map(|n| cluster.cli(n, &["DBSIZE"])).collect();
    assert!(keys.iter().filter(|k| *k != "0").count() >= 2, "{keys:?}");
    let addrs: Vec<SocketAddr> = cluster.nodes.iter().map(RedisServer::addr).collect();
    drop(cluster);
    assert!(addrs.into_iter().all(refuses));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_passes_in_pass_mode() {
    let server = RedisServer::start();
    let proxy = FaultyProxy::start(server.addr()).await;
    assert_eq!(proxy.url(), format!("redis://{}", proxy.addr));
    assert_eq!(ping(proxy.addr).await, "+PONG");
    let mut conn = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(roundtrip(&mut conn, "SET via proxy").await.unwrap(), "+OK");
    assert_eq!(server.cli(&["GET", "via"]), "proxy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_delay_adds_latency_both_ways() {
    let server = RedisServer::start();
    let proxy = FaultyProxy::start(server.addr()).await;
    let mut conn = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(roundtrip(&mut conn, "PING").await.unwrap(), "+PONG");
    proxy.set(Fault::Delay(Duration::from_millis(200)));
    let started = Instant::now();
    assert_eq!(roundtrip(&mut conn, "PING").await.unwrap(), "+PONG");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(400), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_blackhole_swallows_then_pass_resumes() {
    let server = RedisServer::start();
    let proxy = FaultyProxy::start(server.addr()).await;
    let mut old = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(roundtrip(&mut old, "PING").await.unwrap(), "+PONG");
    proxy.set(Fault::Blackhole);
    let wait = Duration::from_millis(500);
    let held = timeout(wait, roundtrip(&mut old, "PING")).await;
    assert!(
        held.is_err(),
        "no answer on an existing connection: {held:?}"
    );
    // New connections are accepted but go nowhere.
    let mut new = TcpStream::connect(proxy.addr).await.unwrap();
    let held = timeout(wait, roundtrip(&mut new, "PING")).await;
    assert!(held.is_err(), "no answer on a new connection: {held:?}");
    proxy.set(Fault::Pass);
    assert_eq!(ping(proxy.addr).await, "+PONG");
    // The PING held on the old connection is delivered now.
    let resumed = timeout(PATIENCE, read_line(&mut old)).await.unwrap();
    assert_eq!(resumed.unwrap(), "+PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_reset_breaks_connections() {
    let server = RedisServer::start();
    let proxy = FaultyProxy::start(server.addr()).await;
    let mut conn = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(roundtrip(&mut conn, "PING").await.unwrap(), "+PONG");
    proxy.set(Fault::Reset);
    let mut buf = [0u8; 16];
    let read = timeout(PATIENCE, conn.read(&mut buf)).await.unwrap();
    assert_eq!(read.unwrap_err().kind(), ErrorKind::ConnectionReset);
    // New connections are accepted, then reset: so fast that connect itself may see it.
    let read = match TcpStream::connect(proxy.addr).await {
        Ok(mut new) => timeout(PATIENCE, new.read(&mut buf)).await.unwrap(),
        Err(e) => Err(e),
    };
    assert_eq!(read.unwrap_err().kind(), ErrorKind::ConnectionReset);
    proxy.set(Fault::Pass);
    assert_eq!(ping(proxy.addr).await, "+PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_refuse_refuses_then_pass_listens_again() {
    let server = RedisServer::start();
    let proxy = FaultyProxy::start(server.addr()).await;
    let mut conn = TcpStream::connect(proxy.addr).await.unwrap();
    assert_eq!(roundtrip(&mut conn, "PING").await.unwrap(), "+PONG");
    proxy.set(Fault::Refuse);
    let refused = TcpStream::connect(proxy.addr).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
    let mut buf = [0u8; 16];
    let read = timeout(PATIENCE, conn.read(&mut buf)).await.unwrap();
    assert!(
        !matches!(read, Ok(n) if n > 0),
        "existing connection cut: {read:?}"
    );
    proxy.set(Fault::Pass);
    assert_eq!(ping(proxy.addr).await, "+PONG");
}
