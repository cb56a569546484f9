//! `[upstreams.NAME] health`: active health checks. Each URL of the upstream is asked
//! `GET path` every `interval`; one that fails twice in a row leaves the round robin until
//! it answers again (`proxy/upstream/health.rs`).

use std::time::Duration;

use http::uri::PathAndQuery;
use serde::Deserialize;

use super::validate::Validator;

/// `health = { path = "/healthz", interval = "5s", timeout = "1s" }` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    pub path: String,
    #[serde(default = "default_interval")]
    pub interval: String,
    #[serde(default = "default_timeout")]
    pub timeout: String,
}

fn default_interval() -> String {
    "5s".into()
}

fn default_timeout() -> String {
    "1s".into()
}

/// One upstream's active health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Asked on every URL (after the URL's own path).
    pub path: PathAndQuery,
    pub interval: Duration,
    /// A probe not answered within this fails.
    pub timeout: Duration,
}

/// Probes run at most this often (and time out at most this fast).
const SHORTEST: Duration = Duration::from_millis(10);
/// And at least this often.
const LONGEST: Duration = Duration::from_secs(3600);

impl Validator {
    pub(super) fn health(&mut self, name: &str, raw: &RawHealth) -> Option<HealthCheck> {
        let at = |k: &str| format!("upstreams.{name}.health.{k}");
        let path = match PathAndQuery::try_from(raw.path.as_str()) {
            Ok(p) if raw.path.starts_with('/') => Some(p),
            _ => {
                self.fail(
                    &at("path"),
                    format!("`{}` is not a path starting with /", raw.path),
                );
                None
            }
        };
        let mut span = |key: &str, s: &str| {
            let d = self.duration(&at(key), s)?;
            if !(SHORTEST..=LONGEST).contains(&d) {
                self.fail(&at(key), "must be at least 10ms and at most 1h");
                return None;
            }
            Some(d)
        };
        let interval = span("interval", &raw.interval);
        let timeout = span("timeout", &raw.timeout);
        if let (Some(i), Some(t)) = (interval, timeout)
            && t > i
        {
            self.fail(
                &at("timeout"),
                "must be at most the interval (probes would pile up)",
            );
            return None;
        }
        Some(HealthCheck {
            path: path?,
            interval: interval?,
            timeout: timeout?,
        })
    }
}
