//! Where shared state lives and who this node is: the store's addresses, credentials and
//! timeouts (`[store]`), and this node's name, heartbeat and peers (`[cluster]`).

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use super::StoreKind;

/// `[store]`, typed.
#[derive(Clone)]
pub struct Store {
    pub kind: StoreKind,
    /// Parsed and checked for the scheme.
    pub urls: Vec<String>,
    /// The password read from `password_env`, never printed.
    pub password: Option<String>,
    /// The ACL user read from `username_env`.
    pub username: Option<String>,
    /// `rediss://` roots and client certificate, when set.
    pub tls: Option<StoreTls>,
    /// redis-sentinel: the sentinels and the master name they monitor.
    pub sentinels: Vec<String>,
    pub master_name: Option<String>,
    pub timeout: Duration,
    pub breaker_failures: NonZeroU32,
    pub breaker_cooldown: Duration,
    pub key_prefix: String,
    /// How what the `on_store_error = "local"` fallback admitted is paid back to the store.
    pub fallback_repay: FallbackRepay,
}

/// `[store] fallback_repay`: how a key's fallback debt is paid once the store is back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackRepay {
    /// The whole debt before the key is decided in the store again: the key is refused
    /// for about debt / rate (a blackout as long as the outage for a key kept at its rate).
    #[default]
    AtOnce,
    /// In installments of at most half the key's rate: clients see about half the rate for
    /// about twice as long instead of nothing (`store/debts.rs`).
    HalfRate,
}

impl FallbackRepay {
    /// As the config spells it.
    pub fn name(self) -> &'static str {
        match self {
            FallbackRepay::AtOnce => "at_once",
            FallbackRepay::HalfRate => "half_rate",
        }
    }
}

impl std::fmt::Debug for Store {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("kind", &self.kind)
            .field("urls", &self.urls)
            .field("timeout", &self.timeout)
            .field("key_prefix", &self.key_prefix)
            .field("fallback_repay", &self.fallback_repay)
            .finish_non_exhaustive()
    }
}

/// `[cluster]`, typed: who this node is and how it announces itself.
#[derive(Clone)]
pub struct Cluster {
    /// N of the L/N split while membership is unknown (memory store, store down at start).
    pub expected_nodes: NonZeroU32,
    /// This node's member name.
    pub node_id: String,
    /// Membership renewal interval; a member missing three beats is dropped.
    pub heartbeat: Duration,
    /// This node's peer endpoint; when `peers` is not empty it is one of them.
    pub peer_listen: Option<SocketAddr>,
    /// The static fleet, this node included, without duplicates; empty: from membership.
    pub peers: Vec<SocketAddr>,
    /// The shared secret read from `peer_secret_env` (at least 32 bytes), never printed;
    /// present whenever `peer_listen` or `peers` is set.
    pub peer_secret: Option<Vec<u8>>,
    /// How often gossip sends deltas to the peers (1 ms to 10 s).
    pub gossip_interval: Duration,
}

impl std::fmt::Debug for Cluster {
    /// Never prints the peer secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("expected_nodes", &self.expected_nodes)
            .field("node_id", &self.node_id)
            .field("heartbeat", &self.heartbeat)
            .field("peer_listen", &self.peer_listen)
            .field("peers", &self.peers)
            .field("gossip_interval", &self.gossip_interval)
            .finish_non_exhaustive()
    }
}

/// The store's TLS material, as PEM bytes (what the redis crate takes).
#[derive(Clone, Default)]
pub struct StoreTls {
    /// `ca_file`: the only roots trusted; `None`: the system's.
    pub ca: Option<(PathBuf, Vec<u8>)>,
    /// `client_cert` and `client_key`, presented when the server asks (mTLS).
    pub client: Option<(PathBuf, Vec<u8>, PathBuf, Vec<u8>)>,
}

impl std::fmt::Debug for StoreTls {
    /// Paths only: the key is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreTls")
            .field("ca", &self.ca.as_ref().map(|c| &c.0))
            .field("client_cert", &self.client.as_ref().map(|c| &c.0))
            .finish_non_exhaustive()
    }
}
