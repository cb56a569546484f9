//! Keys: what a request is counted as, per policy. The first thing the limit step does.
//!
//! A key is the policy name followed by its parts, joined with `:` (e.g.
//! `per_account_login:acct:3f…:login`), so two policies never share state. Secret-bearing
//! parts (account, header values) enter keys only as a keyed hash, so neither the store nor a
//! log ever holds them raw.

use std::fmt::Write;
use std::hash::Hasher;
use std::net::IpAddr;
use std::num::NonZeroU32;

use http::{HeaderMap, Method};
use ipnet::{IpNet, Ipv6Net};
use siphasher::sip128::{Hasher128, SipHasher13};

use super::policy::PolicyRuntime;
use crate::config::{Account, ClientIp, KeyPart};
use crate::proxy::client_ip::canonical;

/// What key building needs from the config.
#[derive(Debug, Clone)]
pub struct KeyBuilder {
    /// IPv6 clients are folded to their network of this length.
    ipv6_prefix: u8,
    /// Shared-address ranges, most specific first, with their headroom.
    shared_ranges: Vec<(IpNet, NonZeroU32)>,
    /// Where accounts come from, and the hash key for them and header values.
    account: Option<Account>,
}

/// The facts about one request that keys are made of; built once per request.
#[derive(Debug)]
pub struct RequestFacts<'a> {
    /// The client address part (IPv4 address, or IPv6 network).
    pub ip: String,
    /// Multiplier of ip-keyed limits for this client (shared ranges), 1 elsewhere.
    pub headroom: NonZeroU32,
    /// Hashed account, when the request names one.
    pub account: Option<String>,
    /// Route name.
    pub route: &'a str,
    pub method: &'a Method,
    /// For `header:NAME` parts.
    pub headers: &'a HeaderMap,
}

impl KeyBuilder {
    pub fn new(client_ip: &ClientIp, account: Option<Account>) -> Self {
        KeyBuilder {
            ipv6_prefix: client_ip.ipv6_prefix,
            shared_ranges: client_ip.shared_ranges.clone(),
            account,
        }
    }

    /// Every distinct headroom level a client may get.
    pub fn headrooms(&self) -> Vec<NonZeroU32> {
        self.shared_ranges.iter().map(|(_, h)| *h).collect()
    }

    pub fn facts<'a>(
        &self,
        client: IpAddr,
        route: &'a str,
        method: &'a Method,
        headers: &'a HeaderMap,
    ) -> RequestFacts<'a> {
        let client = canonical(client);
        let headroom = self
            .shared_ranges
            .iter()
            .find(|(net, _)| net.contains(&client))
            .map_or(NonZeroU32::MIN, |(_, h)| *h);
        let account = self.account.as_ref().and_then(|a| {
            let v = headers.get(&a.header)?.as_bytes();
            (!v.is_empty()).then(|| keyed_hash(&a.hash_key, v))
        });
        RequestFacts {
            ip: self.ip_part(client),
            headroom,
            account,
            route,
            method,
            headers,
        }
    }

    /// IPv4 as is; IPv6 as its `/ipv6_prefix` network, since one subscriber holds a whole /64.
    pub fn ip_part(&self, ip: IpAddr) -> String {
        match canonical(ip) {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => Ipv6Net::new(v6, self.ipv6_prefix)
                .map(|n| n.trunc().to_string())
                .unwrap_or_else(|_| v6.to_string()),
        }
    }

    /// The key of `policy` for this request, or `None` when the request lacks a part the
    /// key needs (no account header, say): the policy then does not apply to it.
    pub fn key(&self, policy: &PolicyRuntime, facts: &RequestFacts<'_>) -> Option<String> {
        let mut key = String::with_capacity(64);
        key.push_str(&policy.name);
        for part in &policy.key {
            key.push(':');
            match part {
                KeyPart::Ip => {
                    key.push_str("ip:");
                    key.push_str(&facts.ip);
                }
                KeyPart::Account => {
                    key.push_str("acct:");
                    key.push_str(facts.account.as_deref()?);
                }
                KeyPart::Route => key.push_str(facts.route),
                KeyPart::Method => key.push_str(facts.method.as_str()),
                KeyPart::Header(name) => {
                    let v = facts.headers.get(name)?.as_bytes();
                    let secret = self.account.as_ref().map_or(&[0u8; 16], |a| &a.hash_key);
                    let _ = write!(key, "h:{}", keyed_hash(secret, v));
                }
            }
        }
        Some(key)
    }
}

