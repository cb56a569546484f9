//! The rustls client configuration of one upstream (step 5): its `ca_file` roots or the
//! system's, its `pin_sha256` pins, its client certificate, and ring as the provider (the
//! one the server side uses). Built once per worker's forwarder; the certificate checks
//! are `verify.rs`'s, and verification is never off.

use std::sync::Arc;

use rustls::ClientConfig;
use rustls::RootCertStore;
use tracing::warn;

use super::verify::UpstreamVerifier;
use crate::config::Upstream;

/// `up`'s TLS client settings (plain `http://` upstreams get a verifier that refuses
/// everything, unused).
pub(super) fn client_config(up: &Upstream) -> ClientConfig {
    let tls = up.tls.as_deref();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    let pins = tls.map(|t| t.pins.clone()).unwrap_or_default();
    let ca_file = tls.and_then(|t| t.roots.clone());
    match &ca_file {
        Some(certs) => {
            let (_, bad) = roots.add_parsable_certificates(certs.iter().cloned());
            if bad > 0 {
                warn!(upstream = %up.name, bad, "ca_file: certificates rustls cannot use are skipped");
            }
        }
        // Pins without ca_file replace the chain: the system's roots are not asked.
        None if tls.is_some() && pins.is_empty() => system_roots(&mut roots, &up.name),
        None => {}
    }
    let pins_only = ca_file.is_none();
    let verifier = UpstreamVerifier::new(
        roots,
        ca_file.unwrap_or_default(),
        pins,
        pins_only,
        provider.clone(),
    );
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    match tls.and_then(|t| t.client.as_ref()) {
        Some((chain, key)) => match builder
            .clone()
            .with_client_auth_cert(chain.clone(), key.clone_key())
        {
            Ok(c) => c,
            Err(e) => {
                // Validation parsed both; a mismatched pair shows here, once per worker.
                warn!(upstream = %up.name, error = %e, "client_cert/client_key unusable: connecting without a client certificate");
                builder.with_no_client_auth()
            }
        },
        None => builder.with_no_client_auth(),
    }
}

/// The system's trusted roots (`rustls-native-certs`); none found is said, not hidden:
/// every https request to this upstream will then fail verification (502).
fn system_roots(roots: &mut RootCertStore, upstream: &str) {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        warn!(upstream, error = %e, "reading the system's trusted certificates");
    }
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        warn!(
            upstream,
            "no system trusted certificates found: set ca_file, or install ca-certificates"
        );
    }
}
