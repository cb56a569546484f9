//! Keys: what a request is counted as, per policy. The first thing the limit step does.
//!
//! A key is the policy name followed by its parts, joined with `:` (e.g.
//! `per_account_login:acct:3f…:login`), so two policies never share state. Secret-bearing
//! parts (account, header values) enter keys only as a keyed hash, so neither the store nor a
//! log ever holds them raw.
//!
//! Nothing a client can vary freely may mint a fresh key: unknown methods share one `other`
//! bucket, and a header a key needs must be stated exactly once ([`Ambiguous`] otherwise),
//! since rotating a junk first line or list item would otherwise give a new budget each time.

use std::fmt::Write;
use std::net::IpAddr;
use std::num::NonZeroU32;

use http::{HeaderMap, HeaderName, Method};
use ipnet::{IpNet, Ipv6Net};

use super::policy::PolicyRuntime;
use crate::config::{Account, ClientIp, KeyPart};

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is the IPv4 client it wraps: keys, logs and
/// forwarding headers all name a client by this one form.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

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
    /// Hashed account, when the request names one; `Err` when it names it ambiguously.
    pub account: Option<Result<String, Ambiguous>>,
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

    /// Whether `policy`'s keys come out as other strings under `next` than under this
    /// builder for the same request: an IPv6 prefix or the hash key of account and header
    /// values changed (a reload then cannot carry the old keys' state).
    pub fn rekeys(&self, next: &KeyBuilder, policy: &[KeyPart]) -> bool {
        let secret = |b: &KeyBuilder| b.account.as_ref().map(|a| a.hash_key);
        // With `jwt`, the account is a claim: another claim names accounts otherwise.
        let claim = |b: &KeyBuilder| {
            b.account
                .as_ref()
                .and_then(|a| a.jwt.as_ref())
                .map(|j| j.claim.clone())
        };
        let ip = policy.contains(&KeyPart::Ip) && self.ipv6_prefix != next.ipv6_prefix;
        let hashed = policy
            .iter()
            .any(|p| matches!(p, KeyPart::Account | KeyPart::Header(_)));
        let account = policy.contains(&KeyPart::Account) && claim(self) != claim(next);
        ip || account || (hashed && secret(self) != secret(next))
    }

    /// Every distinct headroom level a client may get.
    /// The header accounts are read from, when `[account]` is set.
    pub fn account_header(&self) -> Option<&http::HeaderName> {
        self.account.as_ref().map(|a| &a.header)
    }

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
            let value = match single(headers, &a.header) {
                Err(ambiguous) => return Some(Err(ambiguous)),
                Ok(v) => v.filter(|v| !v.is_empty())?,
            };
            Some(Ok(match &a.jwt {
                None => keyed_hash(&a.hash_key, value),
                // A token that does not verify is no account at all: never a fresh one.
                Some(jwt) => keyed_hash(&a.hash_key, jwt.account(bearer(value)?)?.as_bytes()),
            }))
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

    /// The key of `policy` for this request, `None` when the request lacks a part the key
    /// needs (no account header, say): the policy then does not apply to it; `Err` when it
    /// states a needed header ambiguously.
    pub fn key(
        &self,
        policy: &PolicyRuntime,
        facts: &RequestFacts<'_>,
    ) -> Result<Option<String>, Ambiguous> {
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
                    let Some(account) = &facts.account else {
                        return Ok(None);
                    };
                    key.push_str("acct:");
                    key.push_str(account.as_ref().map_err(Clone::clone)?);
                }
                KeyPart::Route => key.push_str(facts.route),
                KeyPart::Method => key.push_str(method_part(facts.method)),
                KeyPart::Header(name) => {
                    let Some(v) = single(facts.headers, name)? else {
                        return Ok(None);
                    };
                    let secret = self.account.as_ref().map_or(&[0u8; 16], |a| &a.hash_key);
                    let _ = write!(key, "h:{}", keyed_hash(secret, v));
                }
            }
        }
        Ok(Some(key))
    }
}

/// A header a key needs, stated on more than one field line or as a comma list: which value
/// would be the client? Whichever we picked, a client could rotate the other for a fresh
/// budget, and the backend might read a different one. The request is refused (400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguous(pub HeaderName);

impl Ambiguous {
    /// The client-facing reason.
    pub fn reason(&self) -> String {
        format!("the `{}` header must appear once, with one value", self.0)
    }
}

