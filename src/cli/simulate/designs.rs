//! The designs the simulator compares, each driving production code on the virtual
//! clock where tollgate has it: the policy's own GCRA (`PolicyRuntime`) for central, for the
//! L/N split and for the owner of route-by-key, the lease site's node book
//! (`limit::lease::book`) and grant rule (`MemoryCoordinator`) for tollgate's lease. The
//! design document's lease ×20 is a model written here (the baseline being beaten), and so
//! is gossip's exchange of counts (`designs_peer.rs`).

use std::num::NonZeroU32;

use super::designs_peer;
use super::trace::Arrival;
use crate::config::{LeaseKnobs, Policy};
use crate::limit::algorithm::Verdict;
use crate::limit::clock::Nanos;
use crate::limit::lease::{LeaseBook, LeaseParams, MemoryCoordinator, RefillAsk, Take};
use crate::limit::policy::{AnyState, PolicyRuntime};

/// A design's run over one trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Admitted per arrival, in trace order.
    pub admitted: Vec<bool>,
    /// Coordinator (store) calls.
    pub calls: u64,
    /// Peer messages: an owner ask (one call, its answer included) or one gossip push to
    /// one peer.
    pub peer: u64,
}

/// The designs, in the order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    Central,
    Split,
    SeedLease,
    Lease,
    /// Route by key: the key's owner decides, non-owners ask it.
    Owner,
    /// Gossip counters: pushes every `interval` ns, each arriving `delay` ns after it is sent.
    Gossip {
        interval: Nanos,
        delay: Nanos,
    },
}

impl Design {
    /// The designs without a parameter, in the order of the table.
    pub const FIXED: [Design; 5] = [
        Design::Central,
        Design::Split,
        Design::SeedLease,
        Design::Lease,
        Design::Owner,
    ];

    /// Every row of the table: the fixed designs, then gossip at each interval.
    pub fn all(gossip_intervals: &[Nanos], delay: Nanos) -> Vec<Design> {
        let gossip = gossip_intervals
            .iter()
            .map(|&interval| Design::Gossip { interval, delay });
        Design::FIXED.into_iter().chain(gossip).collect()
    }

    pub fn name(self) -> String {
        match self {
            Design::Central => "central".into(),
            Design::Split => "static L/N".into(),
            Design::SeedLease => "lease x20 (seed)".into(),
            Design::Lease => "tollgate lease".into(),
            Design::Owner => "owner".into(),
            Design::Gossip { interval, .. } => format!(
                "gossip {}",
                humantime::format_duration(std::time::Duration::from_nanos(interval))
            ),
        }
    }

    /// Run this design over `trace` for `nodes` nodes.
    pub fn run(self, policy: &Policy, nodes: usize, trace: &[Arrival]) -> Run {
        match self {
            Design::Central => central(policy, trace),
            Design::Split => split(policy, nodes, trace),
            Design::SeedLease => seed_lease(policy, nodes, trace),
            Design::Lease => lease(policy, nodes, trace),
            Design::Owner => designs_peer::owner(policy, nodes, trace),
            Design::Gossip { interval, delay } => {
                designs_peer::gossip(policy, nodes, trace, interval, delay)
            }
        }
    }
}

/// Every request asks the one shared state: one call each.
fn central(policy: &Policy, trace: &[Arrival]) -> Run {
    Run {
        admitted: exact(policy, trace),
        calls: trace.len() as u64,
        peer: 0,
    }
}

/// The policy's own GCRA deciding every arrival of `trace` against one state: what the
/// store does for central, and what the key's owner does for route by key.
pub(super) fn exact(policy: &Policy, trace: &[Arrival]) -> Vec<bool> {
    let rt = runtime(policy, 1);
    let alg = rt.base();
    let mut state: Option<AnyState> = None;
    trace
        .iter()
        .map(|a| {
            let d = alg.decide(state, 1, a.at);
            let ok = d.verdict == Verdict::Allow;
            if ok {
                state = Some(d.state);
            }
            ok
        })
        .collect()
}

