//! Envoy's rate limit service (`[rls]`) over real sockets, driven by grpcio with the protos
//! Envoy publishes (`tests/common/rls_client.py`): README-like answers, all or nothing,
//! shadow and unlimited rules, bad input, health, two servers on one Redis, and reload.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod answers;
mod bad_input;
mod central;
mod json;
mod log;
mod reload;
mod serve;
mod store_errors;
mod tls;

use std::sync::Arc;

use tollgate::limit::clock::ManualClock;

use common::rls::RlsServed;

/// The YAML most tests answer from, modelled on envoyproxy/ratelimit's README examples.
pub const MESSAGING: &str = r#"
domain: messaging
descriptors:
  # README example: 5 marketing messages a day to one number, 100 of any kind.
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
  - key: unlimited_key
    rate_limit:
      unlimited: true
  - key: shadow
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: blocked
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: remote_address
    rate_limit:
      name: per_address
      unit: minute
      requests_per_unit: 2
"#;

/// `[rls]` alone (plus an admin listener), `extra` appended to the section.
pub fn toml(extra: &str) -> String {
    format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n\n[rls]\nlisten = \"127.0.0.1:0\"\nconfig = \"RLS_YAML\"\n{extra}\n"
    )
}

/// A service on a manual clock (no window rolls over during a test).
pub async fn served(extra: &str, yaml: &str) -> RlsServed {
    let clock = ManualClock::new();
    clock.set(1_000_000_000);
    RlsServed::start(&toml(extra), yaml, Arc::new(clock)).await
}
