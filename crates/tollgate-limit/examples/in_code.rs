//! A limiter built in code, no config file: 3 requests a minute per client address, asked
//! for four requests of one client and one of another. `cargo run -p tollgate-limit
//! --example in_code` (`tests/examples.rs` runs it and reads what it prints).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method};
use tollgate_limit::spec::{AlgorithmName, KeyPart, LimiterSpec, Policy};
use tollgate_limit::{Answer, LimiterHandle, clock::SystemClock};

/// Build the limiter, decide five requests, print each decision to `out`.
pub async fn run(out: &mut impl Write) -> Result<(), Box<dyn std::error::Error>> {
    let (key, minute) = (vec![KeyPart::Ip], Duration::from_secs(60));
    let per_ip = Policy::new("per_ip", key, AlgorithmName::TokenBucket, 3, minute)?;
    let spec = LimiterSpec::in_memory(vec![per_ip]).route("api", &["per_ip"])?;
    let registry = &mut prometheus_client::registry::Registry::default();
    let limiter = LimiterHandle::new(spec, Arc::new(SystemClock::new()), registry)?;
    let route: Arc<str> = "api".into();
    for client in [
        "192.0.2.1",
        "192.0.2.1",
        "192.0.2.1",
        "192.0.2.1",
        "198.51.100.7",
    ] {
        let (ip, get, headers) = (client.parse()?, Method::GET, HeaderMap::new());
        let admission = limiter
            .load()
            .check_request(0, &route, ip, &get, None, &headers)
            .await;
        match admission.answer {
            Answer::Admit(ok) => {
                writeln!(out, "{client}: admitted, {} left", ok.report[0].remaining)?
            }
            Answer::Deny { report } => writeln!(out, "{client}: denied by {}", report[0].name)?,
            other => writeln!(out, "{client}: {:?}", other.outcome())?,
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(&mut std::io::stdout()).await
}
