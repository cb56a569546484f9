//! The three-gateway bench's shape (`benches/lease_fleet.sh` with `ARRIVALS=poisson`: nodes
//! at 30, 20 and 10 requests a second, limit 100, burst 20, `lease_max` 20, `lease_ttl`
//! 500 ms: 60 % of the limit) in the simulator, with tollgate's lease on Poisson arrivals.
//! At 60 % of the limit nothing should be denied. Before the calm hysteresis, the calm
//! empty answer and the calm cap (`lease/size.rs`), the thin node fell out of calm, asked
//! only for cells that conform now, found them reserved by the others and was sent away a
//! second or more: 123 to 264 denials per 10-minute run here, up to 43 in a row.

use std::num::NonZeroU32;
use std::time::Duration;

use tollgate::cli::simulate::{Arrival, Design, Options, trace};
use tollgate::config::LeaseKnobs;

const RATES: [f64; 3] = [30.0, 20.0, 10.0];
const SECS: f64 = 600.0;
/// The bench's warm-up (its `WARMUP`): the first seconds, while the nodes learn their demand
/// and the key its grant rate, are measured on their own (`benches/lease_fleet.sh` with
/// `WARMUP=0`).
const WARM_UP: u64 = 5_000_000_000;

fn options() -> Options {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    Options {
        weights: vec![3, 2, 1],
        limit: nz(100),
        burst: nz(20),
        lease: LeaseKnobs {
            max: nz(20),
            ttl: Duration::from_millis(500),
            target: Duration::from_millis(20),
        },
        reps: 1,
        ..Options::default()
    }
}

/// Denials after the warm-up, the longest run of them on one node, and calls per request.
fn run(seed: u64) -> (usize, usize, f64) {
    let tr: Vec<Arrival> = trace::poisson(&RATES, SECS, seed);
    let r = Design::Lease.run(&options().policy(), RATES.len(), &tr);
    let (mut denied, mut longest, mut runs) = (0, 0, [0usize; 3]);
    for (a, ok) in tr.iter().zip(&r.admitted) {
        let counted = !ok && a.at >= WARM_UP;
        runs[a.node] = if counted { runs[a.node] + 1 } else { 0 };
        denied += usize::from(counted);
        longest = longest.max(runs[a.node]);
    }
    (denied, longest, r.calls as f64 / tr.len() as f64)
}

/// Three seeds (each 36 000 requests): after the warm-up at most 0.1 % denied and never
/// more than 8 in a row on a node (today 5 to 14, at most 3 in a row; before, 132 to 174
/// and 15 to 22 in a row), within the bench's budget of 0.15 lease calls per request
/// (0.2 with the membership heartbeats: today 0.132).
#[test]
fn a_poisson_fleet_at_60_percent_is_not_denied() {
    for i in [1u64, 2, 4] {
        let seed = i.wrapping_mul(trace::SEED);
        let (denied, longest, calls) = run(seed);
        assert!(denied <= 36, "seed {i}: {denied} denied");
        assert!(longest <= 8, "seed {i}: {longest} denied in a row");
        assert!(calls <= 0.15, "seed {i}: {calls:.3} calls per request");
    }
}
