//! Keys as an operator reads them, a child of `keys/mod.rs`: a policy with `show_values`
//! hands the top-keys summaries (`limit/top/`) its key with those parts' values in clear
//! (`login:f:alice`) as the label of the stored key they count, and a value an operator
//! looks up (`?value=alice`) is found in the summaries by its keyed hash in the stored
//! key, or in clear in the label where the policy shows it.
//!
//! Only what is shown: the key a site stores state under is always [`KeyBuilder::key`]'s
//! (hashed), so turning `show_values` on or off changes no key and resets nothing.

use super::missing::tag;
use super::{KeyBuilder, RequestFacts, Token, keyed_hash, single};
use crate::policy::PolicyRuntime;
use crate::spec::{KeyPart, Policy};

impl KeyBuilder {
    /// The key of `policy` for this request with its `show_values` parts in clear; `None`
    /// when the policy shows none (or its key is given: a replayed log's).
    pub fn shown_key(&self, policy: &PolicyRuntime, facts: &RequestFacts<'_>) -> Option<String> {
        let shown = &policy.spec.show_values;
        if shown.is_empty() || !facts.given.is_empty() {
            return None;
        }
        let mut key = String::with_capacity(64);
        key.push_str(&policy.name);
        for part in &policy.key {
            key.push(':');
            let at = key.len();
            let pushed = self.push_part(&mut key, part, facts, shown.contains(part));
            // The stored key was built from the same request: a part it lacked is missing
            // here too, and `on_missing` writes the same marker.
            match pushed {
                Ok(true) => {}
                Ok(false) => match self.on_missing(&mut key, at, policy, part) {
                    Ok(true) => {}
                    Ok(false) | Err(_) => return None,
                },
                Err(_) => return None,
            }
        }
        Some(key)
    }

    /// The account the request names, in clear: the `[account]` header's value, or the
    /// verified token's claim.
    pub(super) fn account_value(&self, facts: &RequestFacts<'_>) -> Option<String> {
        let a = self.account.as_ref()?;
        match &a.jwt {
            None => {
                let v = single(facts.headers, &a.header).ok()??;
                (!v.is_empty()).then(|| String::from_utf8_lossy(v).into_owned())
            }
            Some(jwt) => match &facts.token {
                Token::Verified(c) => jwt.account(c),
                _ => None,
            },
        }
    }

    /// What a key of `policy` holds where one of its parts is `value`: `:TAG:HASH` for
    /// each part a client sends (the keyed hash as keys hold it; lower-cased first for a
    /// `lowercase` body field), `:TAG:VALUE` for each part the policy shows, and the value
    /// as written for the parts never hashed (`ip`, `path`, `route`, `method`).
    pub fn needles(&self, policy: &Policy, value: &str) -> Vec<String> {
        let secret = &self.hash_key;
        let mut needles = Vec::new();
        for part in &policy.key {
            match part {
                KeyPart::Ip => needles.push(format!(":ip:{value}")),
                KeyPart::Path => needles.push(format!(":path:{value}")),
                KeyPart::Route | KeyPart::Method => needles.push(format!(":{value}")),
                _ => {}
            }
        }
        for part in policy.key.iter().filter(|p| p.is_sent_value()) {
            let folded = match part {
                KeyPart::Form(f) | KeyPart::Json(f) if f.lowercase => value.to_lowercase(),
                _ => value.to_string(),
            };
            let tag = tag(part);
            needles.push(format!(":{tag}:{}", keyed_hash(secret, folded.as_bytes())));
            if policy.show_values.contains(part) {
                needles.push(format!(":{tag}:{folded}"));
            }
        }
        needles.sort_unstable();
        needles.dedup();
        needles
    }
}

#[cfg(test)]
mod tests {
    use std::num::{NonZeroU32, NonZeroUsize};
    use std::time::Duration;

    use http::{HeaderMap, HeaderValue, Method};

    use super::super::{KeyBuilder, Target};
    use crate::policy::PolicyRuntime;
    use crate::spec::{Account, AlgorithmName, IpKeys, KeyPart, Policy, Site};

    fn builder() -> KeyBuilder {
        let ip_keys = IpKeys {
            ipv6_prefix: 64,
            shared_ranges: Vec::new(),
        };
        let account = Account {
            header: http::HeaderName::from_static("x-api-key"),
            hash_key: [7; 16],
            jwt: None,
        };
        KeyBuilder::new(&ip_keys, Some(account))
    }

    fn policy(key: Vec<KeyPart>, show_values: Vec<KeyPart>) -> PolicyRuntime {
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
            site: Site::Local,
            local_first: false,
            lease: Default::default(),
            spend: Default::default(),
            on_missing_key: None,
            show_values,
        };
        PolicyRuntime::new(0, &p, &[]).unwrap()
    }

    /// The shown key puts the listed parts in clear, the others as the stored key has them;
    /// the stored key is the same with or without `show_values`; a value's needles find
    /// both forms.
    #[test]
    fn shown_parts_are_in_clear_and_the_stored_key_does_not_change() {
        let b = builder();
        let tenant = KeyPart::Header(http::HeaderName::from_static("x-tenant"));
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("k-123"));
        headers.insert("x-tenant", HeaderValue::from_static("acme"));
        let m = Method::GET;
        let target = Target::default();
        let facts = b.facts("192.0.2.1".parse().unwrap(), "r", &m, target, &headers);
        let key = vec![KeyPart::Ip, KeyPart::Account, tenant.clone()];
        let hidden = policy(key.clone(), Vec::new());
        let shown = policy(key.clone(), vec![tenant.clone()]);
        let all = policy(key, vec![KeyPart::Account, tenant]);
        let stored = b.key(&hidden, &facts).unwrap().unwrap();
        assert_eq!(b.key(&shown, &facts).unwrap().unwrap(), stored);
        assert_eq!(b.shown_key(&hidden, &facts), None);
        let account_hash = stored
            .split(":acct:")
            .nth(1)
            .unwrap()
            .split(':')
            .next()
            .unwrap();
        assert_eq!(
            b.shown_key(&shown, &facts).unwrap(),
            format!("p:ip:192.0.2.1:acct:{account_hash}:h:acme")
        );
        assert_eq!(
            b.shown_key(&all, &facts).unwrap(),
            "p:ip:192.0.2.1:acct:k-123:h:acme"
        );
        let holds = |key: &str, value: &str| {
            b.needles(&all.spec, value)
                .iter()
                .any(|n| crate::top::holds(key, n))
        };
        for key in [stored.as_str(), "p:ip:192.0.2.1:acct:k-123:h:acme"] {
            assert!(holds(key, "k-123"), "{key}");
            assert!(holds(key, "192.0.2.1"), "{key}");
            assert!(!holds(key, "k-12"), "{key}: a prefix is not the value");
        }
        assert!(holds("p:ip:192.0.2.1:acct:k-123:h:acme", "acme"));
    }
}
