//! A policy's key when the request lacks one of its parts (`on_missing_key`): part of the
//! limit step's first act, building each policy's key (`KeyBuilder::key`).
//!
//! Why it exists: a request without the part cannot be counted under it, and letting it
//! through uncounted (`skip`, the default) lets a client escape a per-account or per-header
//! limit by leaving the account or header out (issue 35: 5 × 200 on a 3/min login limit).
//! `shared` counts every such request in one bucket; `deny` refuses them.
//!
//! Why [`MISSING`] cannot collide with a real part's text: the account, header, query,
//! cookie and claim parts are `TAG:` and a keyed hash of 32 hex digits (`m` is no hex
//! digit, and the word is shorter); a path part is `path:` and a canonical path, which
//! always starts with `/`; the token-that-does-not-verify marker is `unverified`. `ip`,
//! `route` and `method` are never missing, so they never take the marker.

use std::sync::Arc;

use super::{KeyBuilder, KeyError};
use crate::policy::PolicyRuntime;
use crate::spec::{KeyPart, OnMissingKey};

/// The key text of a missing part under `on_missing_key = "shared"` (after its tag).
pub(super) const MISSING: &str = "missing";

/// A request lacks a part of an enforcing `on_missing_key = "deny"` policy's key: refused
/// before any policy is asked. The message is the client's: names come from the config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy `{policy}` needs {what}")]
pub struct MissingKey {
    /// The policy, as clients see it (a tier's variant by its policy's name).
    pub policy: Arc<str>,
    /// The part, as the client is told: "the `x-username` header".
    pub what: String,
}

impl KeyBuilder {
    /// What `key` gets for `part`, which the request lacks (whatever `push_part` wrote
    /// from `at` on is dropped): `Ok(false)` when the policy does not apply (`skip`),
    /// `Ok(true)` with the shared marker appended (`shared`), `Err` when the request is
    /// refused (`deny`).
    pub(super) fn on_missing(
        &self,
        key: &mut String,
        at: usize,
        policy: &PolicyRuntime,
        part: &KeyPart,
    ) -> Result<bool, KeyError> {
        key.truncate(at);
        match policy.spec.on_missing_key.unwrap_or_default() {
            OnMissingKey::Skip => Ok(false),
            OnMissingKey::Shared => {
                key.push_str(tag(part));
                key.push(':');
                key.push_str(MISSING);
                Ok(true)
            }
            OnMissingKey::Deny => {
                let missing = MissingKey {
                    policy: policy.label.clone(),
                    what: self.what(part),
                };
                // Decided here, once: the account or a token's claim is a credential the
                // request lacks (401); any other part, a malformed request (400).
                Err(match part {
                    KeyPart::Account | KeyPart::Jwt(_) => KeyError::MissingCredential(missing),
                    _ => KeyError::Missing(missing),
                })
            }
        }
    }

    /// `part` as the client (and `tollgate check`) is told it is missing.
    pub fn what(&self, part: &KeyPart) -> String {
        let account = self.account.as_ref();
        match part {
            KeyPart::Account => match account {
                Some(a) if a.jwt.is_some() => {
                    format!(
                        "an account (a token in the `{}` header that names one)",
                        a.header
                    )
                }
                Some(a) => format!("an account (the `{}` header)", a.header),
                None => "an account".into(),
            },
            KeyPart::Header(n) => format!("the `{n}` header"),
            KeyPart::Query(n) => format!("the `{n}` query parameter"),
            KeyPart::Cookie(n) => format!("the `{n}` cookie"),
            KeyPart::Jwt(c) => format!("a verified token with the `{c}` claim"),
            KeyPart::Path => "a path".into(),
            KeyPart::Form(f) => format!(
                "the `{}` field in a form body (application/x-www-form-urlencoded or multipart/form-data)",
                f.name
            ),
            KeyPart::Json(p) => format!("`{}` in a JSON body (a string or a whole number)", p.name),
            KeyPart::Ip | KeyPart::Route | KeyPart::Method => "its client, route and method".into(),
            KeyPart::Given => "a key its caller gives".into(),
        }
    }
}

/// The tag a part's text starts with in a key, as `push_part` writes it.
pub(super) fn tag(part: &KeyPart) -> &'static str {
    match part {
        KeyPart::Account => "acct",
        KeyPart::Header(_) => "h",
        KeyPart::Query(_) => "q",
        KeyPart::Cookie(_) => "c",
        KeyPart::Jwt(_) => "j",
        KeyPart::Path => "path",
        KeyPart::Form(_) => "f",
        KeyPart::Json(_) => "js",
        // Never missing (see the module doc); untagged in keys.
        KeyPart::Ip | KeyPart::Route | KeyPart::Method => "",
        // Only ever the whole key, given by the caller, never read from a request.
        KeyPart::Given => "given",
    }
}
