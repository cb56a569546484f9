//! Store sections of the TOML file as written: `[store]`, `[cluster]`, and the per-policy
//! and per-route store settings. Part of the user-facing contract.

use serde::Deserialize;

pub use crate::limit::spec::{FallbackRepay, OnStoreError, Site, StoreKind};

use super::defaults;

/// `[store]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// memory (embedded, this process only) | redis | redis-cluster.
    #[serde(default)]
    pub kind: StoreKind,
    /// `redis://` or `rediss://` URLs; for a cluster, any seed nodes.
    #[serde(default)]
    pub urls: Vec<String>,
    /// Environment variable holding the Redis password (kept out of the file).
    pub password_env: Option<String>,
    /// Environment variable holding the Redis ACL user name (default: `default`).
    pub username_env: Option<String>,
    /// rediss: PEM roots to trust instead of the system's.
    pub ca_file: Option<String>,
    /// rediss: PEM client certificate (mTLS).
    pub client_cert: Option<String>,
    /// rediss: PEM private key of `client_cert`.
    pub client_key: Option<String>,
    /// redis-sentinel: the sentinels' `redis://` addresses.
    #[serde(default)]
    pub sentinels: Vec<String>,
    /// redis-sentinel: the master name the sentinels monitor.
    pub master_name: Option<String>,
    /// Per store call: a slow store is worse than a down one.
    #[serde(default = "defaults::store_timeout")]
    pub timeout: String,
    /// Consecutive failures that open the breaker, and how long it stays open.
    #[serde(default)]
    pub breaker: RawBreaker,
    /// Prepended to every key, so several deployments can share one Redis.
    #[serde(default = "defaults::key_prefix")]
    pub key_prefix: String,
    /// How the `on_store_error = "local"` fallback's debts are paid back: `at_once` (the
    /// key refused until paid) or `half_rate` (installments at half the key's rate).
    #[serde(default)]
    pub fallback_repay: FallbackRepay,
}

impl Default for RawStore {
    fn default() -> Self {
        RawStore {
            kind: StoreKind::Memory,
            urls: Vec::new(),
            password_env: None,
            username_env: None,
            ca_file: None,
            client_cert: None,
            client_key: None,
            sentinels: Vec::new(),
            master_name: None,
            timeout: defaults::store_timeout(),
            breaker: RawBreaker::default(),
            key_prefix: defaults::key_prefix(),
            fallback_repay: FallbackRepay::default(),
        }
    }
}

/// `store.breaker`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    #[serde(default = "defaults::breaker_failures")]
    pub failures: u32,
    #[serde(default = "defaults::breaker_cooldown")]
    pub cooldown: String,
}

impl Default for RawBreaker {
    fn default() -> Self {
        RawBreaker {
            failures: defaults::breaker_failures(),
            cooldown: defaults::breaker_cooldown(),
        }
    }
}

/// `[cluster]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Gateways sharing the limits; `on_store_error = "local"` enforces L/N with it.
    #[serde(default = "defaults::expected_nodes")]
    pub expected_nodes: u32,
    /// This gateway's name in the membership set (default: host name and process id).
    pub node_id: Option<String>,
    /// How often a node renews its membership in the store; it is dropped after three
    /// missed beats.
    #[serde(default = "defaults::heartbeat")]
    pub heartbeat: String,
    /// This node's peer endpoint (socket address), where the other gateways reach it.
    pub peer_listen: Option<String>,
    /// The fleet's peer endpoints, this node's `peer_listen` included; empty: the fleet
    /// comes from the store's membership.
    #[serde(default)]
    pub peers: Vec<String>,
    /// Environment variable holding the shared secret every peer message is signed with.
    pub peer_secret_env: Option<String>,
    /// How often a node sends its counters' deltas to its peers.
    #[serde(default = "default_gossip_interval")]
    pub gossip_interval: String,
}

impl Default for RawCluster {
    fn default() -> Self {
        RawCluster {
            expected_nodes: defaults::expected_nodes(),
            node_id: None,
            heartbeat: defaults::heartbeat(),
            peer_listen: None,
            peers: Vec::new(),
            peer_secret_env: None,
            gossip_interval: default_gossip_interval(),
        }
    }
}

/// `[cluster] gossip_interval` when not given.
fn default_gossip_interval() -> String {
    "20ms".into()
}
