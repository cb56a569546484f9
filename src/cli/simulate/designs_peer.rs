//! The two designs without a store on the request path, where nodes talk to each other
//! instead (the design document's designs 5 and 4): route by key and gossip counters.
//! Peer messages are counted in `Run::peer`; neither design makes a store call.

use std::collections::VecDeque;

use super::designs::{Run, exact};
use super::trace::Arrival;
use crate::config::Policy;
use crate::limit::algorithm::Rate;
use crate::limit::clock::Nanos;
use crate::limit::fleet::ring::pick;

/// The one key every simulated request spends on.
const KEY: &str = "k";

/// Route by key (design 5, `site = "owner"`): rendezvous hashing maps the key to one node,
/// whose exact limiter (the policy's GCRA, the same code central's store runs) decides
/// every request of the key. A request that lands on the owner costs nothing; one that
/// lands elsewhere costs that node one peer call to the owner (the answer rides on it). No
/// store call, and no network delay in the model (as for central): the owner decides at the
/// arrival's time (the production owner step: `limit/site/fleet/owner_check.rs`). The fleet is fixed for the whole trace (the trace has no node loss), so
/// ownership never moves and the owner admits exactly what central admits.
pub(super) fn owner(policy: &Policy, nodes: usize, trace: &[Arrival]) -> Run {
    let owner = owner_of(KEY, nodes);
    Run {
        admitted: exact(policy, trace),
        calls: 0,
        peer: trace.iter().filter(|a| a.node != owner).count() as u64,
    }
}

/// The owner of `key` among nodes `0..nodes`: the production ring's rendezvous pick
/// (`limit::fleet::ring`), with each node's index as its identity. Removing a node moves
/// only the keys it owned.
fn owner_of(key: &str, nodes: usize) -> usize {
    pick(key, (0..nodes).map(|n| (n, n as u64))).unwrap_or(0)
}

/// Gossip counters (design 4, `site = "gossip"`) for the policy's GCRA.
///
/// # Formulation
///
/// Each node keeps a *view* of the shared bucket: one GCRA theoretical arrival time `tat`,
/// in the exact ticks of `limit::algorithm::Rate` (emission interval `T`, tolerance
/// `τ = burst·T`), starting full.
/// - Its own request at `now` is admitted iff `max(tat, now) + T − now ≤ τ`, and then
///   `tat ← max(tat, now) + T` (the GCRA rule, on the view) and the cell is added to the
///   node's unsent count.
/// - Node `j` pushes its unsent count to each of the `N − 1` others every `interval`, at
///   `j·interval/N + k·interval` (phases spread over the interval, as unsynchronised nodes
///   would be), and only when the count is not zero (only keys active in the last interval
///   are sent). Each push to one peer is one peer message.
/// - A push sent at `p` is heard at `p + delay` (a fixed network delay): every other node
///   applies the `c` cells it carries as spent then, `tat ← max(tat, p + delay) + c·T`,
///   whether or not they conform: they were admitted.
///
/// Events at the same instant as an arrival (pushes, receipts) happen before it.
///
/// # Bound
///
/// A spend at `s` is pushed by `s + interval` and heard by `s + S` with
/// `S = interval + delay`. Applying a spend late never lowers a `tat`, and each applied cell
/// adds `T`, so a node that admits at `t` has `(cells in its view) + 1 ≤ burst + ⌊t·r⌋`
/// (`r` = limit per second); everything admitted by then is in its view except what the
/// others admitted in `(t − S, t]`. Hence, over any trace,
///
/// ```text
/// admitted − bound ≤ U,   U ≤ min( offered arrivals in any S-long window,
///                                  (N − 1) · (burst + ⌊r·S⌋) )
/// ```
///
/// (each other node's own cells conform to its view, so it admits at most
/// `burst + ⌊r·S⌋` in `S`), and any 100 ms bin holds at most `burst + ⌊r·0.1 s⌋ + U`.
/// At 2× overload of 1 000/s (2 000/s offered) and 1 ms delay that is `U ≤ 12, 42, 202`
/// at 5, 20, 100 ms. Over-admission is an offset that grows with `S`, not with the
/// trace's length: every cell is eventually in every view.
pub(super) fn gossip(
    policy: &Policy,
    nodes: usize,
    trace: &[Arrival],
    interval: Nanos,
    delay: Nanos,
) -> Run {
    const IDLE: Nanos = Nanos::MAX;
    let rate = Rate::new(policy.limit, policy.period).expect("the simulator's policy is valid");
    let (cell, tolerance) = (rate.cells(1), rate.cells(u64::from(policy.burst.get())));
    let interval = interval.max(1);
    let phase = |j: usize| (u128::from(interval) * j as u128 / nodes.max(1) as u128) as Nanos;
    // The first push of node `j` strictly after `s` (a push at `s` runs before `s`'s arrival).
    let next_push = |j: usize, s: Nanos| match s.checked_sub(phase(j)) {
        None => phase(j),
        Some(since) => phase(j) + (since / interval + 1) * interval,
    };
    let mut tat = vec![0u128; nodes];
    let mut unsent = vec![0u64; nodes];
    // When each node pushes next; `IDLE` while it has nothing to send.
    let mut push_at = vec![IDLE; nodes];
    // (heard at, sender, cells); FIFO because the delay is fixed.
    let mut in_flight: VecDeque<(Nanos, usize, u64)> = VecDeque::new();
    let mut peer = 0u64;
    let admitted = trace
        .iter()
        .map(|a| {
            // Everything due up to and including `a.at`, in time order (receipts first).
            loop {
                let (pushed_at, sender) = push_at
                    .iter()
                    .enumerate()
                    .map(|(j, &t)| (t, j))
                    .min()
                    .unwrap_or((IDLE, 0));
                match in_flight.front() {
                    Some(&(heard, from, cells)) if heard <= a.at && heard <= pushed_at => {
                        in_flight.pop_front();
                        let heard_t = rate.ticks(heard);
                        for (_, t) in tat.iter_mut().enumerate().filter(|(j, _)| *j != from) {
                            *t = (*t).max(heard_t) + rate.cells(cells);
                        }
                    }
                    _ if pushed_at <= a.at => {
                        in_flight.push_back((
                            pushed_at.saturating_add(delay),
                            sender,
                            unsent[sender],
                        ));
                        peer += nodes as u64 - 1;
                        unsent[sender] = 0;
                        push_at[sender] = IDLE;
                    }
                    _ => break,
                }
            }
            let now_t = rate.ticks(a.at);
            let base = tat[a.node].max(now_t);
            let ok = base + cell - now_t <= tolerance;
            if ok {
                tat[a.node] = base + cell;
                if unsent[a.node] == 0 {
                    push_at[a.node] = next_push(a.node, a.at);
                }
                unsent[a.node] += 1;
            }
            ok
        })
        .collect();
    Run {
        admitted,
        calls: 0,
        peer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_moves_only_the_lost_nodes_keys() {
        let keys: Vec<String> = (0..200).map(|i| format!("acct:{i}")).collect();
        for k in &keys {
            let before = owner_of(k, 8);
            assert!(before < 8);
            // Node 7 leaves: its keys move, every other key stays.
            let after = owner_of(k, 7);
            if before != 7 {
                assert_eq!(after, before, "{k}");
            }
        }
        let spread = (0..8)
            .filter(|&n| keys.iter().any(|k| owner_of(k, 8) == n))
            .count();
        assert_eq!(spread, 8, "200 keys reach every node");
    }
}
