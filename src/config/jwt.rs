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
use super::{Jwt, OnUnverified};

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

fn default_claim() -> String {
    "sub".into()
}

fn default_leeway() -> String {
    "30s".into()
}

/// The longest `leeway`: clock skew is seconds; a day is already a day of expired tokens.
const LONGEST_LEEWAY: Duration = Duration::from_secs(24 * 3600);

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
        Some(Jwt::new(
            keys,
            validation,
            raw.claim.clone(),
            raw.on_unverified,
        ))
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
