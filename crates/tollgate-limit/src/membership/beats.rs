//! When membership beats: every `[cluster] heartbeat` while N decides something on this
//! node, seldom while it decides nothing. `mod.rs` is what one beat does.

use std::sync::atomic::Ordering;

use tracing::warn;

use super::Membership;
use crate::shutdown::Shutdown;

/// Heartbeats between beats while N decides nothing on this node
/// ([`Limiter::decides_on_nodes`](crate::limiter::Limiter::decides_on_nodes)) and the
/// fleet's peers are not found through members: three gateways leasing one key at 60 requests a second spent 0.049 script calls a
/// request on beats nothing read (BENCHMARKS.md, issue 37). Such a beat's membership lives
/// `MISSED_BEATS` times as long, so a node that does need N still counts this one; the
/// count and `/status` lag by up to this many heartbeats, and a dead node leaves other
/// nodes' counts `MISSED_BEATS` idle intervals after its last beat.
pub(super) const IDLE_BEATS: u32 = 10;

impl Membership {
    /// Heartbeats until this node's next beat: 1, or [`IDLE_BEATS`] while N decides nothing
    /// here and the peers are not found through members.
    pub(super) fn beats_apart(&self) -> u32 {
        match self.peers_from_members || self.running.limiter.load().decides_on_nodes() {
            true => 1,
            false => IDLE_BEATS,
        }
    }

    /// Beat every `heartbeat` (every [`IDLE_BEATS`] while N decides nothing here) until
    /// `shutdown`, then leave. A reload that makes N decide wakes it to beat at once
    /// (`handle/running.rs`, `beat_now`); a failed beat, the handle's first included, is
    /// tried again at the next heartbeat.
    pub(crate) async fn run(self, mut shutdown: Shutdown) {
        let wake = &self.running.beat_now;
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // The first tick is now: the server beat before serving.
        let mut apart = match self.last_ok.load(Ordering::Acquire) {
            true => self.beats_apart(),
            false => 1,
        };
        let mut since = 0u32;
        loop {
            let due = tokio::select! {
                _ = tick.tick() => {
                    since += 1;
                    since >= apart.min(self.beats_apart())
                }
                _ = wake.notified() => true,
                _ = shutdown.recv() => break,
            };
            if !due {
                continue;
            }
            let now_apart = self.beats_apart();
            match self.beat_apart(now_apart).await {
                Ok(_) => (apart, since) = (now_apart, 0),
                Err(e) => {
                    apart = 1;
                    warn!(error = %e, nodes = self.running.limiter.load().nodes().get(), "membership heartbeat failed; keeping the last N");
                }
            }
        }
        self.leave().await;
    }
}
