//! `tollgate simulate`: the decision sites side by side on one virtual-clock trace, so a
//! user can choose a site with numbers. Not on the request path: it drives the limit
//! step's own code (see `designs.rs`) with an in-process coordinator that counts calls.
//!
//! The default run is the design document's experiment (8 nodes, 20 000 requests at
//! 2 000/s against 1 000/s with burst 96, weights 40/20/10/10/5/5/5/5) and reproduces its
//! published figures for central, static L/N and lease ×20. Beside them: route by key
//! (`owner`) and gossip counters at several push intervals (`designs_peer.rs`).
//! `--matrix` (`matrix.rs`) runs the two lease designs over a set of traces against the
//! goals tollgate's lease must meet on each.

mod designs;
mod designs_peer;
pub mod matrix;
#[cfg(feature = "plot")]
mod plot;
mod report;
pub mod trace;

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::{Duration, Instant};

pub use designs::{Design, Run};
pub use report::{Report, Row};
pub use trace::Arrival;

use crate::config::{AlgorithmName, LeaseKnobs, Policy, Site};
use crate::limit::clock::{Nanos, duration_to_nanos};

/// Width of the bins of the "worst 100 ms" column and of the plot.
pub const BIN: Nanos = 100_000_000;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Options {
    /// Balancer weight of each node (the node count is their number).
    pub weights: Vec<u64>,
    /// Requests offered.
    pub requests: usize,
    /// Offered requests per second, as a multiple of the limit.
    pub load: f64,
    /// Policy limit per second.
    pub limit: NonZeroU32,
    /// Policy burst.
    pub burst: NonZeroU32,
    /// Trace seed.
    pub seed: u64,
    /// Lease knobs of tollgate's lease.
    pub lease: LeaseKnobs,
    /// Runs per design for the decisions-per-second column.
    pub reps: usize,
    /// Gossip: one row per push interval.
    pub gossip_intervals: Vec<Duration>,
    /// Gossip: how long a push takes to reach a peer.
    pub peer_delay: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            weights: trace::SEED_WEIGHTS.to_vec(),
            requests: 20_000,
            load: 2.0,
            limit: NonZeroU32::new(1_000).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(96).unwrap_or(NonZeroU32::MIN),
            seed: trace::SEED,
            lease: LeaseKnobs::default(),
            reps: 20,
            gossip_intervals: [5, 20, 100].map(Duration::from_millis).to_vec(),
            peer_delay: Duration::from_millis(1),
        }
    }
}

impl Options {
    /// The policy every design enforces: GCRA, `limit` per second, `burst`.
    pub fn policy(&self) -> Policy {
        Policy {
            name: "simulated".into(),
            key: Vec::new(),
            algorithm: AlgorithmName::Gcra,
            limit: self.limit,
            period: Duration::from_secs(1),
            burst: self.burst,
            cost: NonZeroU32::MIN,
            max_delay: Duration::ZERO,
            mode: None,
            max_keys: NonZeroUsize::MIN,
            site: Site::Lease,
            local_first: false,
            spend: Default::default(),
            on_missing_key: None,
            show_values: Vec::new(),
            lease: self.lease,
        }
    }

    /// Nanoseconds between offered requests.
    pub fn interval(&self) -> Nanos {
        let per_second = f64::from(self.limit.get()) * self.load;
        (1e9 / per_second).round().max(1.0) as Nanos
    }
}

/// Run every design over the options' trace.
pub fn run(o: &Options) -> Report {
    let tr = trace::trace(o.requests, o.interval(), &o.weights, o.seed);
    let intervals: Vec<Nanos> = o
        .gossip_intervals
        .iter()
        .map(|&d| duration_to_nanos(d))
        .collect();
    run_on(
        o,
        &tr,
        &Design::all(&intervals, duration_to_nanos(o.peer_delay)),
    )
}

/// Run `designs` over `tr`, a trace of the options' rate and nodes (the matrix runs the two
/// lease designs alone, some on a trace that loses a node).
pub fn run_on(o: &Options, tr: &[Arrival], designs: &[Design]) -> Report {
    let end = tr.last().map_or(0, |a| a.at);
    let policy = o.policy();
    // What the policy admits from 0 to `t`: the bound at `t`.
    let cap = |t: Nanos| {
        u64::from(o.burst.get())
            + (u128::from(t) * u128::from(o.limit.get()) / 1_000_000_000) as u64
    };
    // The most any GCRA of this quota can admit by `end` (or everything, under it).
    let bound = cap(end).min(tr.len() as u64);
    let rows = designs
        .iter()
        .map(|&d| {
            let started = Instant::now();
            let mut run = d.run(&policy, o.weights.len(), tr);
            for _ in 1..o.reps.max(1) {
                run = d.run(&policy, o.weights.len(), tr);
            }
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            Row::new(
                d,
                &run,
                tr,
                bound,
                cap,
                o.reps.max(1) as f64 * tr.len() as f64 / secs,
            )
        })
        .collect();
    Report {
        nodes: o.weights.len(),
        weights: o.weights.clone(),
        offered: tr.len(),
        offered_per_second: f64::from(o.limit.get()) * o.load,
        limit_per_second: o.limit.get(),
        burst: o.burst.get(),
        seed: o.seed,
        bound,
        peer_delay_ns: duration_to_nanos(o.peer_delay),
        rows,
    }
}

#[cfg(feature = "plot")]
pub use plot::svg;
