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
