//! Specs for the handle's tests (and the test decision site's, `site/tests.rs`), written as
//! the gateway's config would build them: one route asking one ip-keyed policy.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use crate::spec::{
    AlgorithmName, Cluster, FallbackRepay, IpKeys, KeyPart, LeaseKnobs, LimiterSpec, Mode,
    OnStoreError, Policy, RouteSpec, Site, Store, StoreKind,
};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("not zero")
}

/// `[policies.NAME]`: `key = ["ip"]`, a sliding window of `limit` a minute at `site`.
pub(crate) fn policy(name: &str, limit: u32, site: Site) -> Policy {
    Policy {
        name: name.into(),
        key: vec![KeyPart::Ip],
        algorithm: AlgorithmName::SlidingWindow,
        limit: nz(limit),
        period: Duration::from_secs(60),
        burst: nz(limit),
        cost: nz(1),
        max_delay: Duration::ZERO,
        mode: None,
        max_keys: NonZeroUsize::new(10_000).expect("not zero"),
        site,
        local_first: false,
        lease: LeaseKnobs::default(),
        spend: Default::default(),
        on_missing_key: None,
        show_values: Vec::new(),
    }
}

/// Route `api` asks every policy of `policies`; the store is memory, or Redis at `redis`;
/// membership beats every `heartbeat`.
pub(crate) fn spec(
    policies: Vec<Policy>,
    redis: Option<String>,
    heartbeat: Duration,
) -> LimiterSpec {
    let store = Store {
        kind: match redis {
            Some(_) => StoreKind::Redis,
            None => StoreKind::Memory,
        },
        urls: redis.into_iter().collect(),
        password: None,
        username: None,
        tls: None,
        sentinels: Vec::new(),
        master_name: None,
        timeout: Duration::from_millis(500),
        breaker_failures: nz(5),
        breaker_cooldown: Duration::from_secs(1),
        key_prefix: "handle:".into(),
        fallback_repay: FallbackRepay::AtOnce,
    };
    let route = RouteSpec {
        name: "api".into(),
        policies: (0..policies.len()).collect(),
        mode: Mode::default(),
        on_store_error: OnStoreError::default(),
        require_account: false,
    };
    LimiterSpec {
        ip_keys: IpKeys::default(),
        account: None,
        policies,
        routes: vec![route],
        store,
        expected_nodes: nz(1),
        cluster: Cluster {
            expected_nodes: nz(1),
            node_id: "handle-test".into(),
            heartbeat,
            peer_listen: None,
            peers: Vec::new(),
            peer_secret: None,
            gossip_interval: Duration::from_millis(100),
        },
        exempt: Default::default(),
        tiers: Default::default(),
    }
}
