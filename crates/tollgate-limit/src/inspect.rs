//! One key's state as an operator asks for it (the admin API's `GET` and `DELETE
//! /limits/{policy}`): the key built from the same parts a request has, by the same code,
//! read where its site keeps it — this node's local state (local, split, gossip; an owner
//! key this node owns), the store (central, and the coordinator of a leased key), or the
//! key's owner (an owner key another node owns) — and, on `DELETE`, forgotten there.

use std::net::{IpAddr, Ipv4Addr};

use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::clock::Nanos;
use super::keys::{Claims, KeyError, Target, Token};
use super::limiter::Limiter;
use super::route_limits::site_of;
use super::site::central::CentralItem;
use super::site::fleet::{KeyItem, OwnerReply};
use crate::spec::Site;
use crate::spec::{KeyPart, Mode};

/// The parts of a key, as a request would bring them.
#[derive(Debug, Default)]
pub struct KeyQuery {
    pub ip: Option<IpAddr>,
    /// The raw account value (hashed here as a request's is).
    pub account: Option<String>,
    /// A route name.
    pub route: Option<String>,
    pub method: Option<Method>,
    /// `header:NAME` parts.
    pub headers: Vec<(String, String)>,
    /// The request path (`path` parts), already canonical as the proxy makes it.
    pub path: Option<String>,
    /// `query:NAME` parts: decoded values, encoded again here as a client would send them.
    pub query: Vec<(String, String)>,
    /// `cookie:NAME` parts.
    pub cookies: Vec<(String, String)>,
    /// `form:NAME` parts: the field's value.
    pub form: Vec<(String, String)>,
    /// `json:POINTER` parts: the value the pointer names, as text (`42` for a number).
    pub json: Vec<(String, String)>,
    /// `jwt:CLAIM` parts: the claim's value as text (`42` for a number), standing for a
    /// verified token's claim (an operator has the claim, not a token).
    pub claims: Vec<(String, String)>,
    /// The key a caller gives, for a policy keyed `[Given]` (Envoy's rate limit service:
    /// the descriptor's counting key, as `/limits/{policy}/top` lists it).
    pub given: Option<String>,
}

/// What an operator sees of one key.
#[derive(Debug, serde::Serialize)]
pub struct KeyView {
    pub policy: String,
    pub site: &'static str,
    pub key: String,
    /// Where the numbers come from: `local`, `store` or the owner's peer address.
    pub source: String,
    pub limit: u64,
    pub window_seconds: f64,
    pub remaining: u64,
    pub reset_after_ms: u64,
}

/// Why a key cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("no policy named `{0}`")]
    NoPolicy(String),
    #[error("{0}")]
    BadKey(String),
    #[error("{0}")]
    Unavailable(String),
}

impl Limiter {
    /// `policy`'s key for `query`: its state, after forgetting it when `reset`.
    pub async fn inspect(
        &self,
        policy: &str,
        query: &KeyQuery,
        reset: bool,
    ) -> Result<KeyView, InspectError> {
        let index = self
            .policy_index(policy)
            .ok_or_else(|| InspectError::NoPolicy(policy.to_string()))?;
        // A tiered policy: the variant these key parts' request would be asked under.
        let (index, key, headroom) = self.query_key(index, query)?;
        let p = &self.sites().policies[index];
        let (site, _) = site_of(&p.spec, self.sites().central.is_some());
        let (source, remaining, reset_after) = match site {
            Site::Central | Site::Lease => self.in_store(index, &key, headroom, reset).await?,
            Site::Owner => self.at_owner(index, &key, headroom, reset).await?,
            Site::Local | Site::Split | Site::Gossip => {
                if reset {
                    self.sites().local.remove(index, &key);
                }
                let split = site == Site::Split;
                let snap = self.sites().local.peek(index, &key, headroom, split);
                ("local".to_string(), snap.remaining, snap.reset_after)
            }
        };
        let quota = p.algorithm(headroom).quota();
        Ok(KeyView {
            policy: policy.to_string(),
            site: site.name(),
            key,
            source,
            limit: quota.limit,
            window_seconds: quota.period.as_secs_f64(),
            remaining,
            reset_after_ms: reset_after / 1_000_000,
        })
    }

