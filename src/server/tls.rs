//! TLS termination for `tls_listen`: rustls with ALPN so HTTP/2 clients negotiate h2.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use super::ServerError;

/// Build the acceptor from PEM files; errors name the file so a bad cert is easy to find.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, ServerError> {
    let tls_err = |path: &Path, reason: String| ServerError::Tls {
        path: path.to_path_buf(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| tls_err(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| tls_err(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(tls_err(cert, "no certificate found in PEM file".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_err(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| tls_err(key, e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
