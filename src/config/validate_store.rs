//! The validation pass for `[store]` and `[cluster]`: where central policies keep state.

use std::num::NonZeroU32;
use std::time::Duration;

use super::raw::{RawCluster, RawStore, StoreKind};
use super::validate::Validator;
use super::{Cluster, Store};

impl Validator {
    pub(super) fn store(&mut self, raw: &RawStore) -> Option<Store> {
        let before = self.problem_count();
        let needs_urls = raw.kind != StoreKind::Memory;
        if needs_urls && raw.urls.is_empty() {
            self.fail(
                "store.urls",
                "needs at least one redis:// URL for this store kind",
            );
        }
        if !needs_urls && !raw.urls.is_empty() {
            self.fail(
                "store.urls",
                "the memory store has no URLs (set kind = \"redis\")",
            );
        }
        for (i, u) in raw.urls.iter().enumerate() {
            let ok = (u.starts_with("redis://") || u.starts_with("rediss://"))
                && redis::IntoConnectionInfo::into_connection_info(u.as_str()).is_ok();
            if !ok {
                // The URL may carry a password: name the key, not the value.
                self.fail(
                    &format!("store.urls[{i}]"),
                    "is not a redis:// or rediss:// URL",
                );
            }
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
        let timeout = self.duration("store.timeout", &raw.timeout);
        let cooldown = self.duration("store.breaker.cooldown", &raw.breaker.cooldown);
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
            timeout: timeout?,
            breaker_failures: failures?,
            breaker_cooldown: cooldown?,
            key_prefix: raw.key_prefix.clone(),
        })
    }

    pub(super) fn cluster(&mut self, raw: &RawCluster) -> Cluster {
        let expected_nodes = NonZeroU32::new(raw.expected_nodes).unwrap_or_else(|| {
            self.fail("cluster.expected_nodes", "must be at least 1");
            NonZeroU32::MIN
        });
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
        Cluster {
            expected_nodes,
            node_id,
            heartbeat,
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
