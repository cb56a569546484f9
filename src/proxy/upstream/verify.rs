//! Who an `https://` upstream is (step 5, in the TLS handshake of a new upstream
//! connection): rustls' own chain verification first, then two things it does not do.
//!
//! - A `ca_file` certificate that is itself the upstream's leaf is accepted *pinned*: the
//!   presented certificate must equal it byte for byte, be valid now and name the URL's
//!   host. OpenSSL's one-line `req -x509` marks such a certificate `CA:TRUE`, which webpki
//!   refuses as an end entity (`CaUsedAsEndEntity`) while nginx and curl accept it.
//! - `pin_sha256`: the leaf's SubjectPublicKeyInfo must hash to one of the pins, on top of
//!   the chain (or pinned leaf) with `ca_file` or the system's roots, and *instead* of a
//!   chain without `ca_file` (Envoy's `verify_certificate_spki`); the name and validity
//!   period are checked either way.
//!
//! Nothing here accepts a certificate without checking it: there is no "accept anything"
//! state, and a verifier with neither roots nor pins refuses every certificate.

use std::sync::Arc;

use base64::Engine;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, OtherError, RootCertStore,
    SignatureScheme,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};
use x509_parser::prelude::{FromDer, X509Certificate};

/// The verifier of one upstream's certificates.
#[derive(Debug)]
pub(super) struct UpstreamVerifier {
    trust: Trust,
    /// `pin_sha256`: SHA-256 of the leaf's DER SubjectPublicKeyInfo. Empty: no pin, which
    /// [`Trust::PinsOnly`] never accepts.
    pins: Vec<[u8; 32]>,
    /// The provider's signature algorithms, for the handshake signatures when there is no
    /// chain verifier to ask (the functions it calls itself).
    algorithms: WebPkiSupportedAlgorithms,
}

/// What vouches for the upstream's leaf before the pins are looked at.
#[derive(Debug)]
enum Trust {
    /// `ca_file`'s certificates or the system's roots: a chain to one of them, or failing
    /// that a leaf byte-equal to one of `leaves` (the `ca_file` certificates; none for the
    /// system's). `chain` is `None` when no root is usable: only `leaves` then pass.
    Roots {
        chain: Option<Arc<WebPkiServerVerifier>>,
        leaves: Vec<CertificateDer<'static>>,
    },
    /// `pin_sha256` without `ca_file`: a pin replaces the chain.
    PinsOnly,
}

/// The leaf's public key matches no `pin_sha256` entry; `presented` is its pin, the value
/// to compare with the config (the TLS error in the log line shows it).
#[derive(Debug, thiserror::Error)]
#[error("the certificate's public key matches no pin_sha256 (it is {presented})")]
struct PinMismatch {
    presented: String,
}

/// webpki refused the leaf as a CA (`CaUsedAsEndEntity`), and it is not one `ca_file` holds:
/// said plainly, since webpki's name for it points at the flag, not at the file. rustls
/// logs the error's `Debug`, hence the sentence in a field.
#[derive(Debug, thiserror::Error)]
#[error("{why}")]
struct CaUsedAsEndEntity {
    why: &'static str,
}

const NOT_LISTED: &str = "the upstream presented a CA certificate (CA:TRUE) as its own, and it is not byte for byte one of ca_file's (only the very certificate listed there is accepted as pinned)";

/// The leaf is not a certificate x509-parser reads, or its validity period is unreadable.
#[derive(Debug, thiserror::Error)]
#[error("the upstream's certificate does not parse")]
struct Unparsable;

