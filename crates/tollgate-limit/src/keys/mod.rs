//! Keys: what a request is counted as, per policy. The first thing the limit step does.
//!
//! A key is the policy name followed by its parts, joined with `:` (e.g.
//! `per_account_login:acct:3f…:login`), so two policies never share state. Secret-bearing
//! parts (account, header, query and cookie values, token claims) enter keys only as a keyed
//! hash, so neither the store nor a log ever holds them raw.
//!
//! Nothing a client can vary freely may mint a fresh key: unknown methods share one `other`
//! bucket, a header, query parameter or cookie a key needs must be stated exactly once
//! ([`Ambiguous`] otherwise), since rotating a junk first line or a second value would
//! otherwise give a new budget each time, and encodings of one value (`%61` and `a`, `/Login`
//! and `/login/`) are one key. `parts.rs` reads the parts out of a request.

mod body;
mod missing;
mod names;
mod parts;
mod shown;
#[cfg(test)]
mod tests;
mod text;
mod unclear;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU32;

use http::{HeaderMap, Method};
use ipnet::{IpNet, Ipv6Net};

use super::policy::PolicyRuntime;
use crate::spec::{Account, IpKeys, KeyPart, OnUnverified};
pub use body::KeyBody;
pub use missing::MissingKey;
pub use parts::Ambiguous;
use parts::{Credential, cookie, credential, method_part, path_part, query_param, single};
use text::{ipv4_text, ipv6_net_text, keyed_hash};

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is the IPv4 client it wraps: keys, logs and
/// forwarding headers all name a client by this one form.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The client an `ip` key names: IPv4-mapped and [`embedded_ipv4`] addresses as their IPv4.
fn keyed_client(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => embedded_ipv4(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The IPv4 client an IPv6 address stands for, where the address is made from it: through
/// a NAT64 / SIIT translator (`64:ff9b::a.b.c.d`, RFC 6052: every IPv4 client of an
/// IPv6-only ingress would otherwise share one /64), a 6to4 address (`2002:AABB:CCDD::/48`,
/// RFC 3056: one IPv4 host would hold 65 536 /64s) or Teredo (`2001:0::/32`, RFC 4380: the
/// client's address inverted in the last 32 bits; its server's clients would share a /64).
fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    match s {
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))),
        [0x2001, 0, ..] => Some(Ipv4Addr::from(!u32::from(low))),
        _ => None,
    }
}

/// What key building needs from the config.
#[derive(Debug, Clone)]
pub struct KeyBuilder {
    /// IPv6 clients are folded to their network of this length.
    ipv6_prefix: u8,
    /// Shared-address ranges, most specific first, with their headroom.
    shared_ranges: Vec<(IpNet, NonZeroU32)>,
    /// Where accounts come from.
    account: Option<Account>,
    /// The key of every hashed part's keyed hash: `[account]`'s, or the default one when
    /// there is no `[account]` (never another default: a key's identity must not depend
    /// on whether an unrelated section is written).
    hash_key: [u8; 16],
}

/// Where a request goes, for the `path` and `query:NAME` parts. `Default` is a request
/// whose target is not known (a replayed log line's key tally): those parts are absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Target<'a> {
    /// The canonical path the router matched (`proxy/canonical.rs` made it so).
    pub path: Option<&'a str>,
    /// The query as the client sent it, undecoded.
    pub query: Option<&'a str>,
    /// For `form:NAME` and `json:POINTER` parts: the body the proxy read for them.
    pub body: Option<&'a KeyBody>,
}

impl<'a> Target<'a> {
    /// The target of a request whose URI is already canonical.
    pub fn of(uri: &'a http::Uri) -> Self {
        Target {
            path: Some(uri.path()),
            query: uri.query(),
            body: None,
        }
    }
}

/// The claims of a verified token.
pub type Claims = serde_json::Map<String, serde_json::Value>;

