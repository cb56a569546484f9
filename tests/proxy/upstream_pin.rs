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
use http::StatusCode;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

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
    crate::common::tls_backend::serve(config, "pinned ok").await
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

/// `cert`'s pin as the pipeline computes it (curl's `--pinnedpubkey` value).
fn openssl_pin(cert: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -pubkey -noout -in '{}' | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
            cert.display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn pin(pin: &str) -> String {
    format!("pin_sha256 = [\"{pin}\"]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_self_signed_certificate_for_the_same_name_is_a_502() {
    let dir = TempDir::new("pin-other");
    let (cert, _) = quick_cert(&dir, "app", "localhost", "DNS:localhost,IP:127.0.0.1");
    let (impostor, key) = quick_cert(&dir, "impostor", "localhost", "DNS:localhost,IP:127.0.0.1");
    let up = backend(&impostor, &key).await;
    assert_eq!(
        status_via("localhost", up, &ca_file(&cert)).await,
        StatusCode::BAD_GATEWAY,
        "same names, not byte-equal"
    );
    assert_eq!(
        status_via("localhost", up, &ca_file(&impostor)).await,
        StatusCode::OK,
        "the backend itself answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pinned_certificate_is_refused_for_a_host_it_does_not_name() {
    let dir = TempDir::new("pin-name");
    let (cert, key) = quick_cert(&dir, "app", "example.test", "DNS:example.test");
    let up = backend(&cert, &key).await;
    assert_eq!(
        status_via("127.0.0.1", up, &ca_file(&cert)).await,
        StatusCode::BAD_GATEWAY
    );
    // Nor by its key alone: a pin does not stand for the name.
    assert_eq!(
        status_via("127.0.0.1", up, &pin(&openssl_pin(&cert))).await,
        StatusCode::BAD_GATEWAY
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_sha256_alone_vouches_for_a_self_signed_leaf() {
    let dir = TempDir::new("pin-alone");
    let (cert, key) = quick_cert(&dir, "app", "localhost", "DNS:localhost,IP:127.0.0.1");
    let (other, _) = quick_cert(&dir, "other", "localhost", "DNS:localhost");
    let up = backend(&cert, &key).await;
    let right = pin(&openssl_pin(&cert));
    assert_eq!(status_via("localhost", up, &right).await, StatusCode::OK);
    assert_eq!(status_via("127.0.0.1", up, &right).await, StatusCode::OK);
    let wrong = pin(&openssl_pin(&other));
    assert_eq!(
        status_via("localhost", up, &wrong).await,
        StatusCode::BAD_GATEWAY
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_ca_file_the_pin_must_match_as_well() {
    let dir = TempDir::new("pin-both");
    let (cert, key) = quick_cert(&dir, "app", "localhost", "DNS:localhost,IP:127.0.0.1");
    let (other, _) = quick_cert(&dir, "other", "localhost", "DNS:localhost");
    let up = backend(&cert, &key).await;
    let both = |p: &Path| format!("{}\n{}", ca_file(&cert), pin(&openssl_pin(p)));
    assert_eq!(
        status_via("localhost", up, &both(&cert)).await,
        StatusCode::OK
    );
    assert_eq!(
        status_via("localhost", up, &both(&other)).await,
        StatusCode::BAD_GATEWAY,
        "ca_file right, pin wrong"
    );
    // The shipped development certificate verifies through the chain; a pin still applies.
    let shipped = backend(
        &repo_path("certs/localhost.pem"),
        &repo_path("certs/localhost-key.pem"),
    )
    .await;
    let dev = repo_path("certs/localhost.pem");
    let dev_tls = |p: &Path| format!("{}\n{}", ca_file(&dev), pin(&openssl_pin(p)));
    assert_eq!(
        status_via("localhost", shipped, &dev_tls(&dev)).await,
        StatusCode::OK
    );
    assert_eq!(
        status_via("localhost", shipped, &dev_tls(&cert)).await,
        StatusCode::BAD_GATEWAY
    );
}

#[test]
fn check_says_what_a_self_signed_ca_in_ca_file_is_accepted_as() {
    let dir = TempDir::new("pin-check");
    let (cert, _) = quick_cert(&dir, "app", "localhost", "DNS:localhost,IP:127.0.0.1");
    let run = |ca: &Path| {
        let file = dir.file(
            "check.toml",
            format!(
                "[server]\nlisten = \"127.0.0.1:8080\"\n[upstreams.app]\n\
                 urls = [\"https://localhost:8443\"]\n{}\n",
                ca_file(ca)
            )
            .as_bytes(),
        );
        let out = crate::common::process::tollgate()
            .args(["check", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        (file, String::from_utf8(out.stderr).unwrap())
    };
    let (file, stderr) = run(&cert);
    assert_eq!(
        stderr.trim(),
        format!(
            "{}: warning: upstreams.app.ca_file: `{}` holds a self-signed CA certificate \
             (CA:TRUE) for localhost, 127.0.0.1: accepted as the upstream's own certificate \
             only when presented byte for byte (pinned), and still a CA for any certificate \
             it signs; `-addext basicConstraints=critical,CA:FALSE` makes it a plain leaf",
            file.display(),
            cert.display()
        )
    );
    // The shipped certificate is no CA: nothing to say.
    let (_, stderr) = run(&repo_path("certs/localhost.pem"));
    assert_eq!(stderr.trim(), "");
}

/// `serve` says at start-up, in its log, what `check` warns about.
#[test]
fn serve_logs_the_warning_at_start_up() {
    let dir = TempDir::new("pin-serve");
    let (cert, _) = quick_cert(&dir, "app", "localhost", "DNS:localhost,IP:127.0.0.1");
    let file = dir.file(
        "serve.toml",
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.app]\n\
             urls = [\"https://localhost:8443\"]\n{}\n[[routes]]\nname = \"all\"\nupstream = \"app\"\n",
            ca_file(&cert)
        )
        .as_bytes(),
    );
    let gw = crate::common::process::spawn_serve(&file);
    let warning = gw
        .early_log
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["level"] == "WARN" && v["key"] == "upstreams.app.ca_file")
        .unwrap_or_else(|| panic!("no start-up warning in {:#?}", gw.early_log));
    let message = warning["message"].as_str().unwrap();
    assert!(
        message.contains("holds a self-signed CA certificate (CA:TRUE) for localhost, 127.0.0.1"),
        "{message}"
    );
}
