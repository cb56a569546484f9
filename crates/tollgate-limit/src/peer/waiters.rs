//! The calls queued for one peer ([`Waiter`]s), and how a flushing task (`client.rs`) takes
//! them: which to drop, which go in the next message, and how each hears its answer.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::client::{MAX_BATCH_BYTES, MAX_BATCH_ITEMS, PeerError};
use super::metrics::PeerMetrics;
use super::wire::Op;

/// A call waiting for its message.
pub(super) struct Waiter {
    pub(super) op: Op,
    pub(super) items: Vec<Bytes>,
    pub(super) reply: Reply,
}

/// Who hears a call's answer.
pub(super) enum Reply {
    /// A caller awaiting it ([`PeerClient::call`](super::PeerClient::call)); gone once it
    /// gave up.
    Wait(oneshot::Sender<Answer>),
    /// A callback ([`PeerClient::send`](super::PeerClient::send)), told `Timeout` if its
    /// call is still unsent `timeout` after `started`.
    Then { started: Instant, f: Then },
}

/// What a call hears: one reply per item, or why not.
pub(super) type Answer = Result<Vec<Bytes>, PeerError>;

/// [`PeerClient::send`](super::PeerClient::send)'s callback (`Sync` too, so the flushing
/// task can hold its batch's items by reference while the message is out).
pub(super) type Then = Box<dyn FnOnce(Answer) + Send + Sync>;

/// Takes out of `waiting` the calls not to send: those whose caller gave up (timed out,
/// cancelled), dropped, and callbacks still unsent `timeout` after their call, returned to
/// be told so.
pub(super) fn drop_gone(waiting: &mut VecDeque<Waiter>, timeout: Duration) -> Vec<Waiter> {
    let mut expired = Vec::new();
    let mut now = None;
    let mut i = 0;
    while i < waiting.len() {
        let gone = match &waiting[i].reply {
            Reply::Wait(tx) => tx.is_closed(),
            Reply::Then { started, .. } => {
                let now = *now.get_or_insert_with(Instant::now);
                now.saturating_duration_since(*started) >= timeout
            }
        };
        if !gone {
            i += 1;
            continue;
        }
        if let Some(w) = waiting.remove(i)
            && matches!(w.reply, Reply::Then { .. })
        {
            expired.push(w);
        }
    }
    expired
}

/// `w`'s answer, to its caller, or to its callback (counted as `call` counts its own).
pub(super) fn deliver(metrics: &PeerMetrics, w: Waiter, answer: Answer) {
    match w.reply {
        Reply::Wait(tx) => drop(tx.send(answer)),
        Reply::Then { started, f } => {
            match &answer {
                Ok(_) => metrics.latency(started.elapsed()),
                Err(e) => metrics.error(e.kind()),
            }
            f(answer);
        }
    }
}

/// A batch's items as `(op, data)`, waiter after waiter. A type of its own rather than a
/// `flat_map` of closures: the flushing task holds it across awaits, and a spawned future
/// holding closures over borrowed waiters does not prove `Send` for every lifetime.
#[derive(Clone)]
pub(super) struct BatchItems<'a> {
    batch: &'a [Waiter],
    waiter: usize,
    item: usize,
}

impl<'a> BatchItems<'a> {
    pub(super) fn new(batch: &'a [Waiter]) -> Self {
        BatchItems {
            batch,
            waiter: 0,
            item: 0,
        }
    }
}

impl<'a> Iterator for BatchItems<'a> {
    type Item = (Op, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let w = self.batch.get(self.waiter)?;
            if let Some(data) = w.items.get(self.item) {
                self.item += 1;
                return Some((w.op, data));
            }
            self.waiter += 1;
            self.item = 0;
        }
    }
}

/// Waiters from the front until [`MAX_BATCH_ITEMS`] or [`MAX_BATCH_BYTES`] (at least one).
pub(super) fn take_batch(waiting: &mut VecDeque<Waiter>) -> Vec<Waiter> {
    let mut batch = Vec::new();
    let (mut items, mut bytes) = (0, 0);
    while let Some(w) = waiting.front() {
        let size: usize = w.items.iter().map(Bytes::len).sum();
        if !batch.is_empty()
            && (items + w.items.len() > MAX_BATCH_ITEMS || bytes + size > MAX_BATCH_BYTES)
        {
            break;
        }
        items += w.items.len();
        bytes += size;
        batch.extend(waiting.pop_front());
    }
    batch
}
