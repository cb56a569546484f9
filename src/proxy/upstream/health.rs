//! Active health checks (`[upstreams.NAME] health`), beside the request path: every
//! `interval`, each URL of a checked upstream is asked `GET` its health path; a URL that
//! fails [`FAILS`] probes in a row (no answer within `timeout`, a refused connection, a
//! certificate that does not verify, a 4xx or 5xx) is marked down in the shared marks every
//! worker's pool reads (`pool.rs`), and up again at its first good answer.
//! `tollgate_upstream_healthy{upstream,url}` shows the marks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{Either, Empty};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use super::forward::{UpstreamClient, upstream_client};
use super::metrics::UrlLabels;
use super::pool::UpstreamSlots;
use crate::config::{Config, HealthCheck, Upstream};

/// Failed probes in a row that take a URL out of the round robin.
pub const FAILS: u32 = 2;

/// `tollgate_upstream_healthy`, registered once (reloads keep the series).
#[derive(Clone)]
pub struct HealthMetrics {
    healthy: Family<UrlLabels, Gauge>,
}

impl HealthMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let healthy = Family::<UrlLabels, Gauge>::default();
        registry.register(
            "tollgate_upstream_healthy",
            "1 while an upstream URL passes its active health check, 0 while it is out of the round robin",
            healthy.clone(),
        );
        HealthMetrics { healthy }
    }
}

/// Start probing every checked upstream of `config`; abort the handles to stop.
pub fn spawn_checks(
    config: &Config,
    slots: &UpstreamSlots,
    metrics: &HealthMetrics,
) -> Vec<JoinHandle<()>> {
    config
        .upstreams
        .iter()
        .enumerate()
        .filter_map(|(i, u)| {
            let check = u.health.clone()?;
            let probe = Probe {
                client: upstream_client(u, check.timeout),
                targets: u
                    .urls
                    .iter()
                    .map(|url| target(u, url, &check, metrics))
                    .collect(),
                marks: slots.health_of(i),
                check,
            };
            Some(tokio::spawn(probe.run()))
        })
        .collect()
}

/// One checked URL: where to ask, its gauge, and its failures in a row.
struct Target {
    uri: http::Uri,
    gauge: Gauge,
    fails: u32,
}

fn target(u: &Upstream, url: &http::Uri, check: &HealthCheck, m: &HealthMetrics) -> Target {
    let scheme = url.scheme_str().unwrap_or("http");
    let base = url.path().trim_end_matches('/');
    // Never the user-info of a URL in a label or a probe's log: host and port only.
    let labels = UrlLabels {
        upstream: u.name.clone(),
        url: super::metrics::url_label(url),
    };
    let gauge = m.healthy.get_or_create(&labels).clone();
    gauge.set(1);
    let uri = format!(
        "{scheme}://{}{base}{}",
        url.authority().map_or("", |a| a.as_str()),
        check.path
    )
    .parse()
    .unwrap_or_else(|_| url.clone());
    Target {
        uri,
        gauge,
        fails: 0,
    }
}

struct Probe {
    client: UpstreamClient,
    targets: Vec<Target>,
    marks: Arc<[AtomicBool]>,
    check: HealthCheck,
}

impl Probe {
    async fn run(mut self) {
        let mut tick = tokio::time::interval(self.check.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for i in 0..self.targets.len() {
                let ok = probe(&self.client, &self.targets[i].uri, self.check.timeout).await;
                let t = &mut self.targets[i];
                t.fails = if ok { 0 } else { t.fails.saturating_add(1) };
                let up = t.fails < FAILS;
                if self.marks[i].swap(up, Ordering::Relaxed) != up {
                    tracing::warn!(uri = %t.uri, healthy = up, "upstream health check changed");
                }
                t.gauge.set(i64::from(up));
            }
        }
    }
}

/// One probe: an answer below 400 within `timeout`.
async fn probe(client: &UpstreamClient, uri: &http::Uri, timeout: Duration) -> bool {
    let Ok(req) = Request::get(uri.clone()).body(Either::Right(Empty::<Bytes>::new())) else {
        return false;
    };
    match tokio::time::timeout(timeout, client.request(req)).await {
        Ok(Ok(resp)) => resp.status().as_u16() < 400,
        _ => false,
    }
}