    /// The policy (a tier's variant) a request with these parts would be asked under, its
    /// key, and its headroom.
    fn query_key(
        &self,
        index: usize,
        q: &KeyQuery,
    ) -> Result<(usize, String, std::num::NonZeroU32), InspectError> {
        let p = &self.sites().policies[index];
        let bad = |m: String| InspectError::BadKey(m);
        let needs = |part: &KeyPart| p.key.contains(part);
        if needs(&KeyPart::Given) {
            let Some(given) = &q.given else {
                return Err(bad(
                    "this policy's key is given by its caller: give key=".into()
                ));
            };
            return Ok((
                index,
                format!("{}:{given}", p.name),
                std::num::NonZeroU32::MIN,
            ));
        }
        if needs(&KeyPart::Ip) && q.ip.is_none() {
            return Err(bad("this policy's key has an ip part: give ip=".into()));
        }
        if needs(&KeyPart::Route) && q.route.is_none() {
            return Err(bad("this policy's key has a route part: give route=".into()));
        }
        if needs(&KeyPart::Path) && q.path.is_none() {
            return Err(bad("this policy's key has a path part: give path=".into()));
        }
        let mut headers = HeaderMap::new();
        let mut put = |name: &str, value: &str| -> Result<(), InspectError> {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad(format!("`{name}` is not a header name")))?;
            let v = HeaderValue::from_str(value)
                .map_err(|_| bad(format!("the value for `{name}` is not a header value")))?;
            headers.append(n, v);
            Ok(())
        };
        if let (Some(a), Some(header)) = (&q.account, self.account_header()) {
            put(header.as_str(), a)?;
        }
        for (name, value) in &q.headers {
            put(name, value)?;
        }
        if !q.cookies.is_empty() {
            put("cookie", &cookie_line(&q.cookies))?;
        }
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&q.query)
            .finish();
        let body = body_of(q);
        let target = Target {
            path: q.path.as_deref(),
            query: Some(&query),
            body: body.as_ref(),
        };
        let ip = q.ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let method = q.method.clone().unwrap_or(Method::GET);
        let route = q.route.as_deref().unwrap_or("");
        let mut facts = self.keys().facts(ip, route, &method, target, &headers);
        if !q.claims.is_empty() {
            let given = q.claims.iter().map(|(c, v)| (c.clone(), v.clone().into()));
            let mut claims = match facts.token {
                Token::Verified(c) => c,
                _ => Claims::default(),
            };
            claims.extend(given);
            facts.token = Token::Verified(claims);
        }
        let unverified = || self.keys().unverified();
        let index = self
            .tiers()
            .pick(index, &facts, unverified)
            .map_err(|e| bad(key_error(e)))?;
        match self.keys().key(&self.sites().policies[index], &facts) {
            Ok(Some(key)) => Ok((index, key, facts.headroom)),
            Ok(None) => Err(bad("a part of this policy's key is missing (account=, \
                 header.NAME=, query.NAME=, cookie.NAME= or jwt.CLAIM=)"
                .into())),
            Err(e) => Err(bad(key_error(e))),
        }
    }

    /// A central key, or a leased key's coordinator state, in the store.
    async fn in_store(
        &self,
        index: usize,
        key: &str,
        headroom: std::num::NonZeroU32,
        reset: bool,
    ) -> Result<(String, u64, Nanos), InspectError> {
        let p = &self.sites().policies[index];
        let Some(site) = self.sites().central.as_ref() else {
            // The memory store: central keys are local state, leased ones the in-process
            // coordinator's, which is not readable here.
            return Err(InspectError::Unavailable(
                "this key's state is kept by the in-process lease coordinator".into(),
            ));
        };
        let item = CentralItem::new(site.key(key), &p.spec, headroom.get(), 0, Mode::Enforce);
        if reset {
            site.reset(&item).await.map_err(unavailable)?;
        }
        let r = site.peek(&item).await.map_err(unavailable)?;
        Ok(("store".to_string(), r.remaining, r.reset_after))
    }

    /// An owner key: this node's state if it owns it, else its owner's answer.
    async fn at_owner(
        &self,
        index: usize,
        key: &str,
        headroom: std::num::NonZeroU32,
        reset: bool,
    ) -> Result<(String, u64, Nanos), InspectError> {
        let Some(fleet) = self.fleet() else {
            return Err(InspectError::Unavailable("no peer fleet".into()));
        };
        let owner = fleet.ring.owner(key);
        if owner == fleet.ring.me() {
            if reset {
                self.sites().local.remove(index, key);
            }
            let snap = self.sites().local.peek(index, key, headroom, false);
            return Ok(("local".to_string(), snap.remaining, snap.reset_after));
        }
        let item = |cost| KeyItem {
            policy: self.sites().policies[index].name.clone(),
            spec: self.sites().specs[index],
            headroom: headroom.get(),
            cost,
            key: key.to_string(),
        };
        if reset {
            // A refund larger than any spend leaves every rate algorithm full.
            fleet
                .refund_now(owner, item(u32::MAX))
                .await
                .map_err(unavailable)?;
        }
        // An ask of no cells admits and spends nothing: the owner's numbers.
        let answers = fleet.ask(owner, &[item(0)]).await.map_err(unavailable)?;
        match answers.first() {
            Some(
                OwnerReply::Admitted {
                    remaining,
                    reset_after,
                    ..
                }
                | OwnerReply::Denied {
                    remaining,
                    reset_after,
                    ..
                },
            ) => Ok((owner.to_string(), *remaining, *reset_after)),
            _ => Err(InspectError::Unavailable(format!(
                "owner {owner} did not answer"
            ))),
        }
    }
}

