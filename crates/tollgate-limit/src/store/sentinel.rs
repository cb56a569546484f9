//! The store behind Redis Sentinel: the master's address comes from the sentinels, and a
//! connection that fails (the master died) or is refused writes (`READONLY`: the master
//! was demoted by a failover) is dropped, so the next call asks the sentinels again and
//! reaches the new master. Between the failover and that call, store calls fail and the
//! route's `on_store_error` applies, as for any store outage.

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, Value};
use std::sync::Arc;

use crate::spec::Store;

/// The sentinels and, once found, a connection to the master they name.
pub struct LazySentinel {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    master: ArcSwapOption<ConnectionManager>,
    config: ConnectionManagerConfig,
}

impl LazySentinel {
    pub fn new(store: &Store, config: ConnectionManagerConfig) -> RedisResult<Self> {
        let mut info = redis::RedisConnectionInfo::default();
        if let Some(p) = &store.password {
            info = info.set_password(p.clone());
        }
        if let Some(u) = &store.username {
            info = info.set_username(u.clone());
        }
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(info);
        let sentinel = SentinelClient::build(
            store.sentinels.clone(),
            store.master_name.clone().unwrap_or_default(),
            Some(node),
            SentinelServerType::Master,
        )?;
        Ok(LazySentinel {
            sentinel: tokio::sync::Mutex::new(sentinel),
            master: ArcSwapOption::empty(),
            config,
        })
    }

    /// The master's connection, asking the sentinels when there is none.
    async fn get(&self) -> RedisResult<ConnectionManager> {
        if let Some(m) = self.master.load_full() {
            return Ok((*m).clone());
        }
        let mut sentinel = self.sentinel.lock().await;
        // Another call may have found it while this one waited for the lock.
        if let Some(m) = self.master.load_full() {
            return Ok((*m).clone());
        }
        let client = sentinel.async_get_client().await?;
        let conn = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        self.master.store(Some(Arc::new(conn.clone())));
        Ok(conn)
    }

    /// After a failed call: forget the master if the error says it is gone or demoted.
    fn after(&self, result: &RedisResult<impl Sized>) {
        if let Err(e) = result
            && lost_master(e)
        {
            self.master.store(None);
        }
    }

    pub async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let result = self.get().await?.req_packed_command(cmd).await;
        self.after(&result);
        result
    }

    pub async fn commands(
        &self,
        cmd: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let result = self
            .get()
            .await?
            .req_packed_commands(cmd, offset, count)
            .await;
        self.after(&result);
        result
    }
}

/// A connection-level failure, or a write refused by a node that is no longer the master.
fn lost_master(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        )
        || e.code() == Some("READONLY")
}