/// The one value of header `name`: `None` when absent, `Err` when on several field lines
/// or holding a comma.
fn single<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h [u8]>, Ambiguous> {
    let mut lines = headers.get_all(name).into_iter();
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    if lines.next().is_some() || first.as_bytes().contains(&b',') {
        return Err(Ambiguous(name.clone()));
    }
    Ok(Some(first.as_bytes()))
}

/// The token of an `Authorization: Bearer <token>` value (or a bare token).
fn bearer(value: &[u8]) -> Option<&str> {
    let v = std::str::from_utf8(value).ok()?.trim();
    let token = match v.split_once(' ') {
        Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim(),
        _ => v,
    };
    (!token.is_empty()).then_some(token)
}

/// The nine standard methods (RFC 9110, RFC 5789) key as themselves; any other is `other`,
/// so made-up methods cannot mint fresh budgets.
fn method_part(method: &Method) -> &str {
    match method.as_str() {
        m @ ("GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE"
        | "PATCH") => m,
        _ => "other",
    }
}

use crate::config::keyed_hash;

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
            ..ClientIp::default()
        };
        let account = Account {
            header: http::HeaderName::from_static("x-api-key"),
            hash_key: [7; 16],
            jwt: None,
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
        assert_eq!(
            a.as_ref().unwrap().as_deref(),
            Some("p:ip:2001:db8:1:2::/64")
        );
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
            Ok(None)
        );
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "sk_live_secret".parse().unwrap());
        let k = b
            .key(&p, &b.facts("1.1.1.1".parse().unwrap(), "login", &m, &h))
            .unwrap()
            .unwrap();
        assert!(!k.contains("sk_live_secret"), "{k}");
        assert!(k.starts_with("p:acct:") && k.ends_with(":login"), "{k}");
    }

    fn key_with(
        b: &KeyBuilder,
        p: &PolicyRuntime,
        m: &Method,
        h: &HeaderMap,
    ) -> Result<Option<String>, Ambiguous> {
        b.key(p, &b.facts("1.1.1.1".parse().unwrap(), "r", m, h))
    }

    #[test]
    fn unknown_methods_share_one_bucket() {
        let (b, h) = (builder(), HeaderMap::new());
        let p = policy(vec![KeyPart::Method]);
        for std in [
            "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
        ] {
            let m = Method::from_bytes(std.as_bytes()).unwrap();
            assert_eq!(key_with(&b, &p, &m, &h), Ok(Some(format!("p:{std}"))));
        }
        for odd in ["FOO1", "FOO2", "get", "PROPFIND", "OTHER"] {
            let m = Method::from_bytes(odd.as_bytes()).unwrap();
            assert_eq!(
                key_with(&b, &p, &m, &h),
                Ok(Some("p:other".into())),
                "{odd}"
            );
        }
    }

    #[test]
    fn a_needed_header_stated_twice_or_as_a_list_is_ambiguous() {
        let b = builder();
        let m = Method::GET;
        let api_key = HeaderName::from_static("x-api-key");
        let tenant = HeaderName::from_static("x-tenant");
        let by_account = policy(vec![KeyPart::Account]);
        let by_tenant = policy(vec![KeyPart::Header(tenant.clone())]);
        let by_ip = policy(vec![KeyPart::Ip]);
        let mut two_lines = HeaderMap::new();
        two_lines.append(&api_key, "junk".parse().unwrap());
        two_lines.append(&api_key, "real".parse().unwrap());
        two_lines.append(&tenant, "a".parse().unwrap());
        two_lines.append(&tenant, "a".parse().unwrap());
        let mut list = HeaderMap::new();
        list.insert(&api_key, "junk, real".parse().unwrap());
        list.insert(&tenant, "a,b".parse().unwrap());
        for h in [&two_lines, &list] {
            assert_eq!(
                key_with(&b, &by_account, &m, h),
                Err(Ambiguous(api_key.clone()))
            );
            assert_eq!(
                key_with(&b, &by_tenant, &m, h),
                Err(Ambiguous(tenant.clone()))
            );
            // A policy that does not need the header does not care.
            assert!(key_with(&b, &by_ip, &m, h).unwrap().is_some());
        }
        assert_eq!(
            Ambiguous(api_key.clone()).reason(),
            "the `x-api-key` header must appear once, with one value"
        );
        // Absent (or an empty account) keeps today's rule: the policy does not apply.
        let mut empty = HeaderMap::new();
        empty.insert(&api_key, "".parse().unwrap());
        assert_eq!(key_with(&b, &by_account, &m, &empty), Ok(None));
        assert_eq!(key_with(&b, &by_tenant, &m, &empty), Ok(None));
    }
}
