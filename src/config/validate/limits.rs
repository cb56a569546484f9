//! The validation pass for rate limiting: client keying, the account source and policies.
//! Impossible policies are rejected here, so the limit step can build algorithms that
//! cannot be invalid.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use http::HeaderName;
use ipnet::IpNet;

use crate::config::{MAX_PERIOD, MIN_PERIOD};

use tollgate_limit::rules;

use super::Validator;
use crate::config::LeaseKnobs;
use crate::config::raw::RawCost;
use crate::config::raw::{AlgorithmName, RawAccount, RawClientIp, RawPolicy, Site, defaults};
use crate::config::{Account, ClientIp, Policy};

/// RFC 6598 shared address space (carrier-grade NAT).
const CGNAT: &str = "100.64.0.0/10";

impl Validator {
    pub(super) fn client_ip(&mut self, raw: &RawClientIp) -> ClientIp {
        let trusted_proxies = raw
            .trusted_proxies
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.cidr(&format!("client_ip.trusted_proxies[{i}]"), s))
            .collect();
        if !(1..=128).contains(&raw.ipv6_prefix) {
            self.fail(
                "client_ip.ipv6_prefix",
                format!("{} is out of range: use 1 to 128", raw.ipv6_prefix),
            );
        }
        let mut shared_ranges: Vec<(IpNet, NonZeroU32)> = raw
            .shared_ranges
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let key = format!("client_ip.shared_ranges[{i}]");
                let net = self.cidr(&format!("{key}.cidr"), &r.cidr);
                let headroom = self.headroom(&format!("{key}.headroom"), r.headroom);
                Some((net?, headroom?))
            })
            .collect();
        // The most specific range decides a client's headroom.
        shared_ranges.sort_by_key(|(n, _)| std::cmp::Reverse(n.prefix_len()));
        if let Some(h) = self.headroom("client_ip.cgnat_headroom", raw.cgnat_headroom) {
            shared_ranges.push((CGNAT.parse().expect("constant CIDR"), h));
        }
        ClientIp {
            trusted_proxies,
            ipv6_prefix: raw.ipv6_prefix.clamp(1, 128),
            shared_ranges,
            forwarded_header: raw.forwarded_header,
        }
    }

    fn headroom(&mut self, key: &str, h: u32) -> Option<NonZeroU32> {
        let nz = NonZeroU32::new(h);
        if nz.is_none() {
            self.fail(key, "must be at least 1 (1 = no headroom)");
        }
        nz
    }

    pub(super) fn account(
        &mut self,
        raw: &RawAccount,
        origin: &std::path::Path,
    ) -> Option<Account> {
        let jwt = match &raw.jwt {
            Some(j) => Some(std::sync::Arc::new(self.jwt(j, origin)?)),
            None => None,
        };
        let header = HeaderName::from_bytes(raw.header.as_bytes())
            .map_err(|_| {
                self.fail(
                    "account.header",
                    format!("`{}` is not a header name", raw.header),
                )
            })
            .ok();
        // Without `hash_key_env`, the limiter's default: the one hashed parts use when there
        // is no `[account]` at all, so writing the section re-keys nothing.
        let hash_key = match &raw.hash_key_env {
            None => crate::limit::spec::default_hash_key(),
            Some(var) => match std::env::var(var) {
                Ok(v) if !v.is_empty() => crate::limit::spec::hash_key_of(v.as_bytes()),
                // The value is a secret: say which variable, never what it holds.
                _ => {
                    self.fail(
                        "account.hash_key_env",
                        format!("environment variable `{var}` is not set"),
                    );
                    return None;
                }
            },
        };
        Some(Account {
            jwt,
            header: header?,
            hash_key,
        })
    }

    pub(super) fn policies(&mut self, raw: &BTreeMap<String, RawPolicy>) -> Vec<Policy> {
        raw.iter()
            .filter_map(|(name, p)| self.policy(name, p))
            .collect()
    }

    pub(in crate::config) fn policy(&mut self, name: &str, p: &RawPolicy) -> Option<Policy> {
        let at = |k: &str| format!("policies.{name}.{k}");
        let before = self.problem_count();
        // The name is a header item (an sf-string) and a metric label: keep it plain.
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        {
            self.fail(
                &format!("policies.{name}"),
                "policy names may use only letters, digits, `_`, `-` and `.`",
            );
        }
        let mut key = self.key_parts(&at("key"), &p.key);
        self.lowercase(&at("lowercase"), &p.lowercase, &mut key);
        let limit = self.nonzero_u32(&at("limit"), p.limit);
        let is = |a: AlgorithmName| p.algorithm == a;
        let windowless = is(AlgorithmName::Concurrency);
        let period = match (&p.period, windowless) {
            (Some(_), true) => {
                self.fail(
                    &at("period"),
                    "concurrency limits requests in flight and has no period",
                );
                None
            }
            (None, true) => Some(Duration::ZERO),
            (None, false) => {
                self.fail(&at("period"), "required for this algorithm");
                None
            }
            (Some(s), false) => self.duration(&at("period"), s).filter(|d| {
                let ok = (MIN_PERIOD..=MAX_PERIOD).contains(d);
                if !ok {
                    self.fail(&at("period"), "must be at least 1ms and at most 10 years");
                }
                ok
            }),
        };
        let bursty = is(AlgorithmName::Gcra) || is(AlgorithmName::TokenBucket);
        let burst = match p.burst {
            Some(_) if !bursty => {
                self.fail(
                    &at("burst"),
                    format!(
                        "not used by {}: only gcra and token_bucket have a burst",
                        p.algorithm.name()
                    ),
                );
                None
            }
            Some(b) => self.nonzero_u32(&at("burst"), b),
            None if bursty => limit,
            None => Some(NonZeroU32::MIN),
        };
        let max_delay = match &p.max_delay {
            Some(_) if !is(AlgorithmName::LeakyBucket) => {
                self.fail(&at("max_delay"), "only leaky_bucket holds requests");
                None
            }
            Some(s) => match humantime::parse_duration(s) {
                Ok(d) if d <= MAX_PERIOD => Some(d),
                Ok(_) => {
                    self.fail(&at("max_delay"), "must be at most 10 years");
                    None
                }
                Err(_) => {
                    self.fail(
                        &at("max_delay"),
                        format!("`{s}` is not a duration like \"500ms\""),
                    );
                    None
                }
            },
            None => Some(Duration::ZERO),
        };
        let cost = match &p.cost {
            RawCost::Cells(n) => self.nonzero_u32(&at("cost"), *n),
            // Priced per request; 1 is what a bodiless request spends.
            RawCost::Named(s) if s == "request_bytes" => Some(NonZeroU32::MIN),
            RawCost::Named(s) => {
                self.fail(
                    &at("cost"),
                    format!("`{s}`: a number of cells, or \"request_bytes\""),
                );
                None
            }
        };
        // The limiter's own rules (`tollgate_limit::rules`), each where `check` has always
        // said it: a cost no full state can pay, `local_first` off central, a peer site's
        // algorithm.
        let capacity = if bursty { burst } else { limit };
        if let (Some(cap), Some(c)) = (capacity, cost) {
            // The capacity is the burst or the limit, as the algorithm has it.
            self.rule(&at, rules::cost_fits(p.algorithm, cap, cap, c));
        }
        self.rule(&at, rules::local_first_fits(p.site, p.local_first));
        self.rule(&at, rules::peer_algorithm_fits(p.site, p.algorithm));
        let show_values = self.show_values(&at("show_values"), &p.show_values, &key);
        let spend = self.spend(&at, p, capacity);
        let lease = self.lease_knobs(&at, p);
        let max_keys = NonZeroUsize::new(p.max_keys as usize);
        if max_keys.is_none() {
            self.fail(&at("max_keys"), "must be at least 1");
        }
        if self.problem_count() > before {
            return None;
        }
        Some(Policy {
            name: name.to_string(),
            key,
            algorithm: p.algorithm,
            limit: limit?,
            period: period?,
            burst: burst?,
            cost: cost?,
            max_delay: max_delay?,
            mode: p.mode,
            max_keys: max_keys?,
            site: p.site,
            local_first: p.local_first,
            lease: lease?,
            spend: spend?,
            on_missing_key: p.on_missing_key,
            show_values,
        })
    }

    /// A broken rule of the limiter's, said at its field of the policy.
    fn rule(&mut self, at: &dyn Fn(&str) -> String, rule: Result<(), (&'static str, String)>) {
        if let Err((field, detail)) = rule {
            self.fail(&at(field), detail);
        }
    }

    /// `lease_max` / `lease_ttl` / `lease_target`: only on lease policies, which lease GCRA
    /// cells (a token bucket is the same quota, so it leases too).
    fn lease_knobs(&mut self, at: &dyn Fn(&str) -> String, p: &RawPolicy) -> Option<LeaseKnobs> {
        let given = [
            ("lease_max", p.lease_max.is_some()),
            ("lease_ttl", p.lease_ttl.is_some()),
            ("lease_target", p.lease_target.is_some()),
        ];
        if p.site != Site::Lease {
            for (key, _) in given.iter().filter(|(_, set)| *set) {
                self.fail(
                    &at(key),
                    "only lease policies (site = \"lease\") lease cells",
                );
            }
            return Some(LeaseKnobs::default());
        }
        self.rule(at, rules::lease_algorithm_fits(p.site, p.algorithm));
        let max = p.lease_max.unwrap_or_else(defaults::lease_max);
        let max = match rules::lease_max_fits(max) {
            Ok(m) => Some(m),
            Err(broken) => {
                self.rule(at, Err(broken));
                None
            }
        };
        let mut span = |key: &'static str, v: Option<&String>, default: String| {
            let s = v.cloned().unwrap_or(default);
            self.duration(&at(key), &s).filter(|d| {
                let fits = rules::lease_span_fits(key, *d);
                let ok = fits.is_ok();
                self.rule(at, fits);
                ok
            })
        };
        let ttl = span("lease_ttl", p.lease_ttl.as_ref(), defaults::lease_ttl());
        let target = span(
            "lease_target",
            p.lease_target.as_ref(),
            defaults::lease_target(),
        );
        if let (Some(t), Some(g)) = (ttl, target) {
            self.rule(at, rules::lease_target_fits(t, g));
        }
        Some(LeaseKnobs {
            max: max?,
            ttl: ttl?,
            target: target?,
        })
    }

    pub(in crate::config) fn nonzero_u32(&mut self, key: &str, v: u64) -> Option<NonZeroU32> {
        match u32::try_from(v).ok().and_then(NonZeroU32::new) {
            Some(n) => Some(n),
            None => {
                self.fail(key, format!("{v} is out of range: use 1 to {}", u32::MAX));
                None
            }
        }
    }
}