/// SipHash-1-3 with a 128-bit secret key: a fast PRF, so keys are unlinkable to the raw
/// value without the secret, and 128 bits make collisions between clients negligible.
fn keyed_hash(secret: &[u8; 16], value: &[u8]) -> String {
    let mut h = SipHasher13::new_with_key(secret);
    h.write(value);
    let bytes = h.finish128().as_bytes();
    let mut out = String::with_capacity(32);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AlgorithmName, Policy};
    use std::num::NonZeroUsize;
    use std::time::Duration;

    fn builder() -> KeyBuilder {
        let client_ip = ClientIp {
            trusted_proxies: vec![],
            ipv6_prefix: 64,
            shared_ranges: vec![(
                "100.64.0.0/10".parse().unwrap(),
                NonZeroU32::new(4).unwrap(),
            )],
        };
        let account = Account {
            header: http::HeaderName::from_static("x-api-key"),
            hash_key: [7; 16],
        };
        KeyBuilder::new(&client_ip, Some(account))
    }

    fn policy(key: Vec<KeyPart>) -> PolicyRuntime {
        let p = Policy {
            name: "p".into(),
            key,
            algorithm: AlgorithmName::Gcra,
            limit: NonZeroU32::new(10).unwrap(),
            period: Duration::from_secs(1),
            burst: NonZeroU32::new(10).unwrap(),
            cost: NonZeroU32::MIN,
            max_delay: Duration::ZERO,
            mode: None,
            max_keys: NonZeroUsize::new(10).unwrap(),
            site: crate::config::Site::Local,
            local_first: false,
            lease: Default::default(),
        };
        PolicyRuntime::new(0, &p, &[NonZeroU32::new(4).unwrap()]).unwrap()
    }

    #[test]
    fn ipv6_clients_in_one_64_share_a_key() {
        let b = builder();
        let (m, h) = (Method::GET, HeaderMap::new());
        let p = policy(vec![KeyPart::Ip]);
        let a = b.key(
            &p,
            &b.facts("2001:db8:1:2::1".parse().unwrap(), "r", &m, &h),
        );
        let c = b.key(
            &p,
            &b.facts("2001:db8:1:2:ffff::9".parse().unwrap(), "r", &m, &h),
        );
        let d = b.key(
            &p,
            &b.facts("2001:db8:1:3::1".parse().unwrap(), "r", &m, &h),
        );
        assert_eq!(a.as_deref(), Some("p:ip:2001:db8:1:2::/64"));
        assert_eq!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn cgnat_gets_headroom_and_mapped_v4_is_v4() {
        let b = builder();
        let (m, h) = (Method::GET, HeaderMap::new());
        assert_eq!(
            b.facts("100.64.1.1".parse().unwrap(), "r", &m, &h)
                .headroom
                .get(),
            4
        );
        let f = b.facts("::ffff:1.2.3.4".parse().unwrap(), "r", &m, &h);
        assert_eq!((f.ip.as_str(), f.headroom.get()), ("1.2.3.4", 1));
    }

    #[test]
    fn account_is_hashed_and_required() {
        let b = builder();
        let m = Method::POST;
        let p = policy(vec![KeyPart::Account, KeyPart::Route]);
        let none = HeaderMap::new();
        assert_eq!(
            b.key(&p, &b.facts("1.1.1.1".parse().unwrap(), "login", &m, &none)),
            None
        );
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "sk_live_secret".parse().unwrap());
        let k = b
            .key(&p, &b.facts("1.1.1.1".parse().unwrap(), "login", &m, &h))
            .unwrap();
        assert!(!k.contains("sk_live_secret"), "{k}");
        assert!(k.starts_with("p:acct:") && k.ends_with(":login"), "{k}");
    }
}
