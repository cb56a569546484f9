//! The demo's output: one table row per client.

use std::collections::BTreeMap;
use std::time::Duration;

/// What one demo client saw.
pub struct ClientReport {
    pub name: &'static str,
    pub ip: &'static str,
    /// What the row demonstrates.
    pub note: &'static str,
    /// Largest `Retry-After` seen, in seconds.
    pub max_retry_after: Option<u64>,
    /// Count per status code (0 = connection error).
    pub statuses: BTreeMap<u16, usize>,
    /// Every request's latency, for percentiles.
    pub latencies: Vec<Duration>,
}

impl ClientReport {
    pub fn new(name: &'static str, ip: &'static str, note: &'static str) -> Self {
        ClientReport {
            name,
            ip,
            note,
            max_retry_after: None,
            statuses: BTreeMap::new(),
            latencies: Vec::new(),
        }
    }

    pub fn record(&mut self, status: u16, retry_after: Option<u64>, took: Duration) {
        self.max_retry_after = self.max_retry_after.max(retry_after);
        *self.statuses.entry(status).or_default() += 1;
        self.latencies.push(took);
    }

    fn percentile(&self, p: f64) -> Duration {
        let mut v = self.latencies.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[idx]
    }
}

pub fn print_table(reports: &[ClientReport]) {
    println!(
        "{:<15} {:<17} {:>4}  {:<16} {:>6} {:>7} {:>7}  what it shows",
        "client", "address", "sent", "statuses", "retry", "p50 ms", "p99 ms"
    );
    for r in reports {
        let statuses = r
            .statuses
            .iter()
            .map(|(s, n)| {
                if *s == 0 {
                    format!("error×{n}")
                } else {
                    format!("{s}×{n}")
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
        let retry = r
            .max_retry_after
            .map_or("-".to_string(), |s| format!("{s}s"));
        println!(
            "{:<15} {:<17} {:>4}  {:<16} {:>6} {:>7.2} {:>7.2}  {}",
            r.name,
            r.ip,
            r.latencies.len(),
            statuses,
            retry,
            r.percentile(0.5).as_secs_f64() * 1e3,
            r.percentile(0.99).as_secs_f64() * 1e3,
            r.note
        );
    }
}
