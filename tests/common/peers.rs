//! A fleet of `tollgate serve` processes that talk over the peer transport (`[cluster]
//! peer_listen` / `peers`), for the owner and gossip sites' tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use super::config::fleet;
use super::process::{GatewayProcess, temp_file, try_spawn_serve_with_env};
use super::{eventually, metric_sum, metrics_text};

/// The fleet's shared secret (the children's environment only).
pub const SECRET: &str = "a test fleet's shared peer secret, 32+ bytes";

/// A running fleet: the processes, in the order of their peer addresses.
pub struct PeerFleet {
    pub nodes: Vec<GatewayProcess>,
    pub peers: Vec<SocketAddr>,
    /// Each node's config file, to start it again.
    pub configs: Vec<std::path::PathBuf>,
}

/// `n` free loopback ports (bound, then released).
pub fn free_ports(n: usize) -> Vec<SocketAddr> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// `n` gateways to `up`, each with `limits` (policy and route tables) and `cluster`
/// keys beside the peer ones (`heartbeat`, `gossip_interval`), no store.
pub fn start(n: usize, up: SocketAddr, cluster: &str, limits: &str, name: &str) -> PeerFleet {
    start_each(n, up, cluster, |_| limits.to_string(), name)
}

/// The store (and peer call) `timeout` of the fleets started here.
const TIMEOUT: &str = "300ms";

/// [`start`] with another peer call `timeout` than 300 ms (a fault injector's 10 ms:
/// peers are counted out within a few of them).
pub fn start_with_timeout(
    n: usize,
    up: SocketAddr,
    cluster: &str,
    timeout: &str,
    limits: &str,
    name: &str,
) -> PeerFleet {
    let limits = |_| limits.to_string();
    for _ in 0..4 {
        if let Some(fleet) = try_start_each(n, up, cluster, timeout, &limits, name) {
            return fleet;
        }
    }
    try_start_each(n, up, cluster, timeout, &limits, name)
        .expect("five fleets in a row found a probed peer port taken")
}

/// [`start`] with node `i`'s limits from `limits(i)` (configs that differ).
pub fn start_each(
    n: usize,
    up: SocketAddr,
    cluster: &str,
    limits: impl Fn(usize) -> String,
    name: &str,
) -> PeerFleet {
    // The peer ports are probed free, then released; another socket of this test run (a
    // client's ephemeral port) can take one before its node binds it. Then the whole
    // fleet starts again on new ports: every config lists every peer.
    for _ in 0..4 {
        if let Some(fleet) = try_start_each(n, up, cluster, TIMEOUT, &limits, name) {
            return fleet;
        }
    }
    try_start_each(n, up, cluster, TIMEOUT, &limits, name)
        .expect("five fleets in a row found a probed peer port taken")
}

/// [`start_each`] once: `None` if a node found its address taken (the started ones are
/// stopped as they drop); any other failure to start panics with the node's log.
fn try_start_each(
    n: usize,
    up: SocketAddr,
    cluster: &str,
    timeout: &str,
    limits: &impl Fn(usize) -> String,
    name: &str,
) -> Option<PeerFleet> {
    let peers = free_ports(n);
    let list: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
    let configs: Vec<std::path::PathBuf> = peers
        .iter()
        .enumerate()
        .map(|(i, me)| {
            let keys = format!(
                "node_id = \"n{i}\"\npeer_listen = \"{me}\"\npeers = [{}]\npeer_secret_env = \"TOLLGATE_PEER_SECRET\"\n{cluster}",
                list.join(", ")
            );
            let config = fleet(up, &keys)
                .text(&format!("[store]\ntimeout = \"{timeout}\"\n"))
                .text(&limits(i))
                .build();
            temp_file(&format!("{name}-{i}.toml"), &config)
        })
        .collect();
    let mut nodes = Vec::with_capacity(n);
    for c in &configs {
        match try_spawn_serve_with_env(c, &[("TOLLGATE_PEER_SECRET", SECRET)]) {
            Ok(node) => nodes.push(node),
            Err(log) if log.contains("Address already in use") => return None,
            Err(log) => panic!("tollgate exited before listening:\n{log}"),
        }
    }
    Some(PeerFleet {
        nodes,
        peers,
        configs,
    })
}

