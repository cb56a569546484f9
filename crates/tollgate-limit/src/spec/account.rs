//! Who a request is: the `[account]` header, its keyed hash, and the verifier of account
//! tokens (`[account] jwt`), so a client cannot name someone else's account, or a fresh one
//! per request, for a fresh budget.

use std::sync::Arc;

use http::HeaderName;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// `[account]`, typed.
#[derive(Clone)]
pub struct Account {
    /// Header carrying the account.
    pub header: HeaderName,
    /// Key of the keyed hash applied to account values before they become keys or logs.
    pub hash_key: [u8; 16],
    /// `jwt`: the header carries a token whose claim is the account.
    pub jwt: Option<Arc<Jwt>>,
}

impl Account {
    /// The keyed hash of an account (or header) value, as keys and logs hold it: SipHash-1-3
    /// with the 128-bit secret, a fast PRF, so keys are unlinkable to the raw value without
    /// the secret, and 128 bits make collisions between clients negligible. 32 hex digits.
    pub fn hash(&self, value: &[u8]) -> String {
        keyed_hash(&self.hash_key, value)
    }
}

/// The secret of the keyed hash when `[account] hash_key_env` is not set. Values are still
/// never stored or logged raw, but anyone with this source can test guesses: deployments
/// set their own.
const DEFAULT_HASH_SECRET: &str = "tollgate-default-account-hash-key";

/// The 128-bit key derived from a hash secret (SipHash-1-3 of its bytes), as
/// `[account] hash_key_env` gives it.
pub fn hash_key_of(secret: &[u8]) -> [u8; 16] {
    use siphasher::sip128::{Hasher128, SipHasher13};
    use std::hash::Hasher;
    let mut h = SipHasher13::new();
    h.write(secret);
    h.finish128().as_bytes()
}

/// The hash key every hashed key part uses when no `hash_key_env` names one: the same with
/// or without an `[account]` section, so adding `[account]` for an account policy leaves
/// the keys of a `form:username` policy (and its lockouts) as they were.
pub fn default_hash_key() -> [u8; 16] {
    hash_key_of(DEFAULT_HASH_SECRET.as_bytes())
}

/// [`Account::hash`] with any 128-bit secret.
pub fn keyed_hash(secret: &[u8; 16], value: &[u8]) -> String {
    use siphasher::sip128::{Hasher128, SipHasher13};
    use std::hash::Hasher;
    let mut h = SipHasher13::new_with_key(secret);
    h.write(value);
    // `hex` rather than `write!("{b:02x}")` per byte: the formatter cost ~200 instructions
    // a key on the request path (callgrind, `tollgate replay`).
    hex::encode(h.finish128().as_bytes())
}

impl std::fmt::Debug for Account {
    /// Never prints the hash key: it is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// `on_unverified`: a token that is present but fails verification (forged, expired, cut,
/// `<tok>=`) is never "no key" to a policy keyed on the token (`account` with `jwt`,
/// `jwt:CLAIM`, `tier_claim`): as no key, the policy would not apply, and a client whose
/// budget is spent would only have to spoil its token (which the backend may still accept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnverified {
    /// Answer 401 (`WWW-Authenticate: Bearer`), nothing asked.
    #[default]
    Reject,
    /// Key every such request into one `unverified` bucket per policy (and the policy's
    /// own numbers for a tier), shared by all of them.
    Shared,
}

/// A verifier of account tokens.
pub struct Jwt {
    /// Keys with their `kid` (tokens naming a kid use only that key) and algorithm.
    keys: Vec<(Option<String>, DecodingKey, Algorithm)>,
    validation: Validation,
    pub claim: String,
    pub on_unverified: OnUnverified,
}

impl std::fmt::Debug for Jwt {
    /// Never the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwt")
            .field("keys", &self.keys.len())
            .field("claim", &self.claim)
            .finish_non_exhaustive()
    }
}

/// The claims of a token that verified.
type Claims = serde_json::Map<String, serde_json::Value>;

impl Jwt {
    /// A verifier with `keys` (each with its `kid` and algorithm) and the `validation` rules
    /// (`iss`, `aud`, leeway) the config gave.
    pub fn new(
        keys: Vec<(Option<String>, DecodingKey, Algorithm)>,
        validation: Validation,
        claim: String,
        on_unverified: OnUnverified,
    ) -> Self {
        Jwt {
            keys,
            validation,
            claim,
            on_unverified,
        }
    }

    /// The claims of `token` when it verifies (signature, `exp`, `nbf`, `iss`/`aud` when
    /// set); `None` for any token that does not. A request verifies its token once: the
    /// account and every `jwt:CLAIM` key part read these claims.
    pub fn claims(&self, token: &str) -> Option<Claims> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        let claims = self
            .keys
            .iter()
            .filter(|(kid, _, alg)| {
                *alg == header.alg && (header.kid.is_none() || *kid == header.kid)
            })
            .find_map(|(_, key, alg)| {
                let mut v = self.validation.clone();
                v.algorithms = vec![*alg];
                jsonwebtoken::decode::<serde_json::Value>(token, key, &v).ok()
            })?
            .claims;
        match claims {
            serde_json::Value::Object(map) => Some(map),
            _ => None,
        }
    }

    /// The account a verified token names: its `claim`, a string or a number.
    pub fn account(&self, claims: &Claims) -> Option<String> {
        match claims.get(&self.claim)? {
            serde_json::Value::Bool(_) => None,
            v => Self::claim_text(v),
        }
    }

    /// A claim as a key value: a non-empty string as it is, a number or a boolean as its
    /// text (`42`, `true`). `null`, an empty string, an object or an array is no value:
    /// their text would key on structure (member order, list order) the issuer may change
    /// at will, and a list claim (`roles`) is no identity.
    pub fn claim_text(v: &serde_json::Value) -> Option<String> {
        match v {
            serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            serde_json::Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}
