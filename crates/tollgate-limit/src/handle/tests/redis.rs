//! One real `redis-server` for the handle's tests, on a free loopback port, killed by pid
//! when dropped: the library crate cannot use the gateway's harness (`tests/common/redis.rs`
//! is the full one: clusters, TLS, restarts); this is the least of it.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port can be taken between the probe and the server's bind: try again.
const ATTEMPTS: usize = 5;
const READY: Duration = Duration::from_secs(5);

pub(super) struct RedisServer {
    pub(super) port: u16,
    child: Child,
}

impl RedisServer {
    /// A server without persistence, answering on its port when this returns.
    pub(super) fn start() -> RedisServer {
        for _ in 0..ATTEMPTS {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH");
            let deadline = Instant::now() + READY;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // Exited: most likely the port was taken.
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return RedisServer { port, child };
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start");
    }

    pub(super) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A connection of the test's own, to look at what the handle left in the store.
    pub(super) async fn connect(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("a redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connecting to the test redis")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
