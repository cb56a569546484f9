//! `tollgate simulate --matrix`: the design document's lease ×20 and tollgate's lease on a
//! fixed set of traces, side by side, with the goals tollgate's lease is held to on each
//! (issue 13). One trace flatters any lease design; the matrix is there so a change that
//! helps the headline trace cannot quietly lose on the others.
//!
//! Goals per trace, for tollgate's lease against the seed's row:
//! - never above the policy: at most the bound, and never ahead of it at any instant;
//! - short of the bound by at most max(0.5 %, the seed's shortfall) (the small-burst row:
//!   at most its own figure of today, [`SMALL_BURST_SHORTFALL_PCT`]);
//! - at most half the seed's store calls per request; on the default trace at most 0.05,
//!   at normal load at most 0.15.

use std::fmt;

use serde::Serialize;

use super::designs::Design;
use super::report::Row;
use super::{Options, run_on, trace};

/// Shortfall (percent of the bound) tollgate's lease may always have.
const SHORTFALL_PCT: f64 = 0.5;

/// 16 nodes weighted 1000/i, rounded (Zipf with exponent 1).
const ZIPF: [u64; 16] = [
    1000, 500, 333, 250, 200, 167, 143, 125, 111, 100, 91, 83, 77, 71, 67, 63,
];

/// One trace of the matrix.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    /// How to run it alone (`tollgate simulate ARGS`), or how it is built.
    pub args: &'static str,
    pub options: Options,
    /// The node the balancer loses halfway through the trace.
    pub lose: Option<usize>,
    /// A calls-per-request goal of its own, tighter than half the seed's.
    pub max_calls: Option<f64>,
    /// A shortfall goal of its own (percent), instead of max(0.5 %, the seed's).
    pub max_shortfall: Option<f64>,
}

/// The small-burst row's shortfall goal: where tollgate's lease stands today (−5.5 %), not
/// the others' max(0.5 %, seed) (the seed admits everything there, asking 20 cells that
/// conform now nearly every request). It is a floor to hold, not a goal met: a "slack"
/// rule that cut the three-gateway bench's calls by a third took it to −10.5 %.
const SMALL_BURST_SHORTFALL_PCT: f64 = 6.0;

/// The matrix's traces on `base`'s lease knobs.
pub fn cases(base: &Options) -> Vec<Case> {
    let case = |name, args, edit: &dyn Fn(&mut Options)| {
        let mut options = Options {
            lease: base.lease,
            reps: 1,
            ..Options::default()
        };
        edit(&mut options);
        Case {
            name,
            args,
            options,
            lose: None,
            max_calls: None,
            max_shortfall: None,
        }
    };
    vec![
        Case {
            max_calls: Some(0.05),
            ..case("default", "", &|_| {})
        },
        Case {
            max_calls: Some(0.15),
            ..case("normal load", "--normal", &|o| o.load = 0.5)
        },
        case("at the limit", "--load 1", &|o| o.load = 1.0),
        case("32 nodes", "--nodes 32", &|o| o.weights = vec![1; 32]),
        case("hot key", "--nodes 8 --load 5", &|o| {
            o.weights = vec![1; 8];
            o.load = 5.0;
        }),
        Case {
            lose: Some(0),
            ..case("node loss", "node 0 (40 %) lost at 5 s", &|_| {})
        },
        case(
            "16 nodes Zipf",
            "--weights 1000,500,333,250,200,167,143,125,111,100,91,83,77,71,67,63",
            &|o| o.weights = ZIPF.to_vec(),
        ),
        case("limit 200", "--limit 200", &|o| {
            o.limit = std::num::NonZeroU32::new(200).unwrap_or(std::num::NonZeroU32::MIN)
        }),
        Case {
            max_shortfall: Some(SMALL_BURST_SHORTFALL_PCT),
            ..case(
                "small burst",
                "--nodes 3 --limit 200 --burst 10 --lease-ttl 200ms --load 1",
                &|o| {
                    o.weights = vec![1; 3];
                    o.limit = std::num::NonZeroU32::new(200).unwrap_or(std::num::NonZeroU32::MIN);
                    o.burst = std::num::NonZeroU32::new(10).unwrap_or(std::num::NonZeroU32::MIN);
                    o.lease.ttl = std::time::Duration::from_millis(200);
                    o.load = 1.0;
                },
            )
        },
    ]
}

/// One design's figures on one trace.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub admitted: u64,
    pub vs_bound_pct: f64,
    pub calls_per_request: f64,
    pub peak_over_policy: u64,
}

impl From<&Row> for Cell {
    fn from(r: &Row) -> Self {
        Cell {
            admitted: r.admitted,
            vs_bound_pct: r.vs_bound_pct,
            calls_per_request: r.calls_per_request,
            peak_over_policy: r.peak_over_policy,
        }
    }
}

