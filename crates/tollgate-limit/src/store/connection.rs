//! A connection to the store: multiplexed and auto-reconnecting (the redis crate's
//! `ConnectionManager`, or its cluster connection), so concurrent requests are pipelined on
//! it without a pool and without waiting for each other. The store keeps one per worker
//! and one for the other threads; `bind_worker` and `conn_of_thread` say which is whose.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::OnceCell;

use super::BACKGROUND_TIMEOUT;
use super::repeat::{cluster_connect_wait, cluster_wait};
use super::sentinel::LazySentinel;
use crate::spec::{Store, StoreKind};

/// Single server or cluster; both speak `ConnectionLike`.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    /// Cluster connections are made on first use, so the gateway starts while the cluster
    /// is still down; `OnceCell` retries the connect on the next call after a failure.
    Cluster(std::sync::Arc<LazyCluster>),
    /// The master named by Redis Sentinel, asked for again after a failover.
    Sentinel(std::sync::Arc<LazySentinel>),
}

pub struct LazyCluster {
    client: ClusterClient,
    conn: OnceCell<ClusterConnection>,
}

impl Connection {
    /// Build the connection; nothing is dialled yet (a store that is down at start-up is
    /// one more store error, not a failed start).
    pub fn new(store: &Store) -> redis::RedisResult<Self> {
        // Reconnects must not take longer than a call may wait.
        let connect_timeout = store.timeout.max(super::CONNECT_TIMEOUT);
        match store.kind {
            StoreKind::Redis | StoreKind::Memory => {
                let mut info =
                    redis::IntoConnectionInfo::into_connection_info(store.urls[0].as_str())?;
                let mut settings = info.redis_settings().clone();
                if let Some(p) = &store.password {
                    settings = settings.set_password(p.clone());
                }
                if let Some(u) = &store.username {
                    settings = settings.set_username(u.clone());
                }
                info = info.set_redis_settings(settings);
                let client = match certificates(store) {
                    Some(certs) => redis::Client::build_with_tls(info, certs)?,
                    None => redis::Client::open(info)?,
                };
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    .set_response_timeout(Some(store.timeout.max(BACKGROUND_TIMEOUT)))
                    // One connect attempt per reconnect, no backoff: a refused connect is
                    // reported at once, and the store's pings retry every 100 ms anyway.
                    .set_number_of_retries(0)
                    .set_max_delay(Duration::from_millis(200));
                Ok(Connection::Single(ConnectionManager::new_lazy_with_config(
                    client, config,
                )?))
            }
            StoreKind::RedisSentinel => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    .set_response_timeout(Some(store.timeout.max(BACKGROUND_TIMEOUT)))
                    .set_number_of_retries(0)
                    .set_max_delay(Duration::from_millis(200));
                Ok(Connection::Sentinel(std::sync::Arc::new(
                    LazySentinel::new(store, config)?,
                )))
            }
            StoreKind::RedisCluster => {
                // Cut, so the client's own resend falls inside a refund marker's life.
                let mut b = ClusterClient::builder(store.urls.iter().map(String::as_str))
                    .connection_timeout(cluster_connect_wait(connect_timeout))
                    .response_timeout(cluster_wait(store.timeout))
                    .retries(1);
                if let Some(p) = &store.password {
                    b = b.password(p.clone());
                }
                if let Some(u) = &store.username {
                    b = b.username(u.clone());
                }
                if let Some(certs) = certificates(store) {
                    b = b.certs(certs);
                }
                Ok(Connection::Cluster(std::sync::Arc::new(LazyCluster {
                    client: b.build()?,
                    conn: OnceCell::new(),
                })))
            }
        }
    }
}

/// The `[store]` TLS material as the redis crate takes it (`None`: the URL's own TLS,
/// with the system's roots, or none for `redis://`).
fn certificates(store: &Store) -> Option<redis::TlsCertificates> {
    let tls = store.tls.as_ref()?;
    Some(redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(_, cert, _, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.ca.as_ref().map(|(_, pem)| pem.clone()),
    })
}

