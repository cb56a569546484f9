//! `tollgate certs`: a self-signed development certificate for `localhost`, so the TLS
//! listener works out of the box and tests have a certificate to trust.

use std::path::{Path, PathBuf};

/// Why the certificate could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A certificate and its key, PEM-encoded.
pub struct DevCert {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A self-signed certificate for `localhost`, `127.0.0.1` and `::1`.
pub fn generate() -> Result<DevCert, CertError> {
    let names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let rcgen::CertifiedKey { cert, signing_key } = rcgen::generate_simple_self_signed(names)?;
    Ok(DevCert {
        cert_pem: cert.pem(),
        key_pem: signing_key.serialize_pem(),
    })
}

/// Write `localhost.pem` and `localhost-key.pem` into `dir`; returns their paths.
pub fn write(dir: &Path) -> Result<(PathBuf, PathBuf), CertError> {
    let c = generate()?;
    let cert = dir.join("localhost.pem");
    let key = dir.join("localhost-key.pem");
    for (path, text) in [(&cert, &c.cert_pem), (&key, &c.key_pem)] {
        std::fs::write(path, text).map_err(|source| CertError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok((cert, key))
}
