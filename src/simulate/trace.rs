//! The offered load: the design document's experiment, generalised. Requests arrive at a
//! fixed interval; a skewed balancer sends each to a node drawn with xorshift64 (the seed's
//! generator and seed), so the default trace is the published one, request for request.

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
}