/// A store or peer that could not answer.
fn unavailable(e: impl std::fmt::Display) -> InspectError {
    InspectError::Unavailable(e.to_string())
}

/// A `Cookie` line holding `cookies`, each value `%XX`-encoded (but letters and digits) so
/// that none can split the line, and decoded back to itself when the key is built.
fn cookie_line(cookies: &[(String, String)]) -> String {
    let mut line = String::new();
    for (name, value) in cookies {
        if !line.is_empty() {
            line.push_str("; ");
        }
        line.push_str(name);
        line.push('=');
        for b in value.bytes() {
            match b {
                b if b.is_ascii_alphanumeric() => line.push(b as char),
                b => line.push_str(&format!("%{b:02X}")),
            }
        }
    }
    line
}

/// Why a key cannot be built from the parts given, for the admin API's 400.
fn key_error(e: KeyError) -> String {
    match e {
        KeyError::Ambiguous(a) => a.reason(),
        KeyError::Unverified => {
            "a part of this policy's key comes from a token that does not verify".into()
        }
        KeyError::MissingCredential(m) | KeyError::Missing(m) => m.to_string(),
    }
}

/// The body a request with `q`'s `form.` or `json.` values would bring (`None`: neither).
fn body_of(q: &KeyQuery) -> Option<crate::keys::KeyBody> {
    use crate::keys::KeyBody;
    if !q.form.is_empty() {
        let fields = q
            .form
            .iter()
            .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()));
        return Some(KeyBody::Multipart(fields.collect()));
    }
    if q.json.is_empty() {
        return None;
    }
    let mut doc = serde_json::Value::Object(serde_json::Map::new());
    for (pointer, value) in &q.json {
        let mut at = &mut doc;
        let steps: Vec<String> = pointer
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        for (i, step) in steps.iter().enumerate() {
            let Some(map) = at.as_object_mut() else { break };
            let next = if i + 1 == steps.len() {
                serde_json::Value::String(value.clone())
            } else {
                serde_json::Value::Object(serde_json::Map::new())
            };
            at = map.entry(step.clone()).or_insert(next);
        }
    }
    Some(KeyBody::Json(Ok(doc)))
}
