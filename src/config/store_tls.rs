//! TLS and ACL for the Redis store: `ca_file`, `client_cert` / `client_key` (mTLS) and
//! `username_env` of `[store]`. The PEM files are read here, so `tollgate check` names a
//! missing or malformed file before the first store call would fail on it; they need
//! `rediss://` URLs (a TLS setting on a plain connection would be silently unused).

use std::path::Path;

use super::StoreTls;
use super::raw::{RawStore, StoreKind};
use super::validate::Validator;

impl Validator {
    /// `[store]`'s TLS keys; `None` when none is set.
    pub(super) fn store_tls(&mut self, raw: &RawStore, origin: &Path) -> Option<StoreTls> {
        if raw.ca_file.is_none() && raw.client_cert.is_none() && raw.client_key.is_none() {
            return None;
        }
        // A sentinel store reaches its master without TLS, and the memory store has no URL:
        // keys that would be read and then not used are refused, never silently ignored.
        if raw.urls.is_empty() || raw.urls.iter().any(|u| !u.starts_with("rediss://")) {
            let why = match raw.kind {
                StoreKind::RedisSentinel => {
                    "ca_file, client_cert and client_key are not supported with kind = \"redis-sentinel\": \
                     its master connection is plain TCP"
                }
                _ => "ca_file, client_cert and client_key need rediss:// URLs (TLS)",
            };
            self.fail("store.urls", why);
        }
        let mut pem = |key: &str, value: &Option<String>, cert: bool| {
            let path = self.readable(key, origin, value.as_deref()?)?;
            if !self.pem(key, &path, cert) {
                return None;
            }
            let bytes = std::fs::read(&path).ok()?;
            Some((path, bytes))
        };
        let ca = pem("store.ca_file", &raw.ca_file, true);
        let cert = pem("store.client_cert", &raw.client_cert, true);
        let key = pem("store.client_key", &raw.client_key, false);
        let client = match (cert, key, &raw.client_cert, &raw.client_key) {
            (Some((cp, c)), Some((kp, k)), _, _) => Some((cp, c, kp, k)),
            (_, _, Some(_), None) => {
                self.fail("store.client_key", "required when client_cert is set");
                None
            }
            (_, _, None, Some(_)) => {
                self.fail("store.client_cert", "required when client_key is set");
                None
            }
            _ => None,
        };
        Some(StoreTls { ca, client })
    }

    /// `username_env`: the ACL user the store connections log in as.
    pub(super) fn store_username(&mut self, raw: &RawStore) -> Option<String> {
        let var = raw.username_env.as_ref()?;
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Some(v),
            _ => {
                self.fail(
                    "store.username_env",
                    format!("environment variable `{var}` is not set"),
                );
                None
            }
        }
    }
}
