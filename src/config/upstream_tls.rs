//! `https://` upstreams: `ca_file` (the roots to trust instead of the system's),
//! `client_cert` / `client_key` (mTLS) and `pin_sha256` (the leaf's public key) of
//! `[upstreams.NAME]`, read and parsed here so that `tollgate check` names a missing or
//! malformed file or pin before any request needs it; step 5's verifier
//! (`proxy/upstream/verify.rs`) uses what this keeps. There is deliberately no switch to
//! skip verification: a test or a private CA is a `ca_file`, a self-signed leaf a pin.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use http::Uri;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::raw::RawUpstream;
use super::validate::Validator;

/// How one upstream's TLS connections authenticate (only for `https://` URLs).
#[derive(Debug, Default)]
pub struct UpstreamTls {
    /// `ca_file`'s certificates: the only roots trusted. `None`: the system store.
    pub roots: Option<Vec<CertificateDer<'static>>>,
    /// `client_cert` chain and `client_key`, sent when the upstream asks for one.
    pub client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    /// `pin_sha256`: SHA-256 of the leaf's DER SubjectPublicKeyInfo, one of which must
    /// match. Empty: no pin (an empty list in the file is refused, so empty is "unset").
    pub pins: Vec<[u8; 32]>,
    /// `ca_file` as resolved against the config's folder, for messages.
    pub ca_file: Option<PathBuf>,
    /// The names (subjectAltName DNS names and IP addresses) of each `ca_file` certificate
    /// that is a self-signed CA naming hosts: what OpenSSL's one-line `req -x509` makes for
    /// a server, and webpki refuses as an end entity. Kept for `check`'s warning that such
    /// a certificate serves as the upstream's own only pinned byte for byte.
    pub self_signed_cas: Vec<Vec<String>>,
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
            ("ca_file", raw.ca_file.is_some()),
            ("client_cert", raw.client_cert.is_some()),
            ("client_key", raw.client_key.is_some()),
            ("pin_sha256", raw.pin_sha256.is_some()),
        ];
        if !https {
            for (k, _) in set.into_iter().filter(|(_, v)| *v) {
                self.fail(&at(k), "only https:// upstreams use TLS");
            }
            return None;
        }
        let ca_file = (raw.ca_file.as_ref()).and_then(|p| self.readable(&at("ca_file"), origin, p));
        let roots = (ca_file.as_ref()).and_then(|p| self.certificates(&at("ca_file"), p));
        let self_signed_cas = (roots.iter().flatten())
            .filter_map(host_naming_self_signed_ca)
            .collect();
        let pins = raw
            .pin_sha256
            .as_ref()
            .map(|p| self.pins(&at("pin_sha256"), p))
            .unwrap_or_default();
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
        Some(Arc::new(UpstreamTls {
            roots,
            client,
            pins,
            ca_file,
            self_signed_cas,
        }))
    }

    /// `pin_sha256`'s entries, each the standard base64 (with padding) of 32 bytes, as
    /// curl's `--pinnedpubkey sha256//…` and `openssl dgst -sha256 -binary | base64` write
    /// them. A bad entry is reported and left out (the config fails anyway).
    fn pins(&mut self, key: &str, written: &[String]) -> Vec<[u8; 32]> {
        if written.is_empty() {
            self.fail(key, "needs at least one pin (or leave the key out)");
        }
        let mut pins = Vec::with_capacity(written.len());
        for (i, pin) in written.iter().enumerate() {
            let decoded = base64::engine::general_purpose::STANDARD.decode(pin);
            match decoded.ok().and_then(|b| <[u8; 32]>::try_from(b).ok()) {
                Some(p) => pins.push(p),
                None if pin.starts_with("sha256//") => self.fail(
                    &format!("{key}[{i}]"),
                    format!("`{pin}`: write only the base64 after `sha256//`"),
                ),
                None => self.fail(
                    &format!("{key}[{i}]"),
                    format!("`{pin}` is not the base64 of a SHA-256 (32 bytes)"),
                ),
            }
        }
        pins
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

/// The subjectAltName DNS names and IP addresses of `cert` when it is a CA
/// (`basicConstraints CA:TRUE`), signed by its own key and names at least one host: a
/// server's certificate made the quick way rather than a CA (a CA names no host). `None`
/// for anything else, including what does not parse (rustls then skips or refuses it).
fn host_naming_self_signed_ca(cert: &CertificateDer<'_>) -> Option<Vec<String>> {
    let (_, x) = X509Certificate::from_der(cert).ok()?;
    let self_signed =
        x.subject().as_raw() == x.issuer().as_raw() && x.verify_signature(None).is_ok();
    if !x.is_ca() || !self_signed {
        return None;
    }
    let san = x.subject_alternative_name().ok()??;
    let names: Vec<String> = (san.value.general_names.iter())
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some((*d).to_string()),
            GeneralName::IPAddress(b) => ip(b).map(|a| a.to_string()),
            _ => None,
        })
        .collect();
    (!names.is_empty()).then_some(names)
}

/// A subjectAltName iPAddress entry: 4 or 16 bytes.
fn ip(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}