/// Send one framed message to a peer port, as anyone on the peer network could; the
/// reply's status as HTTP would say it (200, 401, 400, 500).
pub async fn post_raw(peer: SocketAddr, message: &[u8]) -> u16 {
    use tollgate::limit::peer::frame;
    let mut stream = tokio::net::TcpStream::connect(peer).await.unwrap();
    frame::write(&mut stream, None, message).await.unwrap();
    let len = frame::read_len(&mut stream).await.unwrap();
    let reply = frame::read_body(&mut stream, len).await.unwrap();
    frame::status_code(reply[0])
}

impl PeerFleet {
    /// The index of `key`'s owner, as every node computes it (the ring's rendezvous pick).
    pub fn owner_of(&self, key: &str) -> usize {
        use tollgate::limit::fleet::ring::{node_hash, pick};
        let nodes = self.peers.iter().enumerate();
        pick(key, nodes.map(|(i, p)| (i, node_hash(&p.to_string())))).unwrap()
    }

    /// Start node `i` again from its config (same peer address), at the end of `nodes`.
    /// Its addresses were free when the fleet started; between its death and now another
    /// socket of this test run may have taken one for a moment (a client's ephemeral port):
    /// a start that fails to bind is tried again, and a third failure says why.
    pub fn start_again(&mut self, i: usize) -> &GatewayProcess {
        let env = [("TOLLGATE_PEER_SECRET", SECRET)];
        let mut tries = 0;
        let node = loop {
            match try_spawn_serve_with_env(&self.configs[i], &env) {
                Ok(node) => break node,
                Err(log) if tries == 2 => panic!("node {i} did not start again:\n{log}"),
                Err(_) => tries += 1,
            }
        };
        self.nodes.push(node);
        self.nodes.last().unwrap()
    }

    /// Sum of a metric over every running node.
    pub async fn metric(&self, needle: &str) -> f64 {
        let mut sum = 0.0;
        for n in &self.nodes {
            sum += metric_sum(&metrics_text(n.admin.unwrap()).await, needle);
        }
        sum
    }

    /// Wait until no peer call is in flight anywhere (every call counted has answered or
    /// failed): refunds and debits run in the background.
    pub async fn quiet(&self) {
        eventually("no peer call in flight", Duration::from_secs(5), || async {
            let calls = self.metric("tollgate_peer_calls_total").await;
            let done = self.metric("tollgate_peer_latency_seconds_count").await
                + self.metric("tollgate_peer_errors_total").await;
            calls == done
        })
        .await;
    }

    /// Wait until every node sees every peer live, has heard from each of them, and has
    /// rejoined them (it started quarantined: `fleet/rejoin.rs`).
    pub async fn settled(&self) {
        let n = self.nodes.len();
        for node in &self.nodes {
            let admin = node.admin.unwrap();
            eventually(
                "every peer answering",
                Duration::from_secs(10),
                || async move {
                    let m = metrics_text(admin).await;
                    m.contains(&format!("tollgate_peers_live {n}\n"))
                        && !m.lines().any(|l| l == "tollgate_peer_quarantined 1")
                        && metric_sum(&m, "tollgate_peer_latency_seconds_count") >= (n - 1) as f64
                },
            )
            .await;
        }
    }
}

/// When a request was sent (before its decision), when its answer arrived, and what it was.
pub type Answered = (std::time::Instant, std::time::Instant, http::StatusCode);

/// One GET `/api` as client `ip` every `every` to `addr`, each in its own task (a stopped
/// node's requests queue at it instead of holding the client's pace), until `until`.
pub fn paced(
    addr: SocketAddr,
    ip: &'static str,
    every: Duration,
    until: std::time::Instant,
) -> tokio::task::JoinHandle<Vec<Answered>> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut sent = Vec::new();
        while std::time::Instant::now() < until {
            tick.tick().await;
            sent.push(tokio::spawn(async move {
                let at = std::time::Instant::now();
                let status = super::get_as(addr, "/api", ip, None).await.status();
                (at, std::time::Instant::now(), status)
            }));
        }
        let mut statuses = Vec::with_capacity(sent.len());
        for s in sent {
            statuses.push(s.await.unwrap());
        }
        statuses
    })
}

/// `kill SIG PID` (`-STOP`, `-CONT`): the fault a test injects into a node.
pub fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}
