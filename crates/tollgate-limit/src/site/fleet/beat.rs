//! The fleet's background loop (`FleetSite::run`, started and stopped by the
//! `LimiterHandle`, `handle/mod.rs`): every `gossip_interval` it pushes the gossip outbox
//! to the live peers (one report per policy, `report.rs`), every heartbeat it pings every
//! known peer (telling one it counts out so: `rejoin.rs`), and it drives the rejoin rounds
//! of a quarantine. Each tick also tells `fresh.rs` and `rejoin.rs` the loop ran: a gap is
//! a stall.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use super::report::ReportWriter;
use super::{FleetSite, handler, rejoin};
use crate::peer::{MAX_BATCH_BYTES, MAX_BATCH_ITEMS, Op};
use crate::shutdown::Shutdown;

/// Bytes of one gossip report before the push starts another for the same policy.
const REPORT_BYTES: usize = 1 << 20;

/// Reports grouped into calls the transport sends whole (each within its batch bounds).
fn calls(reports: Vec<Bytes>) -> Vec<Vec<Bytes>> {
    let mut calls: Vec<Vec<Bytes>> = Vec::new();
    let mut bytes = 0;
    for r in reports {
        match calls.last_mut() {
            Some(call) if call.len() < MAX_BATCH_ITEMS && bytes + r.len() <= MAX_BATCH_BYTES => {
                bytes += r.len();
                call.push(r);
            }
            _ => {
                bytes = r.len();
                calls.push(vec![r]);
            }
        }
    }
    calls
}

impl FleetSite {
    /// Push gossip every `gossip_interval` and ping every peer every heartbeat, until
    /// `shutdown`. `on_live` hears the live count at start and whenever it has changed
    /// (looked at on every tick).
    pub(crate) async fn run(
        self: Arc<Self>,
        mut shutdown: Shutdown,
        on_live: impl Fn(usize) + Send,
    ) {
        let mut gossip = tokio::time::interval(self.gossip_interval);
        gossip.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ping = tokio::time::interval(self.heartbeat);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut live = 0;
        let me = self.clone();
        let rejoin = me.rejoin_rounds();
        tokio::pin!(rejoin);
        loop {
            tokio::select! {
                _ = gossip.tick() => self.push_gossip(),
                _ = ping.tick() => self.ping_all(),
                _ = &mut rejoin => {}
                _ = shutdown.recv() => break,
            }
            self.fresh.tick();
            if self.rejoin.tick(self.handler.now()) {
                self.rejoin.begin(&self.ring, "the fleet loop stalled");
            }
            let now = self.ring.live_count();
            if now != live {
                live = now;
                on_live(now);
            }
        }
    }

    pub(super) fn push_gossip(self: &Arc<Self>) {
        let (done, cells) = self.reports();
        if done.is_empty() {
            return;
        }
        let calls = calls(done);
        for peer in self.ring.live_others() {
            self.outbox.sent.inc_by(cells);
            for chunk in &calls {
                let me = self.clone();
                // Not retried: a push that may have landed must not count twice; a lost one
                // under-counts by one interval, which the documented bound already allows.
                // Sent, not awaited: no task per peer (a task joining every peer's call
                // cost more than a task each, and a task each cost a spawn, a timer and a
                // channel per message: `PeerClient::send`).
                self.client
                    .send(peer, Op::Gossip, chunk.clone(), move |answer| {
                        if let Ok(replies) = answer
                            && replies.iter().any(|r| r.as_ref() == handler::REFUSED)
                        {
                            me.mismatch(peer);
                        }
                    });
            }
        }
    }

    /// The outbox taken as finished reports (one per policy, more past [`REPORT_BYTES`]),
    /// and the cells they carry.
    fn reports(&self) -> (Vec<Bytes>, u64) {
        // Per policy name: its report so far, or `None` when this node no longer runs it
        // as a gossip policy (a reload removed it: its spends are dropped). A push holds one
        // policy or a few, so a list searched from the last one used beats a map.
        let mut reports: Vec<(Arc<str>, Option<ReportWriter>)> = Vec::new();
        let mut last = 0;
        let mut done: Vec<Bytes> = Vec::new();
        let mut cells = 0;
        self.outbox.take(|policy, headroom, key, n| {
            let same = |(p, _): &(Arc<str>, _)| Arc::ptr_eq(p, policy) || p == policy;
            if !reports.get(last).is_some_and(same) {
                last = match reports.iter().position(same) {
                    Some(i) => i,
                    None => {
                        let spec = self.handler.gossip_spec(policy);
                        let writer = spec.map(|spec| ReportWriter::new(policy, spec));
                        reports.push((policy.clone(), writer));
                        reports.len() - 1
                    }
                };
            }
            let Some(writer) = &mut reports[last].1 else {
                return;
            };
            writer.push(headroom, n, key);
            cells += n;
            if writer.bytes() >= REPORT_BYTES {
                let full = std::mem::replace(writer, ReportWriter::new(policy, writer.spec()));
                done.push(full.finish());
            }
        });
        done.extend(
            reports
                .into_iter()
                .filter_map(|(_, w)| w.map(ReportWriter::finish)),
        );
        (done, cells)
    }

    /// `peer` refused our gossip: it runs other numbers for a gossip policy (or none).
    /// Counted, and said at most once a second: the fleet is not sharing that limit.
    fn mismatch(&self, peer: SocketAddr) {
        self.metrics.error("config");
        if self.once_a_second() {
            tracing::error!(peer = %peer, "peer refused our gossip: its gossip policies differ from ours (name, site or numbers); the fleet is not sharing those limits");
        }
    }

    /// Ping every known peer; the ring hears each answer or failure (the client's observer).
    /// A peer answers with its own `peer_listen`: another name than the one dialled means
    /// the fleet hashes that node under two names, and keys are decided twice.
    fn ping_all(self: &Arc<Self>) {
        for (peer, out) in self.ring.others_counted_out() {
            let me = self.clone();
            // A peer counted out hears it: it may still be running and deciding its keys.
            let data = Bytes::from_static(if out { rejoin::COUNTED_OUT } else { b"" });
            tokio::spawn(async move {
                let Ok(replies) = me.client.call(peer, Op::Ping, vec![data]).await else {
                    return;
                };
                let name = replies
                    .first()
                    .map(|r| String::from_utf8_lossy(r).into_owned());
                if name.as_deref() != Some(peer.to_string().as_str()) {
                    me.metrics.error("config");
                    if me.once_a_second() {
                        tracing::error!(dialled = %peer, answered = ?name, "a peer answers under another peer_listen than the one this node lists: the fleet hashes it under two names and its keys are decided twice; make every node's peers list use the address each node has as peer_listen");
                    }
                }
            });
        }
    }

    /// True at most once a second (the fleet's configuration errors are logged that often).
    fn once_a_second(&self) -> bool {
        use std::sync::atomic::Ordering;
        let now = crate::peer::wire::now_ms();
        let last = self.mismatch_logged.load(Ordering::Relaxed);
        now.saturating_sub(last) >= 1_000
            && self
                .mismatch_logged
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}