impl UpstreamVerifier {
    /// A verifier trusting `roots` (with `ca_file`'s certificates as pinnable `leaves`) and
    /// requiring one of `pins`. `pins_only`: no `ca_file` and pins set, so the pins replace
    /// the chain; it is ignored without pins, so that there is always something to check.
    pub(super) fn new(
        roots: RootCertStore,
        leaves: Vec<CertificateDer<'static>>,
        pins: Vec<[u8; 32]>,
        pins_only: bool,
        provider: Arc<CryptoProvider>,
    ) -> Self {
        let algorithms = provider.signature_verification_algorithms;
        let trust = if pins_only && !pins.is_empty() {
            Trust::PinsOnly
        } else {
            // rustls refuses to build only on an empty store (and bad CRLs, none here):
            // no chain then, so only `leaves` can pass.
            let chain = (!roots.is_empty())
                .then(|| WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider))
                .and_then(|b| b.build().ok());
            Trust::Roots { chain, leaves }
        };
        UpstreamVerifier {
            trust,
            pins,
            algorithms,
        }
    }

    /// The chain verifier, which also checks the handshake signatures when there is one.
    fn chain(&self) -> Option<&WebPkiServerVerifier> {
        match &self.trust {
            Trust::Roots { chain, .. } => chain.as_deref(),
            Trust::PinsOnly => None,
        }
    }

    /// `Ok` when the leaf's public key hashes to one of the pins, or there are none and
    /// the chain decided (never with [`Trust::PinsOnly`], which is built only with pins).
    fn check_pins(&self, end_entity: &CertificateDer<'_>) -> Result<(), Error> {
        if self.pins.is_empty() && matches!(self.trust, Trust::Roots { .. }) {
            return Ok(());
        }
        let pin = spki_sha256(end_entity).ok_or_else(|| other(Unparsable))?;
        if self.pins.contains(&pin) {
            return Ok(());
        }
        Err(other(PinMismatch {
            presented: base64::engine::general_purpose::STANDARD.encode(pin),
        }))
    }
}

impl ServerCertVerifier for UpstreamVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match &self.trust {
            Trust::Roots { chain, leaves } => {
                let chained = match chain {
                    Some(c) => c
                        .verify_server_cert(
                            end_entity,
                            intermediates,
                            server_name,
                            ocsp_response,
                            now,
                        )
                        .map(drop),
                    None => Err(CertificateError::UnknownIssuer.into()),
                };
                if let Err(e) = chained {
                    // The fallback only for a leaf `ca_file` holds itself; any other
                    // certificate keeps the chain's verdict.
                    if !leaves.iter().any(|l| l.as_ref() == end_entity.as_ref()) {
                        let ca_as_leaf = format!("{e:?}").contains("CaUsedAsEndEntity");
                        return Err(if ca_as_leaf && !leaves.is_empty() {
                            other(CaUsedAsEndEntity { why: NOT_LISTED })
                        } else {
                            e
                        });
                    }
                    pinned_leaf(end_entity, server_name, now)?;
                }
            }
            Trust::PinsOnly => pinned_leaf(end_entity, server_name, now)?,
        }
        self.check_pins(end_entity)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        match self.chain() {
            Some(c) => c.verify_tls12_signature(message, cert, dss),
            None => rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        match self.chain() {
            Some(c) => c.verify_tls13_signature(message, cert, dss),
            None => rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        match self.chain() {
            Some(c) => c.supported_verify_schemes(),
            None => self.algorithms.supported_schemes(),
        }
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.chain().and_then(|c| c.root_hint_subjects())
    }
}

/// A leaf no chain vouches for (pinned byte for byte, or by its key): it must still name
/// `server_name` (webpki's own matching, as the chain path uses) and be valid at `now`.
fn pinned_leaf(
    end_entity: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), Error> {
    let ee = webpki::EndEntityCert::try_from(end_entity).map_err(webpki_error)?;
    ee.verify_is_valid_for_subject_name(server_name)
        .map_err(webpki_error)?;
    let (_, cert) = X509Certificate::from_der(end_entity).map_err(|_| other(Unparsable))?;
    let validity = cert.validity();
    let at =
        |secs: i64| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs.max(0) as u64));
    let time = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    if time < validity.not_before.timestamp() {
        let not_before = at(validity.not_before.timestamp());
        return Err(CertificateError::NotValidYetContext {
            time: now,
            not_before,
        }
        .into());
    }
    if time > validity.not_after.timestamp() {
        let not_after = at(validity.not_after.timestamp());
        return Err(CertificateError::ExpiredContext {
            time: now,
            not_after,
        }
        .into());
    }
    Ok(())
}

/// SHA-256 of `cert`'s DER SubjectPublicKeyInfo (the whole SEQUENCE): curl's
/// `--pinnedpubkey sha256//…` before base64. `None` when it does not parse.
pub(super) fn spki_sha256(cert: &CertificateDer<'_>) -> Option<[u8; 32]> {
    let (_, x) = X509Certificate::from_der(cert).ok()?;
    Some(Sha256::digest(x.public_key().raw).into())
}

