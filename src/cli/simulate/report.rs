//! The simulator's results: one row per design, as a table or as JSON.

use std::fmt;

use serde::Serialize;

use super::BIN;
use super::designs::{Design, Run};
use super::trace::Arrival;
use crate::limit::clock::Nanos;

/// One design's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub design: String,
    pub admitted: u64,
    /// Percent against the bound (negative: under-admitted).
    pub vs_bound_pct: f64,
    /// Most requests admitted in one aligned 100 ms bin.
    pub worst_100ms: u64,
    /// The most admitted, at any instant `t` of the trace, above what the policy admits
    /// from 0 to `t` (`burst + ⌊t·limit/s⌋`); 0 for a design that never gets ahead of it.
    pub peak_over_policy: u64,
    /// Coordinator (store) calls per offered request.
    pub calls_per_request: f64,
    /// Peer messages per offered request: owner asks (one per request off the owner, the
    /// answer included) or gossip pushes (one per peer per push).
    pub peer_msgs_per_request: f64,
    /// Gossip rows: the push interval (ns); `null` for the other designs.
    pub gossip_interval_ns: Option<u64>,
    /// Millions of decisions per second of this machine (wall clock, informative only).
    pub mdecisions_per_second: f64,
    /// Admitted per 100 ms bin, for the plot.
    pub bins: Vec<u64>,
}

impl Row {
    /// `cap(t)`: the most the policy admits from 0 to `t` (`burst + ⌊t·rate⌋`).
    pub(super) fn new(
        d: Design,
        run: &Run,
        tr: &[Arrival],
        bound: u64,
        cap: impl Fn(Nanos) -> u64,
        per_second: f64,
    ) -> Row {
        let last = tr.last().map_or(0, |a| a.at);
        let mut bins = vec![0u64; (last / BIN) as usize + 1];
        let (mut so_far, mut peak_over) = (0u64, 0u64);
        for (a, _) in tr.iter().zip(&run.admitted).filter(|(_, ok)| **ok) {
            bins[(a.at / BIN) as usize] += 1;
            so_far += 1;
            peak_over = peak_over.max(so_far.saturating_sub(cap(a.at)));
        }
        let admitted: u64 = bins.iter().sum();
        Row {
            design: d.name(),
            admitted,
            vs_bound_pct: (admitted as f64 / bound.max(1) as f64 - 1.0) * 100.0,
            worst_100ms: bins.iter().copied().max().unwrap_or(0),
            peak_over_policy: peak_over,
            calls_per_request: run.calls as f64 / tr.len().max(1) as f64,
            peer_msgs_per_request: run.peer as f64 / tr.len().max(1) as f64,
            gossip_interval_ns: match d {
                Design::Gossip { interval, .. } => Some(interval),
                _ => None,
            },
            mdecisions_per_second: per_second / 1e6,
            bins,
        }
    }
}

/// Every design over one trace.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub nodes: usize,
    pub weights: Vec<u64>,
    pub offered: usize,
    pub offered_per_second: f64,
    pub limit_per_second: u32,
    pub burst: u32,
    pub seed: u64,
    /// The most any GCRA of the policy can admit over the trace.
    pub bound: u64,
    /// Gossip: how long a push takes to reach a peer (ns).
    pub peer_delay_ns: u64,
    pub rows: Vec<Row>,
}

impl Report {
    /// The row of a design.
    pub fn row(&self, d: Design) -> Option<&Row> {
        self.rows.iter().find(|r| r.design == d.name())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} nodes (weights {:?}), {} requests at {:.0}/s against {}/s burst {}, seed {:#x}",
            self.nodes,
            self.weights,
            self.offered,
            self.offered_per_second,
            self.limit_per_second,
            self.burst,
            self.seed
        )?;
        writeln!(f, "limit bound {} of {} offered", self.bound, self.offered)?;
        writeln!(
            f,
            "{:<18} {:>8} {:>9} {:>10} {:>10} {:>14} {:>13}",
            "design",
            "admitted",
            "vs bound",
            "worst100ms",
            "calls/req",
            "peer msgs/req",
            "M decisions/s"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<18} {:>8} {:>+8.1}% {:>10} {:>10.3} {:>14.3} {:>13.1}",
                r.design,
                r.admitted,
                r.vs_bound_pct,
                r.worst_100ms,
                r.calls_per_request,
                r.peer_msgs_per_request,
                r.mdecisions_per_second
            )?;
        }
        Ok(())
    }
}
