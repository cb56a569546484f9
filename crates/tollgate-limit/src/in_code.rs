//! A limiter built in code, without a config file: constructors for the spec's parts with
//! the defaults the gateway's config gives a key left out, each checking what it is given
//! (`rules.rs` checks the rest: [`LimiterSpec::validate`]), so a policy built here is one
//! the gateway's `tollgate check` would accept.
//!
//! The fields stay public (the gateway's config fills them from a validated file); these
//! constructors are what a front end without a file (the tower layer in an app, the rate
//! limit service, a test) writes instead of every field.

use std::net::Ipv4Addr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net};

use crate::rules::{SpecError, is_bursty};
use crate::spec::{
    AlgorithmName, Cluster, FallbackRepay, IpKeys, KeyPart, LeaseKnobs, LimiterSpec, MAX_PERIOD,
    MIN_PERIOD, Mode, OnStoreError, Policy, RouteSpec, Site, Store, StoreKind,
};

/// RFC 6598's shared address space: many subscribers behind one address.
fn cgnat() -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::new(100, 64, 0, 0), 10).expect("a /10 is a prefix"))
}

/// The most keys a policy keeps when not told (`max_keys`).
const MAX_KEYS: usize = 1_000_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

impl Policy {
    /// `limit` requests per `period` on `key`, by `algorithm`, decided in this process
    /// (`site = "local"`), a request costing 1, bursts of `limit` (gcra, token_bucket):
    /// `[policies.NAME]` with only `key`, `algorithm`, `limit` and `period` written. A
    /// concurrency policy has no period: give it [`Duration::ZERO`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_limit::spec::{AlgorithmName, KeyPart, Policy};
    ///
    /// let per_ip = Policy::new("per_ip", vec![KeyPart::Ip], AlgorithmName::Gcra, 10, Duration::from_secs(1))?;
    /// assert_eq!(per_ip.burst.get(), 10);
    /// assert!(Policy::new("none", vec![KeyPart::Ip], AlgorithmName::Gcra, 0, Duration::from_secs(1)).is_err());
    /// # Ok::<(), tollgate_limit::SpecError>(())
    /// ```
    pub fn new(
        name: &str,
        key: Vec<KeyPart>,
        algorithm: AlgorithmName,
        limit: u32,
        period: Duration,
    ) -> Result<Policy, SpecError> {
        let fail = |field, detail: &str| SpecError::policy(name, field, detail);
        let limit = NonZeroU32::new(limit).ok_or_else(|| fail("limit", "must be at least 1"))?;
        if key.is_empty() {
            return Err(fail("key", "needs at least one part"));
        }
        let windowless = algorithm == AlgorithmName::Concurrency;
        if windowless && !period.is_zero() {
            let why = "concurrency limits requests in flight and has no period";
            return Err(fail("period", why));
        }
        if !windowless && !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
            return Err(fail("period", "must be at least 1ms and at most 10 years"));
        }
        // Only gcra and token_bucket have a burst; the others hold one request's worth.
        let bursty = is_bursty(algorithm);
        Ok(Policy {
            name: name.to_owned(),
            key,
            algorithm,
            limit,
            period,
            burst: if bursty { limit } else { NonZeroU32::MIN },
            cost: nz(1),
            max_delay: Duration::ZERO,
            mode: None,
            max_keys: NonZeroUsize::new(MAX_KEYS).unwrap_or(NonZeroUsize::MIN),
            site: Site::Local,
            local_first: false,
            lease: LeaseKnobs::default(),
            spend: Default::default(),
            on_missing_key: None,
            show_values: Vec::new(),
        })
    }
}

impl Store {
    /// No shared store: every site decides in this process (`[store] kind = "memory"`).
    ///
    /// ```
    /// use tollgate_limit::spec::{Store, StoreKind};
    ///
    /// assert_eq!(Store::memory().kind, StoreKind::Memory);
    /// ```
    pub fn memory() -> Store {
        Store {
            kind: StoreKind::Memory,
            urls: Vec::new(),
            password: None,
            username: None,
            tls: None,
            sentinels: Vec::new(),
            master_name: None,
            timeout: Duration::from_millis(10),
            breaker_failures: nz(5),
            breaker_cooldown: Duration::from_secs(2),
            key_prefix: "tg:".into(),
            fallback_repay: FallbackRepay::AtOnce,
        }
    }
}

impl Cluster {
    /// One node named `node_id`, alone: no peers, no fleet (`[cluster]` left out).
    ///
    /// ```
    /// use tollgate_limit::spec::Cluster;
    ///
    /// assert_eq!(Cluster::single("app-1").expected_nodes.get(), 1);
    /// ```
    pub fn single(node_id: &str) -> Cluster {
        Cluster {
            expected_nodes: nz(1),
            node_id: node_id.to_owned(),
            heartbeat: Duration::from_secs(1),
            peer_listen: None,
            peers: Vec::new(),
            peer_secret: None,
            gossip_interval: Duration::from_millis(20),
        }
    }
}

impl LimiterSpec {
    /// `policies` decided in this process's memory, by one node, with no route yet
    /// ([`LimiterSpec::route`] adds them).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_limit::spec::{AlgorithmName, KeyPart, LimiterSpec, Policy};
    ///
    /// let per_ip = Policy::new("per_ip", vec![KeyPart::Ip], AlgorithmName::Gcra, 10, Duration::from_secs(1))?;
    /// let spec = LimiterSpec::in_memory(vec![per_ip]).route("api", &["per_ip"])?;
    /// assert_eq!(spec.routes[0].policies, [0]);
    /// # Ok::<(), tollgate_limit::SpecError>(())
    /// ```
    pub fn in_memory(mut policies: Vec<Policy>) -> LimiterSpec {
        // Routes index policies in name order, as the gateway's config sorts them.
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        LimiterSpec {
            // `[client_ip]` left out: IPv6 by /64, CGNAT's shared range with headroom 4.
            ip_keys: IpKeys {
                ipv6_prefix: 64,
                shared_ranges: vec![(cgnat(), nz(4))],
            },
            account: None,
            policies,
            routes: Vec::new(),
            store: Store::memory(),
            expected_nodes: nz(1),
            cluster: Cluster::single("tollgate"),
            exempt: Default::default(),
            tiers: Default::default(),
        }
    }

    /// Add route `name` (its index is the number of routes before it), asking the policies
    /// named, enforcing, failing open.
    pub fn route(mut self, name: &str, policies: &[&str]) -> Result<LimiterSpec, SpecError> {
        let indexes = policies
            .iter()
            .map(|p| {
                (self.policies.iter().position(|q| q.name == *p)).ok_or_else(|| SpecError {
                    place: format!("routes.{name}"),
                    field: "policies",
                    detail: format!("no policy named `{p}`"),
                })
            })
            .collect::<Result<Vec<usize>, SpecError>>()?;
        self.routes.push(RouteSpec {
            name: name.to_owned(),
            policies: indexes,
            mode: Mode::default(),
            on_store_error: OnStoreError::default(),
            require_account: false,
        });
        Ok(self)
    }
}