/// webpki's verdict as rustls reports the same from its chain verifier.
fn webpki_error(e: webpki::Error) -> Error {
    match e {
        webpki::Error::BadDer | webpki::Error::BadDerTime | webpki::Error::TrailingData(_) => {
            CertificateError::BadEncoding.into()
        }
        webpki::Error::CertNotValidForName(cx) => CertificateError::NotValidForNameContext {
            expected: cx.expected,
            presented: cx.presented,
        }
        .into(),
        e => other(e),
    }
}

fn other(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    CertificateError::Other(OtherError(Arc::new(e))).into()
}

/// Certificates made by rcgen (the `dev-certs` feature's generator), for what the socket
/// tests (`tests/proxy/upstream_pin.rs`, with openssl) cannot make: expired or not yet
/// valid leaves, and the verifier's states checked one call at a time.
#[cfg(all(test, feature = "dev-certs"))]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, PublicKeyData};

    /// A self-signed CA:TRUE certificate for `localhost` valid from `from` to `to` (years).
    fn ca_leaf(from: i32, to: i32) -> (CertificateDer<'static>, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(to, 1, 1);
        (params.self_signed(&key).unwrap().der().clone(), key)
    }

    fn verifier(ca_file: &[&CertificateDer<'static>], pins: Vec<[u8; 32]>) -> UpstreamVerifier {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(ca_file.iter().map(|c| (*c).clone()));
        let leaves = ca_file.iter().map(|c| (*c).clone()).collect();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        UpstreamVerifier::new(roots, leaves, pins, ca_file.is_empty(), provider)
    }

    fn verify(v: &UpstreamVerifier, cert: &CertificateDer<'_>, name: &str) -> Result<(), Error> {
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
            .map(drop)
    }

    #[test]
    fn a_ca_file_leaf_is_pinned_for_its_own_names_only() {
        let (cert, _) = ca_leaf(2020, 2200);
        let v = verifier(&[&cert], vec![]);
        assert_eq!(verify(&v, &cert, "localhost"), Ok(()));
        let err = verify(&v, &cert, "other.test").unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{err:?}"
        );
        let (stranger, _) = ca_leaf(2020, 2200);
        let err = verify(&v, &stranger, "localhost").unwrap_err();
        // Said as what it is: not the listed certificate (webpki's name alone blames CA:TRUE).
        assert!(
            format!("{err}").contains("not byte for byte one of ca_file's"),
            "{err}"
        );
    }

    #[test]
    fn a_pinned_leaf_out_of_its_validity_period_is_refused() {
        let (old, _) = ca_leaf(2001, 2002);
        let err = verify(&verifier(&[&old], vec![]), &old, "localhost").unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidCertificate(CertificateError::ExpiredContext { .. })
            ),
            "{err:?}"
        );
        let (young, key) = ca_leaf(2190, 2200);
        let pin = Sha256::digest(key.subject_public_key_info()).into();
        let err = verify(&verifier(&[], vec![pin]), &young, "localhost").unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidCertificate(CertificateError::NotValidYetContext { .. })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn the_pin_is_the_sha256_of_the_whole_subject_public_key_info() {
        let (cert, key) = ca_leaf(2020, 2200);
        let pin: [u8; 32] = Sha256::digest(key.subject_public_key_info()).into();
        assert_eq!(spki_sha256(&cert), Some(pin));
        assert_eq!(
            verify(&verifier(&[], vec![pin]), &cert, "localhost"),
            Ok(())
        );
        let err = verify(&verifier(&[], vec![[7; 32]]), &cert, "localhost").unwrap_err();
        assert!(format!("{err}").contains("PinMismatch"), "{err}");
        // With ca_file as well, both must pass.
        let err = verify(&verifier(&[&cert], vec![[7; 32]]), &cert, "localhost").unwrap_err();
        assert!(format!("{err}").contains("PinMismatch"), "{err}");
        assert_eq!(
            verify(&verifier(&[&cert], vec![pin]), &cert, "localhost"),
            Ok(())
        );
    }

    #[test]
    fn neither_roots_nor_pins_refuses_everything() {
        let (cert, _) = ca_leaf(2020, 2200);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // "Pins only" without a pin is not a state: it is an empty root store.
        let v = UpstreamVerifier::new(RootCertStore::empty(), vec![], vec![], true, provider);
        assert_eq!(
            verify(&v, &cert, "localhost"),
            Err(CertificateError::UnknownIssuer.into())
        );
    }
}
