//! `tollgate serve` of a file of `[rls]` alone: the binary runs the service without a proxy
//! and SIGHUP re-reads the YAML.

use std::time::{Duration, Instant};

use crate::MESSAGING;
use crate::common::peers::free_ports;
use crate::common::process::spawn_serve;
use crate::common::rls::{RlsClient, codes, request};
use crate::common::temp::TempDir;

#[tokio::test(flavor = "multi_thread")]
async fn serve_runs_the_service_alone_and_sighup_reloads_it() {
    let dir = TempDir::new("rls-serve");
    let yaml = dir.file("ratelimit.yaml", MESSAGING.as_bytes());
    let rls = free_ports(1)[0];
    let toml = format!(
        "[rls]\nlisten = \"{rls}\"\nconfig = \"{}\"\n",
        yaml.display()
    );
    let config = dir.file("tollgate.toml", toml.as_bytes());
    let gw = spawn_serve(&config);
    let mut c = RlsClient::start(rls).await;
    let address = request("messaging", &[&[("remote_address", "10.0.0.1")]]);
    assert_eq!(codes(&c.answer(address.clone()).await), [("OK".into(), 1)]);
    let added = format!(
        "{MESSAGING}  - key: added\n    rate_limit:\n      unit: hour\n      requests_per_unit: 7\n"
    );
    dir.file("ratelimit.yaml", added.as_bytes());
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    // The reload lands on the process's own schedule: poll, bounded.
    let call = request("messaging", &[&[("added", "x")]]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = c.answer(call.clone()).await;
        if r["statuses"][0].get("current_limit").is_some() {
            assert_eq!(r["statuses"][0]["current_limit"]["requests_per_unit"], 7);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the YAML: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The unchanged rule kept its count.
    assert_eq!(codes(&c.answer(address).await), [("OK".into(), 0)]);
}
