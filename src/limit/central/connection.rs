//! The connection to the store: one multiplexed, auto-reconnecting connection per process
//! (the redis crate's `ConnectionManager`, or its cluster connection), so concurrent
//! requests are pipelined on it without a pool and without waiting for each other.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::OnceCell;

use crate::config::{Store, StoreKind};

/// Single server or cluster; both speak `ConnectionLike`.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    /// Cluster connections are made on first use, so the gateway starts while the cluster
    /// is still down; `OnceCell` retries the connect on the next call after a failure.
    Cluster(std::sync::Arc<LazyCluster>),
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
        let connect_timeout = store.timeout.max(Duration::from_millis(250));
        match store.kind {
            StoreKind::Redis | StoreKind::Memory => {
                let mut info =
                    redis::IntoConnectionInfo::into_connection_info(store.urls[0].as_str())?;
                if let Some(p) = &store.password {
                    let settings = info.redis_settings().clone().set_password(p.clone());
                    info = info.set_redis_settings(settings);
                }
                let client = redis::Client::open(info)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    .set_response_timeout(Some(store.timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(200));
                Ok(Connection::Single(ConnectionManager::new_lazy_with_config(
                    client, config,
                )?))
            }
            StoreKind::RedisCluster => {
                let mut b = ClusterClient::builder(store.urls.iter().map(String::as_str))
                    .connection_timeout(connect_timeout)
                    .response_timeout(store.timeout)
                    .retries(1);
                if let Some(p) = &store.password {
                    b = b.password(p.clone());
                }
                Ok(Connection::Cluster(std::sync::Arc::new(LazyCluster {
                    client: b.build()?,
                    conn: OnceCell::new(),
                })))
            }
        }
    }
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
        }
    }

    fn get_db(&self) -> i64 {
        0
    }
}
