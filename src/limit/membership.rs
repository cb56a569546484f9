//! Membership: how many gateways share the limits right now. It gives the L/N split its N
//! (`site = "split"` policies, and `on_store_error = "local"` while the store is down).
//!
//! Each node renews itself in one sorted set in the store every `heartbeat`, with an expiry
//! of three heartbeats; every renewal also drops expired members and returns the count. So
//! a joining node is counted by everyone within one heartbeat, a dying one is dropped within
//! three, and a node stopping cleanly leaves at once. With the memory store there is no
//! shared place to meet: N stays `[cluster] expected_nodes`. While the store is down the
//! last N known is kept.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tracing::{info, warn};

use super::limiter::Limiter;
use super::store::{RedisStore, StoreError};
use crate::config::Config;
use crate::shutdown::Shutdown;

/// The membership script; see the file.
pub const MEMBERSHIP_LUA: &str = include_str!("membership.lua");

/// A member is dropped after this many missed heartbeats.
const MISSED_BEATS: u32 = 3;

/// This node's membership.
pub struct Membership {
    /// Rescaled when N changes.
    limiter: Arc<Limiter>,
    /// The store's connection, breaker and metrics.
    store: Arc<RedisStore>,
    script: Script,
    /// The sorted set of members (one key, so it works on a cluster too).
    key: String,
    node_id: String,
    /// This process in the set: `node_id#instance`, unique even when two processes share
    /// a node id.
    member: String,
    heartbeat: Duration,
    /// Other live processes with this node id at the last beat (warned about on change).
    twins: std::sync::atomic::AtomicU64,
}

impl Membership {
    /// `None` with the memory store: N is `expected_nodes` for good.
    pub fn new(config: &Config, limiter: Arc<Limiter>) -> Option<Membership> {
        let store = limiter.store()?.clone();
        Some(Membership {
            key: format!("{}members", config.store.key_prefix),
            node_id: config.cluster.node_id.clone(),
            member: format!("{}#{}", config.cluster.node_id, instance()),
            heartbeat: config.cluster.heartbeat,
            twins: std::sync::atomic::AtomicU64::new(0),
            script: Script::new(MEMBERSHIP_LUA),
            limiter,
            store,
        })
    }

    /// Renew this node and rescale to the members counted; returns N.
    pub async fn beat(&self) -> Result<NonZeroU32, StoreError> {
        let n = self.call("join").await?;
        if self.limiter.set_nodes(n) {
            info!(nodes = n.get(), node_id = %self.node_id, "membership changed: limits rescaled to L/N");
        }
        // The store answers: pay what the outage fallback spent, even with no traffic to
        // pay it (`store/debts.rs`).
        self.store.start_paying();
        Ok(n)
    }

    /// Leave the set (a clean stop): the others rescale on their next beat.
    pub async fn leave(&self) {
        let _ = self.call("leave").await;
    }

    /// Beat every `heartbeat` until `shutdown`, then leave.
    pub async fn run(self, mut shutdown: Shutdown) {
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = self.beat().await {
                        warn!(error = %e, nodes = self.limiter.nodes().get(), "membership heartbeat failed; keeping the last N");
                    }
                }
                _ = shutdown.recv() => break,
            }
        }
        self.leave().await;
    }

    async fn call(&self, op: &'static str) -> Result<NonZeroU32, StoreError> {
        let ttl_ms = (self.heartbeat * MISSED_BEATS).as_millis().max(1) as u64;
        let args = [op.to_string(), self.member.clone(), ttl_ms.to_string()];
        let reply = self
            .store
            .eval_script(
                &self.script,
                "membership",
                std::slice::from_ref(&self.key),
                &args,
            )
            .await?;
        match reply.as_slice() {
            [n, twins] => {
                self.warn_twins(u64::try_from(*twins).unwrap_or(0));
                Ok(u32::try_from(*n)
                    .ok()
                    .and_then(NonZeroU32::new)
                    .unwrap_or(NonZeroU32::MIN))
            }
            other => Err(StoreError::Reply(format!(
                "membership script: {} values",
                other.len()
            ))),
        }
    }

    /// Another live process shares this node id: counted apart (N stays right), but the
    /// operator most likely copied one config to every node. Said once per change.
    fn warn_twins(&self, twins: u64) {
        use std::sync::atomic::Ordering;
        if self.twins.swap(twins, Ordering::Relaxed) != twins && twins > 0 {
            warn!(node_id = %self.node_id, others = twins, "another gateway uses this [cluster] node_id; both are counted, but give each node its own");
        }
    }
}

/// This process's instance id: random per start (the std hasher's random keys, the pid and
/// the time), so a restarted or copied node never takes another's place in the set.
fn instance() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", h.finish())
}
