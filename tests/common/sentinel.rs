//! A Redis Sentinel setup for tests: a master, a replica and three `redis-server
//! --sentinel` processes monitoring them as `mymaster`, on free loopback ports, each killed
//! by pid on drop; `failover` forces a switch and returns once the sentinels name the new
//! master.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::redis::{RedisServer, cli, command, free_ports, fresh_dir};

pub const MASTER_NAME: &str = "mymaster";
const WAIT: Duration = Duration::from_secs(20);

pub struct Sentinels {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child, PathBuf)>,
}

/// Poll `cond` every 50 ms until it holds; panic with `what` after [`WAIT`].
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Sentinels {
    /// Master, replica in sync, and three sentinels that see both.
    pub fn start() -> Self {
        let master = RedisServer::start();
        let replica = RedisServer::start_replica_of(&master);
        wait_for("the replica syncs", || {
            command(replica.port, &["INFO", "replication"])
                .is_ok_and(|i| i.contains("master_link_status:up"))
        });
        let sentinels = free_ports(3)
            .into_iter()
            .map(|port| sentinel(port, master.port))
            .collect();
        let s = Sentinels {
            master,
            replica,
            sentinels,
        };
        let replica_port = s.replica.port.to_string();
        for &(port, _, _) in &s.sentinels {
            wait_for("a sentinel sees the replica", || {
                cli(port, &["SENTINEL", "replicas", MASTER_NAME]).contains(&replica_port)
            });
        }
        s
    }

    /// The sentinels' addresses, for `[store] sentinels`.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|(p, _, _)| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The port of the master the first sentinel names.
    pub fn master_port(&self) -> u16 {
        let out = cli(
            self.sentinels[0].0,
            &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
        );
        out.lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .expect("a master address")
    }

    /// Force a failover; returns once every sentinel names the replica as master, it takes
    /// writes, and the old master is a replica.
    pub fn failover(&self) {
        assert_eq!(
            cli(self.sentinels[0].0, &["SENTINEL", "FAILOVER", MASTER_NAME]),
            "OK"
        );
        let replica = self.replica.port;
        for &(port, _, _) in &self.sentinels {
            wait_for("the sentinels name the new master", || {
                cli(port, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
                    .lines()
                    .nth(1)
                    .is_some_and(|p| p.trim() == replica.to_string())
            });
        }
        wait_for("the new master takes writes", || {
            command(replica, &["INFO", "replication"]).is_ok_and(|i| i.contains("role:master"))
        });
        // And the old master is demoted: a client still talking to it is refused writes.
        wait_for("the old master is a replica", || {
            command(self.master.port, &["INFO", "replication"])
                .is_ok_and(|i| i.contains("role:slave"))
        });
    }
}

fn sentinel(port: u16, master: u16) -> (u16, Child, PathBuf) {
    let dir = fresh_dir();
    let conf = dir.join("sentinel.conf");
    fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 3000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir.display()
        ),
    )
    .unwrap();
    let log = fs::File::create(dir.join("sentinel.log")).unwrap();
    let child = Command::new("redis-server")
        .arg(&conf)
        .arg("--sentinel")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn redis-server --sentinel");
    wait_for("a sentinel answers", || command(port, &["PING"]).is_ok());
    (port, child, dir)
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (_, child, dir) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
            let _ = fs::remove_dir_all(dir);
        }
    }
}
