//! TLS termination with a real client that trusts the shipped development certificate.

use std::sync::Arc;

use crate::common::*;
use http::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

fn connector(alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(repo_path("certs/localhost.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

async fn tls_gateway() -> Gateway {
    let up = echo_upstream().await;
    Gateway::start(&config(
        up,
        "tls_listen = \"127.0.0.1:0\"\ntls_cert = \"certs/localhost.pem\"\ntls_key = \"certs/localhost-key.pem\"",
        "",
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_http2_via_alpn() {
    let gw = tls_gateway().await;
    let addr = gw.addrs.tls_listen.unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = connector(&[b"h2", b"http/1.1"])
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("handshake with a client trusting certs/localhost.pem");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let resp = sender
        .send_request(get(&format!("https://localhost:{}/secure", addr.port())))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let echo = json(resp).await;
    assert_eq!(echo["headers"]["x-forwarded-proto"], "https");
    assert_eq!(echo["uri"], "/secure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_http1() {
    let gw = tls_gateway().await;
    let addr = gw.addrs.tls_listen.unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = connector(&[b"http/1.1"])
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("/plain")
        .header("host", "localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        json(resp).await["headers"]["forwarded"],
        "for=127.0.0.1;proto=https"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_client_rejects_the_certificate_name() {
    let gw = tls_gateway().await;
    let tcp = TcpStream::connect(gw.addrs.tls_listen.unwrap())
        .await
        .unwrap();
    let res = connector(&[b"http/1.1"])
        .connect(ServerName::try_from("not-localhost.example").unwrap(), tcp)
        .await;
    assert!(
        res.is_err(),
        "a certificate for localhost must not verify for another name"
    );
}
