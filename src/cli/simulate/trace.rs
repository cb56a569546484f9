//! The offered load: the design document's experiment, generalised. Requests arrive at a
//! fixed interval; a skewed balancer sends each to a node drawn with xorshift64 (the seed's
//! generator and seed), so the default trace is the published one, request for request.
//! [`lose`] takes a node out mid-trace (the matrix's node-loss trace).

use crate::limit::clock::Nanos;

/// The design document's balancer weights (percent of traffic per node).
pub const SEED_WEIGHTS: [u64; 8] = [40, 20, 10, 10, 5, 5, 5, 5];
/// The design document's xorshift seed.
pub const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// One offered request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Virtual time (ns).
    pub at: Nanos,
    /// The node the balancer chose.
    pub node: usize,
}

/// `requests` arrivals `interval` ns apart, spread over nodes by `weights`.
pub fn trace(requests: usize, interval: Nanos, weights: &[u64], seed: u64) -> Vec<Arrival> {
    let total: u64 = weights.iter().sum::<u64>().max(1);
    let mut s = seed;
    (0..requests)
        .map(|i| {
            let mut r = xorshift(&mut s) % total;
            let node = weights
                .iter()
                .position(|&w| {
                    if r < w {
                        true
                    } else {
                        r -= w;
                        false
                    }
                })
                .unwrap_or(weights.len() - 1);
            Arrival {
                at: i as Nanos * interval,
                node,
            }
        })
        .collect()
}

/// The balancer loses `node` at `at`: the arrivals it would have sent there from then on go
/// to the other nodes by their weights (drawn from a second stream of `seed`), and the
/// lost node's book keeps whatever it held, stranded.
pub fn lose(trace: &mut [Arrival], node: usize, at: Nanos, weights: &[u64], seed: u64) {
    let mut rest = weights.to_vec();
    if let Some(w) = rest.get_mut(node) {
        *w = 0;
    }
    let total: u64 = rest.iter().sum();
    if total == 0 {
        return;
    }
    let mut s = seed ^ 0xD1B5_4A32_D192_ED03;
    for a in trace.iter_mut().filter(|a| a.at >= at && a.node == node) {
        let mut r = xorshift(&mut s) % total;
        a.node = rest
            .iter()
            .position(|&w| {
                if r < w {
                    true
                } else {
                    r -= w;
                    false
                }
            })
            .unwrap_or(0);
    }
}

/// Independent Poisson arrivals on each node at `rates` (requests per second) for `secs`
/// seconds, merged in time order: the shape of `benches/lease_fleet.sh` with
/// `ARRIVALS=poisson`, where the fixed-interval trace above hides the bursts a thin node
/// sees (its gaps are geometric, but never two arrivals in one interval).
pub fn poisson(rates: &[f64], secs: f64, seed: u64) -> Vec<Arrival> {
    let mut s = seed | 1;
    let mut out = Vec::new();
    for (node, &rate) in rates.iter().enumerate().filter(|(_, r)| **r > 0.0) {
        let mut t = 0.0;
        loop {
            // Uniform in (0, 1]: 53 random bits, never 0 (ln 0 is −∞).
            let u = ((xorshift(&mut s) >> 11) + 1) as f64 / (1u64 << 53) as f64;
            t -= u.ln() / rate;
            if t >= secs {
                break;
            }
            out.push(Arrival {
                at: (t * 1e9) as Nanos,
                node,
            });
        }
    }
    out.sort_by_key(|a| (a.at, a.node));
    out
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_weights() {
        let t = trace(20_000, 500_000, &SEED_WEIGHTS, SEED);
        let node0 = t.iter().filter(|a| a.node == 0).count();
        assert!((7_600..8_400).contains(&node0), "{node0}");
        assert_eq!(t[19_999].at, 9_999_500_000);
    }

    #[test]
    fn poisson_arrivals_follow_each_rate() {
        let t = poisson(&[30.0, 10.0], 100.0, SEED);
        let on = |n| t.iter().filter(|a| a.node == n).count();
        assert!((2_850..3_150).contains(&on(0)), "{}", on(0));
        assert!((900..1_100).contains(&on(1)), "{}", on(1));
        assert!(t.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(t.last().is_some_and(|a| a.at < 100_000_000_000));
    }

    #[test]
    fn a_lost_node_gets_nothing_after_it_is_lost() {
        let mut t = trace(20_000, 500_000, &SEED_WEIGHTS, SEED);
        let before = t.clone();
        lose(&mut t, 0, 5_000_000_000, &SEED_WEIGHTS, SEED);
        assert!(t.iter().all(|a| a.at < 5_000_000_000 || a.node != 0));
        let moved = t
            .iter()
            .zip(&before)
            .filter(|(a, b)| a.node != b.node)
            .count();
        let lost = before
            .iter()
            .filter(|a| a.at >= 5_000_000_000 && a.node == 0)
            .count();
        assert_eq!(moved, lost);
        assert!(t[..10_000] == before[..10_000]);
    }
}