/// Each node alone at limit/N, burst/N: the gateway's `site = "split"` algorithm.
fn split(policy: &Policy, nodes: usize, trace: &[Arrival]) -> Run {
    let rt = runtime(policy, nodes);
    let alg = rt.split_algorithm(NonZeroU32::MIN);
    let mut states: Vec<Option<AnyState>> = vec![None; nodes];
    let admitted = trace
        .iter()
        .map(|a| {
            let d = alg.decide(states[a.node], 1, a.at);
            let ok = d.verdict == Verdict::Allow;
            if ok {
                states[a.node] = Some(d.state);
            }
            ok
        })
        .collect();
    Run {
        admitted,
        calls: 0,
        peer: 0,
    }
}

/// The design document's lease: 20 cells that conform *now*, valid 50 ms; an empty
/// coordinator is asked again after 5 ms. Its coordinator is the grant rule with no
/// horizon, which is exactly the document's `Gcra::grant`.
fn seed_lease(policy: &Policy, nodes: usize, trace: &[Arrival]) -> Run {
    const MS: Nanos = 1_000_000;
    let p = params(policy, LeaseKnobs::default());
    let twenty = RefillAsk {
        want: 20,
        ..RefillAsk::default()
    };
    let c = MemoryCoordinator::new();
    #[derive(Default, Clone, Copy)]
    struct Seed {
        tokens: u32,
        exp: Nanos,
        blocked_until: Nanos,
    }
    let mut leases = vec![Seed::default(); nodes];
    let admitted = trace
        .iter()
        .map(|a| {
            let (l, now) = (&mut leases[a.node], a.at);
            if now >= l.exp {
                l.tokens = 0;
            }
            if l.tokens == 0 && now >= l.blocked_until {
                let g = c.grant("k", &p, twenty, now).granted;
                if g > 0 {
                    l.tokens = g;
                    l.exp = now + 50 * MS;
                } else {
                    l.blocked_until = now + 5 * MS;
                }
            }
            let ok = l.tokens > 0;
            l.tokens -= u32::from(ok);
            ok
        })
        .collect();
    Run {
        admitted,
        calls: c.calls(),
        peer: 0,
    }
}

/// Tollgate's lease site, in the order the gateway runs it: take; when nothing conforms
/// and the book wants cells, ask inline and take again; when it is at its low-water mark,
/// ask "in the background" (here: at once, the coordinator being in-process).
fn lease(policy: &Policy, nodes: usize, trace: &[Arrival]) -> Run {
    let p = params(policy, policy.lease);
    let c = MemoryCoordinator::new();
    let mut books = vec![LeaseBook::default(); nodes];
    let admitted = trace
        .iter()
        .map(|a| {
            let (book, now) = (&mut books[a.node], a.at);
            let mut taken = book.take(&p, 1, now);
            if let Some(ask) = book.wants(&p, now) {
                book.begin(now, ask);
                let g = c.grant("k", &p, ask, now);
                book.on_grant(&p, ask, g, now);
                if matches!(taken, Take::Denied { .. }) {
                    taken = book.retake(&p, 1, now);
                }
            }
            matches!(taken, Take::Admitted { .. })
        })
        .collect();
    Run {
        admitted,
        calls: c.calls(),
        peer: 0,
    }
}

fn runtime(policy: &Policy, nodes: usize) -> PolicyRuntime {
    let n = NonZeroU32::new(u32::try_from(nodes).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN);
    PolicyRuntime::with_nodes(0, policy, &[], n).expect("the simulator's policy is valid")
}

/// The lease numbers of `policy` with `knobs`.
pub fn params(policy: &Policy, knobs: LeaseKnobs) -> LeaseParams {
    LeaseParams::new(
        policy.limit,
        policy.period,
        policy.burst,
        knobs.ttl,
        knobs.target,
        knobs.max,
    )
    .expect("the simulator's policy is valid")
}