/// The request's token, with `[account] jwt`: verified once per request, for the account,
/// every `jwt:CLAIM` part and `tier_claim`.
#[derive(Debug)]
pub enum Token {
    /// None sent (or no `[account] jwt`).
    Absent,
    /// It verified: its claims.
    Verified(Claims),
    /// One was sent but does not verify (forged, expired, spoiled, another scheme's): never
    /// "no key" to a policy keyed on it (`OnUnverified`).
    Unverified,
    /// The header is outside the bearer grammar or stated twice (a 400).
    Ambiguous(Ambiguous),
}

impl Token {
    /// The verified claims, if any.
    pub fn claims(&self) -> Option<&Claims> {
        match self {
            Token::Verified(c) => Some(c),
            _ => None,
        }
    }
}

/// Why a policy's key cannot be built for a request that has the parts it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// A part is stated ambiguously: 400.
    Ambiguous(Ambiguous),
    /// A part comes from a token that does not verify, and `on_unverified = "reject"`: 401.
    Unverified,
    /// The account or a token's claim is missing, and the policy says `on_missing_key =
    /// "deny"`: 401.
    MissingCredential(MissingKey),
    /// Another part is missing, and the policy says `on_missing_key = "deny"`: 400.
    Missing(MissingKey),
}

impl From<Ambiguous> for KeyError {
    fn from(a: Ambiguous) -> Self {
        KeyError::Ambiguous(a)
    }
}

/// The key text of a part read from a token that does not verify under `on_unverified =
/// "shared"`: no keyed hash is 10 characters long, so it names no real account or claim.
const UNVERIFIED: &str = "unverified";

/// The facts about one request that keys are made of; built once per request.
#[derive(Debug)]
pub struct RequestFacts<'a> {
    /// The client address part (IPv4 address, or IPv6 network).
    pub ip: String,
    /// Multiplier of ip-keyed limits for this client (shared ranges), 1 elsewhere.
    pub headroom: NonZeroU32,
    /// Hashed account, when the request names one; `Err` when it names it ambiguously.
    /// With `[account] jwt`, `None` also when the token does not verify (see `token`).
    pub account: Option<Result<String, Ambiguous>>,
    /// With `[account] jwt`: the request's token, verified once here for the account and
    /// every `jwt:CLAIM` part.
    pub token: Token,
    /// Route name.
    pub route: &'a str,
    pub method: &'a Method,
    /// For `path` and `query:NAME` parts.
    pub target: Target<'a>,
    /// For `header:NAME` and `cookie:NAME` parts.
    pub headers: &'a HeaderMap,
    /// Keys a live gateway logged for this request (`tollgate replay` of tollgate's own
    /// log, [`RequestFacts::give`]): a policy whose key is among them is keyed so. Empty
    /// on the request path.
    pub given: &'a [&'a str],
}

impl<'a> RequestFacts<'a> {
    /// Key as `given` says (see the field); an account-keyed given key also names the
    /// request's account (its keyed hash), so `require_account` and other account-keyed
    /// policies see it.
    pub fn give(&mut self, given: &'a [&'a str]) {
        self.given = given;
        if self.account.is_none() {
            self.account = given.iter().find_map(|k| {
                let hash = k.split(":acct:").nth(1)?.get(..32)?;
                hash.bytes()
                    .all(|b| b.is_ascii_hexdigit())
                    .then(|| Ok(hash.to_owned()))
            });
        }
    }
}

impl KeyBuilder {
    pub fn new(ip_keys: &IpKeys, account: Option<Account>) -> Self {
        KeyBuilder {
            ipv6_prefix: ip_keys.ipv6_prefix,
            shared_ranges: ip_keys.shared_ranges.clone(),
            hash_key: account
                .as_ref()
                .map_or_else(crate::spec::default_hash_key, |a| a.hash_key),
            account,
        }
    }

