//! How long after a store call first ran it may still run again, and the waits that bound it.
//!
//! A refund gives back a spend; run twice, it gives back twice. The store never sends one
//! again itself, but a Redis Cluster client sends any call again after a dropped connection
//! (`retries(1)` in `connection.rs`), so each refund names a marker that makes a second run
//! give nothing while it lives (`central/refund.rs`). The marker must outlive that resend:
//! this file holds the two in step.

use std::time::Duration;

use super::BACKGROUND_TIMEOUT;

/// The longest a refund's marker lives: one lives per refund, and a store timeout of hours
/// would keep them for days.
const LONGEST_REPEAT: Duration = Duration::from_secs(600);

/// The longest a Redis Cluster connection waits for a reply or a connect. Cut to this, the
/// client's own resend always falls inside a marker's life, whatever `[store] timeout`
/// says. A call still has `[store] timeout` in `invoke`: above two minutes, it fails sooner.
const CLUSTER_LONGEST_WAIT: Duration = Duration::from_secs(120);

/// What a Redis Cluster connection waits for a reply: the store timeout, at least
/// [`BACKGROUND_TIMEOUT`] (an undo queued behind a stalled call must still be written), at
/// most [`CLUSTER_LONGEST_WAIT`].
pub(super) fn cluster_wait(timeout: Duration) -> Duration {
    timeout.max(BACKGROUND_TIMEOUT).min(CLUSTER_LONGEST_WAIT)
}

/// What a Redis Cluster connection waits for a connect (a reconnect before a resend).
pub(super) fn cluster_connect_wait(connect_timeout: Duration) -> Duration {
    connect_timeout.min(CLUSTER_LONGEST_WAIT)
}

/// How long after a call first ran it may still run again. A Redis Cluster client's resend
/// is written within a [`cluster_wait`] of the first write, then its backoff (1.28 s in
/// redis 1.8) and a reconnect (no longer than a wait); three waits and 10 s also cover a
/// Redis slow to run what it was sent. At most [`LONGEST_REPEAT`].
pub(super) fn repeat_window(timeout: Duration) -> Duration {
    (timeout.max(BACKGROUND_TIMEOUT) * 3 + Duration::from_secs(10)).min(LONGEST_REPEAT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resend's latest moment: a wait for the reply that never came, the client's
    /// backoff, a reconnect, and a Redis as slow again to run it.
    fn latest_resend(timeout: Duration) -> Duration {
        let connect = cluster_connect_wait(timeout.max(Duration::from_millis(250)));
        cluster_wait(timeout) * 2 + Duration::from_millis(1280) + connect
    }

    #[test]
    fn a_cluster_resend_falls_inside_the_marker_life_for_any_store_timeout() {
        for ms in [
            1,
            10,
            250,
            2_000,
            60_000,
            120_000,
            180_000,
            3_600_000,
            31_536_000_000,
        ] {
            let t = Duration::from_millis(ms);
            assert!(
                latest_resend(t) < repeat_window(t),
                "timeout {t:?}: resend by {:?}, marker for {:?}",
                latest_resend(t),
                repeat_window(t)
            );
            assert!(repeat_window(t) <= LONGEST_REPEAT);
        }
    }
}
