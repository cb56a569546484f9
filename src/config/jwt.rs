//! `[account] jwt`: the account is a claim of a verified JSON Web Token instead of a raw
//! header value, so a client cannot name someone else's account (or a fresh one per
//! request) for a fresh budget. HS256 with a secret from the environment, or the RS256 /
//! ES256 / EdDSA keys of a JWKS file; signature, `exp` and `nbf` are checked (and `iss` /
//! `aud` when set), by the `jsonwebtoken` crate.

use std::path::Path;
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::validate::Validator;

/// `jwt = { ... }` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    /// The claim naming the account (`sub` by default).
    #[serde(default = "default_claim")]
    pub claim: String,
    /// HS256: the environment variable holding the shared secret.
    pub hs256_secret_env: Option<String>,
    /// RS256/ES256/EdDSA: a JWKS file (`{"keys": [...]}`) of public keys.
    pub jwks_file: Option<String>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway")]
    pub leeway: String,
    /// What a token that is sent but does not verify means to a policy keyed on it.
    #[serde(default)]
    pub on_unverified: OnUnverified,
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

fn default_claim() -> String {
    "sub".into()
}

fn default_leeway() -> String {
    "30s".into()
}

/// The longest `leeway`: clock skew is seconds; a day is already a day of expired tokens.
const LONGEST_LEEWAY: Duration = Duration::from_secs(24 * 3600);

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

impl Validator {
    /// `leeway` in whole seconds, as the token library takes it: zero allowed (no leeway),
    /// a fraction of a second rounded up, at most [`LONGEST_LEEWAY`] (the library subtracts
    /// it from the Unix time: past 1970 it would wrap and every token would be expired).
    fn leeway(&mut self, text: &str) -> Option<u64> {
        const KEY: &str = "account.jwt.leeway";
        let Ok(d) = humantime::parse_duration(text) else {
            self.fail(
                KEY,
                format!("`{text}` is not a duration like \"30s\" or \"2m\""),
            );
            return None;
        };
        if d > LONGEST_LEEWAY {
            self.fail(KEY, "must be at most a day (24h)");
            return None;
        }
        Some(d.as_secs() + u64::from(d.subsec_nanos() > 0))
    }

    pub(super) fn jwt(&mut self, raw: &RawJwt, origin: &Path) -> Option<Jwt> {
        // Checked first: a missing secret must not hide a bad leeway.
        let leeway = self.leeway(&raw.leeway);
        let keys = match (&raw.hs256_secret_env, &raw.jwks_file) {
            (Some(var), None) => match std::env::var(var) {
                Ok(s) if s.len() >= 32 => vec![(
                    None,
                    DecodingKey::from_secret(s.as_bytes()),
                    Algorithm::HS256,
                )],
                Ok(_) => {
                    self.fail(
                        "account.jwt.hs256_secret_env",
                        format!("environment variable `{var}` must hold at least 32 bytes"),
                    );
                    return None;
                }
                Err(_) => {
                    self.fail(
                        "account.jwt.hs256_secret_env",
                        format!("environment variable `{var}` is not set"),
                    );
                    return None;
                }
            },
            (None, Some(file)) => self.jwks(file, origin)?,
            _ => {
                self.fail(
                    "account.jwt",
                    "needs exactly one of hs256_secret_env and jwks_file",
                );
                return None;
            }
        };
        if raw.claim.is_empty() {
            self.fail("account.jwt.claim", "must name a claim");
        }
        let leeway = leeway?;
        let mut validation = Validation::new(keys[0].2);
        validation.leeway = leeway;
        validation.validate_nbf = true;
        match &raw.audience {
            Some(a) => validation.set_audience(&[a]),
            None => validation.validate_aud = false,
        }
        if let Some(i) = &raw.issuer {
            validation.set_issuer(&[i]);
        }
        Some(Jwt {
            keys,
            validation,
            claim: raw.claim.clone(),
            on_unverified: raw.on_unverified,
        })
    }

    fn jwks(
        &mut self,
        file: &str,
        origin: &Path,
    ) -> Option<Vec<(Option<String>, DecodingKey, Algorithm)>> {
        let key = "account.jwt.jwks_file";
        let path = self.readable(key, origin, file)?;
        let set: JwkSet = match std::fs::read(&path).map(|b| serde_json::from_slice(&b)) {
            Ok(Ok(set)) => set,
            _ => {
                self.fail(
                    key,
                    format!(
                        "`{}` is not a JWKS (JSON with a `keys` array)",
                        path.display()
                    ),
                );
                return None;
            }
        };
        let keys: Vec<_> = set
            .keys
            .iter()
            .filter_map(|jwk| {
                let alg = jwk
                    .common
                    .key_algorithm?
                    .to_string()
                    .parse::<Algorithm>()
                    .ok()?;
                let decoding = DecodingKey::from_jwk(jwk).ok()?;
                (alg != Algorithm::HS256).then(|| (jwk.common.key_id.clone(), decoding, alg))
            })
            .collect();
        if keys.is_empty() {
            self.fail(
                key,
                format!(
                    "`{}` has no usable public key (each needs `alg`)",
                    path.display()
                ),
            );
            return None;
        }
        Some(keys)
    }
}
