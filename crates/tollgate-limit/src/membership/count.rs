//! How a node's N follows what membership counts (`membership.rs`): up at once, down only
//! when the lower count holds on beats that found this node's own member intact. A child of
//! membership, apart so the rule and its test read on one screen.

use std::num::NonZeroU32;

/// A member is dropped after this many missed heartbeats (its TTL, `membership.rs`).
pub(crate) const MISSED_BEATS: u32 = 3;

/// Lower counts than N seen on beats in a row: the highest of them, and how many beats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Lowering {
    highest: NonZeroU32,
    beats: u32,
}

/// N after a beat that counted `seen` members. A higher count is believed at once (smaller
/// shares only under-admit). A lower one only from a beat that found this member intact
/// (else the set was lost or the store stalled, and members that have not beaten since are
/// missing: a `CLIENT PAUSE` of a second made every node see N = 1 and take the whole
/// limit), and only once seen on `MISSED_BEATS + 1` such beats in a row: by then every
/// live member has renewed itself. So a member that dies is dropped from N within two of
/// its TTLs, and N never drops on a store's hiccup.
pub(crate) fn next_nodes(
    current: NonZeroU32,
    seen: NonZeroU32,
    intact: bool,
    lowering: &mut Option<Lowering>,
) -> NonZeroU32 {
    if seen >= current || !intact {
        *lowering = None;
        return seen.max(current);
    }
    let low = lowering.get_or_insert(Lowering {
        highest: seen,
        beats: 0,
    });
    low.highest = low.highest.max(seen);
    low.beats += 1;
    if low.beats <= MISSED_BEATS {
        return current;
    }
    let n = low.highest;
    *lowering = None;
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_rises_at_once_and_falls_only_on_intact_beats_in_a_row() {
        let n = |v: u32| NonZeroU32::new(v).unwrap();
        let mut low = None;
        assert_eq!(
            next_nodes(n(2), n(3), true, &mut low),
            n(3),
            "a join: at once"
        );
        assert_eq!(
            next_nodes(n(2), n(3), false, &mut low),
            n(3),
            "even on a first beat"
        );
        // The store stalled or lost the set: a lower count is not believed.
        for _ in 0..10 {
            assert_eq!(next_nodes(n(3), n(1), false, &mut low), n(3));
        }
        // A member left: lowered after MISSED_BEATS + 1 intact beats, to the highest seen.
        for _ in 0..MISSED_BEATS - 1 {
            assert_eq!(next_nodes(n(3), n(1), true, &mut low), n(3));
        }
        assert_eq!(next_nodes(n(3), n(2), true, &mut low), n(3));
        assert_eq!(next_nodes(n(3), n(1), true, &mut low), n(2));
        assert_eq!(low, None);
        // A non-intact beat or a full count in between starts the count again.
        for interrupt in [(n(1), false), (n(2), true)] {
            for _ in 0..MISSED_BEATS {
                assert_eq!(next_nodes(n(2), n(1), true, &mut low), n(2));
            }
            assert_eq!(next_nodes(n(2), interrupt.0, interrupt.1, &mut low), n(2));
            for _ in 0..MISSED_BEATS {
                assert_eq!(next_nodes(n(2), n(1), true, &mut low), n(2));
            }
            assert_eq!(next_nodes(n(2), n(1), true, &mut low), n(1));
        }
    }
}