/// One trace: both rows, the ratios, and which goals tollgate's lease meets.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub trace: String,
    pub args: String,
    pub bound: u64,
    pub seed: Cell,
    pub lease: Cell,
    /// Tollgate's calls per request over the seed's.
    pub calls_ratio: f64,
    /// The most calls per request the goals allow on this trace.
    pub max_calls: f64,
    /// The most shortfall (percent, positive) the goals allow on this trace.
    pub max_shortfall_pct: f64,
    /// Never above the policy.
    pub within_bound: bool,
    pub shortfall_ok: bool,
    pub calls_ok: bool,
}

impl Line {
    /// Whether every goal is met on this trace.
    pub fn ok(&self) -> bool {
        self.within_bound && self.shortfall_ok && self.calls_ok
    }
}

/// Every trace of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    pub lines: Vec<Line>,
}

/// Run both lease designs over every trace of [`cases`].
pub fn run(base: &Options) -> Matrix {
    let lines = cases(base).iter().map(line).collect();
    Matrix { lines }
}

fn line(c: &Case) -> Line {
    let o = &c.options;
    let mut tr = trace::trace(o.requests, o.interval(), &o.weights, o.seed);
    if let Some(node) = c.lose {
        let half = tr.last().map_or(0, |a| a.at) / 2;
        trace::lose(&mut tr, node, half, &o.weights, o.seed);
    }
    let report = run_on(o, &tr, &[Design::SeedLease, Design::Lease]);
    let cell = |d| Cell::from(report.row(d).expect("both lease rows were run"));
    let (seed, lease) = (cell(Design::SeedLease), cell(Design::Lease));
    let max_shortfall_pct = c
        .max_shortfall
        .unwrap_or(SHORTFALL_PCT.max(-seed.vs_bound_pct));
    let half = seed.calls_per_request / 2.0;
    let max_calls = c.max_calls.map_or(half, |m| m.min(half));
    Line {
        trace: c.name.into(),
        args: c.args.into(),
        bound: report.bound,
        calls_ratio: lease.calls_per_request / seed.calls_per_request.max(1e-9),
        max_calls,
        max_shortfall_pct,
        within_bound: lease.admitted <= report.bound && lease.peak_over_policy == 0,
        shortfall_ok: -lease.vs_bound_pct <= max_shortfall_pct,
        calls_ok: lease.calls_per_request <= max_calls,
        seed,
        lease,
    }
}

impl fmt::Display for Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<14} {:<17} {:>6} {:>8} {:>9} {:>9} {:>11} {:>11}  goals",
            "trace",
            "design",
            "bound",
            "admitted",
            "vs bound",
            "calls/req",
            "calls ratio",
            "goal calls"
        )?;
        for l in &self.lines {
            let rows = [("lease x20 (seed)", &l.seed), ("tollgate lease", &l.lease)];
            for (i, (name, c)) in rows.into_iter().enumerate() {
                let (trace, bound) = if i == 0 {
                    (l.trace.as_str(), l.bound.to_string())
                } else {
                    ("", String::new())
                };
                write!(
                    f,
                    "{trace:<14} {name:<17} {bound:>6} {:>8} {:>+8.1}% {:>9.3}",
                    c.admitted, c.vs_bound_pct, c.calls_per_request
                )?;
                if i == 0 {
                    writeln!(f)?;
                } else {
                    writeln!(
                        f,
                        " {:>10.2}x {:>11}  {}",
                        l.calls_ratio,
                        format!("<= {:.3}", l.max_calls),
                        verdict(l)
                    )?;
                }
            }
        }
        let met = self.lines.iter().filter(|l| l.ok()).count();
        writeln!(f, "goals met on {met} of {} traces", self.lines.len())?;
        writeln!(f, "traces:")?;
        for c in cases(&Options::default()) {
            match c.lose {
                // No command line loses a node: the trace exists in the matrix only.
                Some(_) => writeln!(f, "  {:<14} matrix only: {}", c.name, c.args)?,
                None => writeln!(f, "  {:<14} tollgate simulate {}", c.name, c.args)?,
            }
        }
        Ok(())
    }
}

/// `ok`, or the goals missed.
fn verdict(l: &Line) -> String {
    if l.ok() {
        return "ok".into();
    }
    let mut missed = Vec::new();
    if !l.within_bound {
        missed.push("ABOVE THE POLICY".to_string());
    }
    if !l.shortfall_ok {
        missed.push(format!("short > {:.1}%", l.max_shortfall_pct));
    }
    if !l.calls_ok {
        missed.push("calls".into());
    }
    format!("missed: {}", missed.join(", "))
}
