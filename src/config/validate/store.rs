//! The validation pass for `[store]` and `[cluster]`: where central policies keep state.

use std::num::NonZeroU32;
use std::time::Duration;

use super::Validator;
use crate::config::MAX_PERIOD;
use crate::config::raw::AlgorithmName;
use crate::config::raw::{RawCluster, RawStore, StoreKind};
use crate::config::{Cluster, Policy, Store};

/// The most gateways `[cluster] expected_nodes` may name. Each node's share of a gcra or
/// token_bucket policy runs at `period × N`, which must stay within [`MAX_PERIOD`]: at
/// `u32::MAX` nodes even a one-second period does not, and `serve` would refuse to start.
pub const MAX_EXPECTED_NODES: u32 = 10_000;

impl Validator {
    /// A `redis://` or `rediss://` URL the redis crate reads; refused under `key` (naming
    /// the key, not the value: the URL may carry a password).
    pub(in crate::config) fn redis_url(&mut self, key: &str, u: &str) {
        let ok = (u.starts_with("redis://") || u.starts_with("rediss://"))
            && redis::IntoConnectionInfo::into_connection_info(u).is_ok();
        if !ok {
            self.fail(key, "is not a redis:// or rediss:// URL");
        }
    }

    pub(super) fn store(&mut self, raw: &RawStore, origin: &std::path::Path) -> Option<Store> {
        let before = self.problem_count();
        let needs_urls = matches!(raw.kind, StoreKind::Redis | StoreKind::RedisCluster);
        let (sentinels, master_name) = self.sentinels(raw);
        if needs_urls && raw.urls.is_empty() {
            self.fail(
                "store.urls",
                "needs at least one redis:// URL for this store kind",
            );
        }
        if !needs_urls && !raw.urls.is_empty() {
            let why = match raw.kind {
                StoreKind::RedisSentinel => {
                    "a sentinel store is found through `sentinels`, not URLs"
                }
                _ => "the memory store has no URLs (set kind = \"redis\")",
            };
            self.fail("store.urls", why);
        }
        if raw.kind == StoreKind::Redis && raw.urls.len() > 1 {
            self.fail(
                "store.urls",
                "a redis store talks to one server (the first URL): list one, or use \
                 kind = \"redis-cluster\" (any seed nodes) or \"redis-sentinel\" (failover)",
            );
        }
        for (i, u) in raw.urls.iter().enumerate() {
            self.redis_url(&format!("store.urls[{i}]"), u);
        }
        let password = match &raw.password_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(v) if !v.is_empty() => Some(v),
                _ => {
                    self.fail(
                        "store.password_env",
                        format!("environment variable `{var}` is not set"),
                    );
                    None
                }
            },
        };
        if raw.kind == StoreKind::RedisCluster && !whole_hash_tags(&raw.key_prefix) {
            self.fail(
                "store.key_prefix",
                "on a Redis Cluster a `{` must open a hash tag closed in the prefix (\"{tenant}:\"): \
                 else the records kept beside a key (refund markers, receipts, lease returns) \
                 cannot be named in its slot",
            );
        }
        let username = self.store_username(raw);
        let tls = self.store_tls(raw, origin);
        let timeout = self.timeout("store.timeout", &raw.timeout);
        let cooldown = self.timeout("store.breaker.cooldown", &raw.breaker.cooldown);
        let failures = NonZeroU32::new(raw.breaker.failures);
        if failures.is_none() {
            self.fail("store.breaker.failures", "must be at least 1");
        }
        if self.problem_count() > before {
            return None;
        }
        Some(Store {
            kind: raw.kind,
            urls: raw.urls.clone(),
            password,
            username,
            tls,
            sentinels,
            master_name,
            timeout: timeout?,
            breaker_failures: failures?,
            breaker_cooldown: cooldown?,
            key_prefix: raw.key_prefix.clone(),
            fallback_repay: raw.fallback_repay,
        })
    }

    pub(super) fn cluster(&mut self, raw: &RawCluster) -> Cluster {
        let expected_nodes = match NonZeroU32::new(raw.expected_nodes) {
            Some(n) if n.get() <= MAX_EXPECTED_NODES => n,
            _ => {
                self.fail(
                    "cluster.expected_nodes",
                    format!("must be at least 1 and at most {MAX_EXPECTED_NODES}"),
                );
                NonZeroU32::MIN
            }
        };
        let heartbeat = self
            .duration("cluster.heartbeat", &raw.heartbeat)
            .filter(|d| {
                let ok = (Duration::from_millis(100)..=Duration::from_secs(3600)).contains(d);
                if !ok {
                    self.fail("cluster.heartbeat", "must be at least 100ms and at most 1h");
                }
                ok
            })
            .unwrap_or(Duration::from_secs(1));
        let node_id = match &raw.node_id {
            Some(id) if id.is_empty() || id.len() > 200 || id.chars().any(char::is_whitespace) => {
                self.fail(
                    "cluster.node_id",
                    "must be 1 to 200 characters without spaces",
                );
                id.clone()
            }
            Some(id) => id.clone(),
            None => default_node_id(),
        };
        let peers = self.peers(raw);
        Cluster {
            expected_nodes,
            node_id,
            heartbeat,
            peer_listen: peers.peer_listen,
            peers: peers.peers,
            peer_secret: peers.peer_secret,
            gossip_interval: peers.gossip_interval,
        }
    }
}

