//! `[rls] tls_cert` / `tls_key`: the service speaks TLS on `listen` (h2 by ALPN), and a
//! cleartext client gets nothing.

use crate::common::repo_path;
use crate::common::rls::{RlsClient, codes, request};
use crate::{MESSAGING, served};

#[tokio::test(flavor = "multi_thread")]
async fn the_service_answers_over_tls_only() {
    let (cert, key) = (
        repo_path("certs/localhost.pem"),
        repo_path("certs/localhost-key.pem"),
    );
    let extra = format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"",
        cert.display(),
        key.display()
    );
    let s = served(&extra, MESSAGING).await;
    let mut c = RlsClient::start_tls(s.rls, &cert).await;
    let call = request("messaging", &[&[("remote_address", "10.0.0.1")]]);
    assert_eq!(codes(&c.answer(call.clone()).await), [("OK".into(), 1)]);
    assert_eq!(c.health("").await, "SERVING");
    let mut plain = s.client().await;
    let got = plain.should_rate_limit(call).await;
    assert_eq!(got["error"]["code"], "UNAVAILABLE", "{got}");
}
