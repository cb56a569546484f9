//! When membership beats: every `[cluster] heartbeat` while N decides something on this
//! node, seldom while it decides nothing. `mod.rs` is what one beat does.

use tracing::warn;

use super::Membership;
use crate::shutdown::Shutdown;

/// Heartbeats between beats while N decides nothing on this node
/// ([`Limiter::decides_on_nodes`](crate::limiter::Limiter::decides_on_nodes)) and the fleet's peers are not found through members:
/// three gateways leasing one key at 60 requests a second spent 0.049 script calls a
/// request on beats nothing read (BENCHMARKS.md, issue 37). Such a beat's membership lives
/// `MISSED_BEATS` times as long, so a node that does need N still counts this one; the
/// count and `/status` lag by up to this many heartbeats, and a dead node leaves other
/// nodes' counts `MISSED_BEATS` idle intervals after its last beat.
pub(super) const IDLE_BEATS: u32 = 10;

impl Membership {
    /// Heartbeats until this node's next beat: 1, or [`IDLE_BEATS`] while N decides nothing
    /// here and the peers are not found through members.
    pub(super) fn beats_apart(&self) -> u32 {
        match self.peers_from_members || self.limiter.load().decides_on_nodes() {
            true => 1,
            false => IDLE_BEATS,
        }
    }

    /// Beat every `heartbeat` (every [`IDLE_BEATS`] while N decides nothing here) until
    /// `shutdown`, then leave. A reload that makes N decide brings the next beat to the next
    /// heartbeat; a failed beat is tried again at the next one.
    pub async fn run(self, mut shutdown: Shutdown) {
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // The first tick is now: the server beat before serving.
        // The server's first beat was at the running config's spacing.
        let (mut apart, mut since) = (self.beats_apart(), 0u32);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    since += 1;
                    let now_apart = self.beats_apart();
                    if since < apart.min(now_apart) {
                        continue;
                    }
                    match self.beat_apart(now_apart).await {
                        Ok(_) => (apart, since) = (now_apart, 0),
                        Err(e) => {
                            apart = 1;
                            warn!(error = %e, nodes = self.limiter.load().nodes().get(), "membership heartbeat failed; keeping the last N");
                        }
                    }
                }
                _ = shutdown.recv() => break,
            }
        }
        self.leave().await;
    }
}
