//! `https://` upstreams whose certificate is pinned, over real sockets: the certificate
//! OpenSSL's one-line `req -x509` makes (`CA:TRUE`, which webpki refuses as an end entity)
//! named by `ca_file` is accepted as the upstream's own certificate only when presented byte
//! for byte, for its own names; `pin_sha256` pins the leaf's public key, alone or on top of
//! `ca_file`. Every certificate is made by the `openssl` command line at test time.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::common::temp::TempDir;
use crate::common::*;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The command: a self-signed certificate for `cn` with `san` as its names, made
/// the quick way (OpenSSL marks it `CA:TRUE`). Its certificate and key paths in `dir`.
fn quick_cert(dir: &TempDir, name: &str, cn: &str, san: &str) -> (PathBuf, PathBuf) {
    let (key, cert) = (
        dir.0.join(format!("{name}-k.pem")),
        dir.0.join(format!("{name}-c.pem")),
    );
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args(["-days", "30", "-subj", &format!("/CN={cn}"), "-addext"])
        .arg(format!("subjectAltName={san}"))
        .output()
        .expect("the openssl command line (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// A TLS backend presenting `cert` (its key `key`), answering `pinned ok`.
async fn backend(cert: &Path, key: &Path) -> SocketAddr {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                        "pinned ok",
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

/// The status of `GET /x` through a gateway whose upstream `app` is `https://HOST:PORT`
/// with `tls` keys.
async fn status_via(host: &str, up: SocketAddr, tls: &str) -> StatusCode {
    let gw = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [upstreams.app]\nurls = [\"https://{host}:{}\"]\n{tls}\n\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n",
        up.port()
    ))
    .await;
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/x"))).await;
    let status = resp.status();
    if status == StatusCode::OK {
        assert_eq!(text(resp).await, "pinned ok");
    }
    status
}

fn ca_file(path: &Path) -> String {
    format!("ca_file = \"{}\"", path.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_openssl_certificate_as_ca_file_is_accepted_pinned() {
    let dir = TempDir::new("pin-quick");
    let (cert, key) = quick_cert(&dir, "app", "localhost", "DNS:localhost,IP:127.0.0.1");
    let up = backend(&cert, &key).await;
    for host in ["localhost", "127.0.0.1"] {
        assert_eq!(
            status_via(host, up, &ca_file(&cert)).await,
            StatusCode::OK,
            "{host}"
        );
    }
}