impl Connection {
    /// Whether the store answers: `PING` on a single server; on a cluster `EXISTS key`,
    /// which goes to the one master owning `key` (a cluster `PING` goes to every master,
    /// and must not fail for a node other than the one whose breaker is open). While a
    /// breaker is open this is what makes a dropped connection reconnect.
    pub async fn ping(&mut self, key: &str) -> redis::RedisResult<()> {
        let cmd = match self {
            Connection::Single(_) | Connection::Sentinel(_) => redis::cmd("PING"),
            Connection::Cluster(_) => redis::cmd("EXISTS").arg(key).clone(),
        };
        cmd.query_async::<redis::Value>(self).await.map(drop)
    }

    /// A cluster's slot ranges with their masters' addresses, from `CLUSTER SLOTS`.
    pub async fn cluster_slots(&mut self) -> redis::RedisResult<Vec<(u16, u16, String)>> {
        let reply: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query_async(self).await?;
        Ok(reply.iter().filter_map(slot_range).collect())
    }
}

/// One `CLUSTER SLOTS` entry: `[start, end, [host, port, ...], replicas...]`.
fn slot_range(entry: &Value) -> Option<(u16, u16, String)> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let Some(Value::Array(master)) = parts.get(2) else {
        return None;
    };
    let host = match master.first()? {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    let port = int(master.get(1)?)?;
    Some((
        int(parts.first()?)?,
        int(parts.get(1)?)?,
        format!("{host}:{port}"),
    ))
}

impl LazyCluster {
    async fn get(&self) -> redis::RedisResult<ClusterConnection> {
        self.conn
            .get_or_try_init(|| self.client.get_async_connection())
            .await
            .cloned()
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(lazy) => {
                let lazy = lazy.clone();
                Box::pin(async move { lazy.get().await?.req_packed_command(cmd).await })
            }
            Connection::Sentinel(s) => {
                let s = s.clone();
                Box::pin(async move { s.command(cmd).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(lazy) => {
                let lazy = lazy.clone();
                Box::pin(async move {
                    lazy.get()
                        .await?
                        .req_packed_commands(cmd, offset, count)
                        .await
                })
            }
            Connection::Sentinel(s) => {
                let s = s.clone();
                Box::pin(async move { s.commands(cmd, offset, count).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}

thread_local! {
    /// This thread's worker index, once `bind_worker` has run on it.
    static WORKER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Mark this thread as worker `index`: its store calls then use connection `index` (modulo
/// the workers' connections), whose driver task its first call starts on its own runtime,
/// so a call and its answer never wake another thread. Call at the worker's start.
pub fn bind_worker(index: usize) {
    WORKER.with(|w| w.set(Some(index)));
}

/// Which of `conns` connections this thread uses: a worker its own (see `bind_worker`),
/// every other thread (the main runtime's membership, undos, pings) the last one. Why
/// not first come, first served: the main runtime's threads called first and took a
/// worker's connection, whose driver then ran there, and every call of that worker was
/// two cross-thread wakes (perf: a fifth of the central row's CPU on those threads).
pub(super) fn conn_of_thread(conns: usize) -> usize {
    let workers = conns.saturating_sub(1).max(1);
    WORKER.with(|w| w.get()).map_or(conns - 1, |i| i % workers)
}

#[cfg(test)]
mod tests {
    use super::{bind_worker, conn_of_thread};

    #[test]
    fn workers_have_their_own_connection_and_other_threads_the_last() {
        let on = |worker: Option<usize>, conns: usize| {
            std::thread::spawn(move || {
                if let Some(i) = worker {
                    bind_worker(i);
                }
                conn_of_thread(conns)
            })
            .join()
            .unwrap()
        };
        // Two workers on a two-core machine: three connections.
        assert_eq!(on(Some(0), 3), 0);
        assert_eq!(on(Some(1), 3), 1);
        assert_eq!(on(None, 3), 2);
        // More workers than cores share the workers' connections, never the last one.
        assert_eq!(on(Some(2), 3), 0);
        assert_eq!(on(Some(5), 3), 1);
        // A single core: one worker connection and one for the rest.
        assert_eq!(on(Some(3), 2), 0);
        assert_eq!(on(None, 2), 1);
    }
}