impl Validator {
    /// Each node's share of a gcra or token_bucket policy runs at `period × N` (the L/N
    /// split, also used by `on_store_error = "local"`); past [`MAX_PERIOD`] the limiter
    /// cannot be built and `serve` exits. Reject it for `N = [cluster] expected_nodes`.
    pub(super) fn node_periods(&mut self, policies: &[Policy], nodes: NonZeroU32) {
        for p in policies {
            if !matches!(
                p.algorithm,
                AlgorithmName::Gcra | AlgorithmName::TokenBucket
            ) {
                continue;
            }
            if p.period
                .checked_mul(nodes.get())
                .is_none_or(|d| d > MAX_PERIOD)
            {
                self.fail(
                    &format!("policies.{}.period", p.name),
                    format!(
                        "{} × {nodes} expected nodes is longer than 10 years: a node's share \
                         of this policy cannot be kept",
                        humantime::format_duration(p.period)
                    ),
                );
            }
        }
    }
}

/// Host name and process id: unique per running gateway, readable in `redis-cli`.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "tollgate".into());
    format!("{host}-{}", std::process::id())
}

/// Whether a key prefix leaves the slot to the key after it, or decides it with a hash tag
/// of its own: no `{`, or a first `{` closed by a `}` with something between. Anything else
/// ("a{b", "{}x", "a}b{") lets the prefix and the tollgate-made tag after it decide the
/// slot together, so a record named for a key's slot lands elsewhere.
fn whole_hash_tags(prefix: &str) -> bool {
    match prefix.find('{') {
        None => true,
        Some(open) => prefix[open + 1..].find('}').is_some_and(|close| close > 0),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::raw::RawPolicy;

    fn cluster_problems(expected_nodes: u32) -> usize {
        let mut v = Validator::default();
        let raw: RawCluster =
            toml::from_str(&format!("expected_nodes = {expected_nodes}")).expect("a cluster");
        v.cluster(&raw);
        v.problem_count()
    }

    #[test]
    fn expected_nodes_is_bounded() {
        assert_eq!(cluster_problems(0), 1);
        assert_eq!(cluster_problems(1), 0);
        assert_eq!(cluster_problems(MAX_EXPECTED_NODES), 0);
        assert_eq!(cluster_problems(MAX_EXPECTED_NODES + 1), 1);
        assert_eq!(cluster_problems(u32::MAX), 1);
    }

    fn period_problems(algorithm: &str, period: &str, nodes: u32) -> usize {
        let text = format!(
            "[p]\nkey = [\"ip\"]\nalgorithm = \"{algorithm}\"\nlimit = 10\nperiod = \"{period}\"\n"
        );
        let raw: BTreeMap<String, RawPolicy> = toml::from_str(&text).expect("a policy table");
        let mut v = Validator::default();
        let policies = v.policies(&raw);
        assert_eq!(v.problem_count(), 0, "valid on its own");
        v.node_periods(&policies, NonZeroU32::new(nodes).expect("non-zero"));
        v.problem_count()
    }

    #[test]
    fn a_nodes_share_must_fit_the_longest_period() {
        // Ten years of 365.25 days: 3 652.5 days.
        assert_eq!(period_problems("gcra", "1d", 3652), 0, "within 10 years");
        assert_eq!(period_problems("gcra", "1d", 3653), 1);
        assert_eq!(period_problems("token_bucket", "1h", MAX_EXPECTED_NODES), 0);
        assert_eq!(period_problems("token_bucket", "1y", 11), 1);
        assert_eq!(period_problems("sliding_window", "1y", 11), 0, "not scaled");
    }

    #[test]
    fn a_cluster_prefix_leaves_the_slot_to_the_key_or_decides_it_whole() {
        for ok in ["", "tg:", "{tenant}:", "a{b}c:", "a}b:", "x:{t}:{u}"] {
            assert!(whole_hash_tags(ok), "{ok:?}");
        }
        for bad in ["a{b", "{}x", "a}b{", "{", "tg:{"] {
            assert!(!whole_hash_tags(bad), "{bad:?}");
        }
    }
}
