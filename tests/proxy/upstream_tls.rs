//! `https://` upstreams over real sockets: a TLS backend (tokio-rustls, the shipped
//! development certificate) is reached when `ca_file` trusts it and refused with a 502
//! when nothing does (no switch skips verification); a backend that demands a client
//! certificate gets `client_cert`/`client_key`.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::common::*;
use http::StatusCode;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

fn certs() -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(repo_path("certs/localhost.pem"))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// A TLS backend answering `tls ok`; with `client_auth`, only to clients presenting a
/// certificate the development certificate vouches for.
async fn tls_upstream(client_auth: bool) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::from_pem_file(repo_path("certs/localhost-key.pem")).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if client_auth {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(certs());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(certs(), key).unwrap();
    crate::common::tls_backend::serve(config, "tls ok").await
}

/// A gateway whose upstream `app` is `https://localhost:PORT` with `tls` keys.
async fn gateway(up: SocketAddr, tls: &str) -> Gateway {
    Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [upstreams.app]\nurls = [\"https://localhost:{}\"]\n{tls}\n\
         [[routes]]\nname = \"api\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"app\"\n",
        up.port()
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_verified_against_ca_file() {
    let up = tls_upstream(false).await;
    let gw = gateway(up, "ca_file = \"certs/localhost.pem\"").await;
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/x"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await, "tls ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_certificate_nothing_trusts_is_a_502() {
    let up = tls_upstream(false).await;
    // The system roots do not vouch for the development certificate.
    let gw = gateway(up, "").await;
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/x"))).await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let body = text(resp).await;
    assert!(body.contains("upstream `app` is unavailable"), "{body}");
    assert!(
        !body.contains("certificate"),
        "no library detail to the client: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_demanding_a_client_certificate_gets_client_cert() {
    let up = tls_upstream(true).await;
    let without = gateway(up, "ca_file = \"certs/localhost.pem\"").await;
    let resp = send_h1(without.addrs.listen, get(&without.url("/x"))).await;
    assert_eq!(
        resp.status(),
        StatusCode::BAD_GATEWAY,
        "no certificate, no answer"
    );
    let with = gateway(
        up,
        "ca_file = \"certs/localhost.pem\"\nclient_cert = \"certs/localhost.pem\"\nclient_key = \"certs/localhost-key.pem\"",
    )
    .await;
    let resp = send_h1(with.addrs.listen, get(&with.url("/x"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await, "tls ok");
}