    /// Whether `policy`'s keys come out as other strings under `next` than under this
    /// builder for the same request: an IPv6 prefix or the hash key of hashed values
    /// changed (a reload then cannot carry the old keys' state). A `jwt:CLAIM` part names
    /// its claim itself (another claim is another key); `path` is not hashed.
    pub fn rekeys(&self, next: &KeyBuilder, policy: &[KeyPart]) -> bool {
        // With `jwt`, the account is a claim: another claim names accounts otherwise.
        let claim = |b: &KeyBuilder| {
            b.account
                .as_ref()
                .and_then(|a| a.jwt.as_ref())
                .map(|j| j.claim.clone())
        };
        let ip = policy.contains(&KeyPart::Ip) && self.ipv6_prefix != next.ipv6_prefix;
        let hashed = policy.iter().any(KeyPart::is_sent_value);
        let account = policy.contains(&KeyPart::Account) && claim(self) != claim(next);
        ip || account || (hashed && self.hash_key != next.hash_key)
    }

    /// The header accounts are read from, when `[account]` is set.
    pub fn account_header(&self) -> Option<&http::HeaderName> {
        self.account.as_ref().map(|a| &a.header)
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
        target: Target<'a>,
        headers: &'a HeaderMap,
    ) -> RequestFacts<'a> {
        // The client as its `ip` key names it: its headroom is that address's too.
        let client = keyed_client(client);
        let headroom = self
            .shared_ranges
            .iter()
            .find(|(net, _)| net.contains(&client))
            .map_or(NonZeroU32::MIN, |(_, h)| *h);
        let token = self.token(headers);
        let account = self.account.as_ref().and_then(|a| {
            let Some(jwt) = &a.jwt else {
                return match single(headers, &a.header) {
                    Err(ambiguous) => Some(Err(ambiguous)),
                    Ok(v) => Some(Ok(keyed_hash(&self.hash_key, v.filter(|v| !v.is_empty())?))),
                };
            };
            // A token that does not verify is no account at all: never a fresh one.
            match &token {
                Token::Ambiguous(ambiguous) => Some(Err(ambiguous.clone())),
                Token::Verified(c) => {
                    Some(Ok(keyed_hash(&self.hash_key, jwt.account(c)?.as_bytes())))
                }
                Token::Absent | Token::Unverified => None,
            }
        });
        RequestFacts {
            ip: self.ip_part(client),
            headroom,
            account,
            token,
            route,
            method,
            target,
            headers,
            given: &[],
        }
    }

    /// The request's token, when `[account] jwt` is set: the one signature check of the
    /// request.
    fn token(&self, headers: &HeaderMap) -> Token {
        let Some((a, jwt)) = self
            .account
            .as_ref()
            .and_then(|a| Some((a, a.jwt.as_ref()?)))
        else {
            return Token::Absent;
        };
        match credential(headers, &a.header) {
            Err(ambiguous) => Token::Ambiguous(ambiguous),
            Ok(Credential::None) => Token::Absent,
            Ok(Credential::Other) => Token::Unverified,
            Ok(Credential::Bearer(t)) => jwt.claims(t).map_or(Token::Unverified, Token::Verified),
        }
    }

    /// What a part read from a token that does not verify becomes (`on_unverified`).
    pub fn unverified(&self) -> Result<&'static str, KeyError> {
        let jwt = self.account.as_ref().and_then(|a| a.jwt.as_ref());
        match jwt.map(|j| j.on_unverified) {
            Some(OnUnverified::Shared) => Ok(UNVERIFIED),
            _ => Err(KeyError::Unverified),
        }
    }

    /// IPv4 as is; IPv6 as its `/ipv6_prefix` network, since one subscriber holds a whole
    /// /64; an IPv6 address that carries an IPv4 client ([`embedded_ipv4`]) as that client.
    pub fn ip_part(&self, ip: IpAddr) -> String {
        match keyed_client(ip) {
            IpAddr::V4(v4) => ipv4_text(v4),
            IpAddr::V6(v6) => Ipv6Net::new(v6, self.ipv6_prefix)
                .map(|n| ipv6_net_text(n.trunc()))
                .unwrap_or_else(|_| v6.to_string()),
        }
    }

    /// The key of `policy` for this request; where the request lacks a part (no account
    /// header, say), as its `on_missing_key` says: `None` (the policy does not apply), a
    /// shared marker, or `Err` (`missing.rs`). `Err` also for a part stated ambiguously or
    /// read from a token that does not verify.
    pub fn key(
        &self,
        policy: &PolicyRuntime,
        facts: &RequestFacts<'_>,
    ) -> Result<Option<String>, KeyError> {
        if let Some(k) = facts.given.iter().find(|k| {
            k.strip_prefix(&*policy.name)
                .is_some_and(|rest| rest.starts_with(':'))
        }) {
            return Ok(Some((*k).to_owned()));
        }
        let mut key = String::with_capacity(64);
        key.push_str(&policy.name);
        for part in &policy.key {
            key.push(':');
            let at = key.len();
            if !self.push_part(&mut key, part, facts, false)?
                && !self.on_missing(&mut key, at, policy, part)?
            {
                return Ok(None);
            }
        }
        Ok(Some(key))
    }

    /// Append one part to `key`; `false` when the request lacks it. `clear`: a sent value
    /// in clear instead of its keyed hash (the key as shown, `shown.rs`; never stored).
    fn push_part(
        &self,
        key: &mut String,
        part: &KeyPart,
        facts: &RequestFacts<'_>,
        clear: bool,
    ) -> Result<bool, KeyError> {
        let secret = &self.hash_key;
        let hashed = |key: &mut String, tag: &str, value: Option<&[u8]>| {
            if let Some(v) = value {
                key.push_str(tag);
                key.push(':');
                match clear {
                    true => key.push_str(&String::from_utf8_lossy(v)),
                    false => key.push_str(&keyed_hash(secret, v)),
                }
            }
            Ok(value.is_some())
        };
        match part {
            KeyPart::Ip => {
                key.push_str("ip:");
                key.push_str(&facts.ip);
            }
            KeyPart::Account if clear => {
                if let Some(value) = self.account_value(facts) {
                    key.push_str("acct:");
                    key.push_str(&value);
                    return Ok(true);
                }
                return self.push_part(key, part, facts, false);
            }
            KeyPart::Account => {
                let account = match (&facts.account, &facts.token) {
                    (Some(account), _) => account.as_deref().map_err(Clone::clone)?,
                    (None, Token::Unverified) => self.unverified()?,
                    (None, _) => return Ok(false),
                };
                key.push_str("acct:");
                key.push_str(account);
            }
            KeyPart::Route => key.push_str(facts.route),
            KeyPart::Method => key.push_str(method_part(facts.method)),
            KeyPart::Header(name) => return hashed(key, "h", single(facts.headers, name)?),
            KeyPart::Query(name) => {
                return hashed(key, "q", query_param(facts.target.query, name)?.as_deref());
            }
            KeyPart::Cookie(name) => {
                return hashed(key, "c", cookie(facts.headers, name)?.as_deref());
            }
            KeyPart::Jwt(claim) => {
                let claims = match &facts.token {
                    Token::Absent => return Ok(false),
                    Token::Verified(c) => c,
                    Token::Unverified => {
                        key.push_str("j:");
                        key.push_str(self.unverified()?);
                        return Ok(true);
                    }
                    Token::Ambiguous(a) => return Err(a.clone().into()),
                };
                let text = claims.get(claim).and_then(crate::spec::Jwt::claim_text);
                return hashed(key, "j", text.as_deref().map(str::as_bytes));
            }
            KeyPart::Path => {
                let Some(path) = facts.target.path else {
                    return Ok(false);
                };
                key.push_str("path:");
                path_part(key, path);
            }
            KeyPart::Form(field) => {
                let value = facts.target.body.map(|b| b.form(&field.name)).transpose()?;
                return hashed(key, "f", field.folded(value.flatten()).as_deref());
            }
            KeyPart::Json(field) => {
                let value = facts
                    .target
                    .body
                    .map(|b| b.json_at(&field.name))
                    .transpose()?;
                return hashed(key, "js", field.folded(value.flatten()).as_deref());
            }
            // The caller's key (`Limiter::check_keys`): no request of the proxy has one.
            KeyPart::Given => return Ok(false),
        }
        Ok(true)
    }
}
