//! `https://` upstreams: `ca_file` (the roots to trust instead of the system's) and
//! `client_cert` / `client_key` (mTLS) of `[upstreams.NAME]`, read and parsed here so that
//! `tollgate check` names a missing or malformed file before any request needs it. There
//! is deliberately no switch to skip verification: a test or a private CA is a `ca_file`.

use std::path::Path;
use std::sync::Arc;

use http::Uri;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::raw::RawUpstream;
use super::validate::Validator;

/// How one upstream's TLS connections authenticate (only for `https://` URLs).
#[derive(Debug, Default)]
pub struct UpstreamTls {
    /// `ca_file`'s certificates: the only roots trusted. `None`: the system store.
    pub roots: Option<Vec<CertificateDer<'static>>>,
    /// `client_cert` chain and `client_key`, sent when the upstream asks for one.
    pub client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
}

impl Validator {
    /// The TLS settings of upstream `name`, which has `urls`; `None` when it has no
    /// https URL (a TLS key on such an upstream is refused).
    pub(super) fn upstream_tls(
        &mut self,
        name: &str,
        raw: &RawUpstream,
        urls: &[Uri],
        origin: &Path,
    ) -> Option<Arc<UpstreamTls>> {
        let at = |k: &str| format!("upstreams.{name}.{k}");
        let https = urls.iter().any(|u| u.scheme_str() == Some("https"));
        let set = [
            ("ca_file", &raw.ca_file),
            ("client_cert", &raw.client_cert),
            ("client_key", &raw.client_key),
        ];
        if !https {
            for (k, v) in set {
                if v.is_some() {
                    self.fail(&at(k), "only https:// upstreams use TLS");
                }
            }
            return None;
        }
        let roots = raw.ca_file.as_ref().and_then(|p| {
            let path = self.readable(&at("ca_file"), origin, p)?;
            self.certificates(&at("ca_file"), &path)
        });
        let client = match (&raw.client_cert, &raw.client_key) {
            (Some(c), Some(k)) => {
                let certs = self
                    .readable(&at("client_cert"), origin, c)
                    .and_then(|p| self.certificates(&at("client_cert"), &p));
                let key = self
                    .readable(&at("client_key"), origin, k)
                    .and_then(|p| self.private_key(&at("client_key"), &p));
                certs.zip(key)
            }
            (None, None) => None,
            (Some(_), None) => {
                self.fail(&at("client_key"), "required when client_cert is set");
                None
            }
            (None, Some(_)) => {
                self.fail(&at("client_cert"), "required when client_key is set");
                None
            }
        };
        Some(Arc::new(UpstreamTls { roots, client }))
    }

    fn certificates(&mut self, key: &str, path: &Path) -> Option<Vec<CertificateDer<'static>>> {
        let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
            .map(|it| it.collect())
            .unwrap_or_else(Err);
        match certs {
            Ok(c) if !c.is_empty() => Some(c),
            _ => {
                self.fail(
                    key,
                    format!("`{}` does not contain PEM certificates", path.display()),
                );
                None
            }
        }
    }

    fn private_key(&mut self, key: &str, path: &Path) -> Option<PrivateKeyDer<'static>> {
        PrivateKeyDer::from_pem_file(path)
            .map_err(|_| {
                self.fail(
                    key,
                    format!("`{}` does not contain a PEM private key", path.display()),
                )
            })
            .ok()
    }
}
