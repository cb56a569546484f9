//! The peer message format: length-delimited binary, sealed with keyed BLAKE3.
//!
//! One message is one frame on a peer connection (`frame.rs`):
//!
//! ```text
//! mac        32 bytes  BLAKE3-keyed(k, everything below [+ the request's mac, in a reply])
//! version     u8       7 (`VERSION`)
//! kind        u8       1 = request, 2 = reply
//! timestamp   u64      sender's wall clock, Unix milliseconds
//! nonce       u64      a per-sender counter: no two requests share a MAC (0 in replies)
//! sender_len  u16      then `sender`: the sender's peer address, UTF-8 ("10.0.0.5:7946")
//!                      (requests; empty in replies: their request names who answers)
//! to_len      u16      then `to`: the recipient's peer address (requests; empty in replies)
//! count       u32      items, then each item:
//!   request:  op u8, len u32, `len` bytes
//!   reply:    len u32, `len` bytes (one per request item, same order)
//! ```
//!
//! Integers are big-endian. The receiver remembers the MACs of the requests it accepted (the
//! replay guard), so an identical request is refused; the nonce keeps two honest requests
//! from being identical. The MAC covers the recipient, and a receiver refuses a request
//! addressed to another peer: a message captured on its way to one node cannot be replayed
//! to another (each node's replay guard is its own). Messages are signed, not encrypted:
//! keys (client addresses, hashed accounts) cross the peer network in the clear. A reply's
//! MAC also covers the MAC of the request it answers, so a reply cannot be replayed as the
//! answer to another request. Item bytes are opaque here: the
//! decision sites above define them.
//!
//! Binary rather than JSON: keys are arbitrary bytes (hashed accounts, header values) that
//! JSON would have to escape or base64; a batch of thousands of items encodes as copies, not
//! a serializer pass; and the MAC covers exactly the bytes on the wire, with no canonical form
//! to agree on.
//!
//! `k` is derived from the shared secret; `mac.rs` has how, and why BLAKE3.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub use super::mac::{MAC_LEN, Secret};

/// The format version (2: the recipient is signed; 3: gossip as one report per policy; 4:
/// front-coded report entries, `fleet/report.rs`; 5: ask answers carry `next_after`, and the
/// `debit` op; 6: keyed BLAKE3 for HMAC-SHA256, and replies name no sender, so an empty
/// reply's MAC is one BLAKE3 block; 7: the `sync` op): nodes of two versions refuse each
/// other.
pub const VERSION: u8 = 7;

/// How far a request's timestamp may be from the receiver's clock (either way).
pub const MAX_SKEW: Duration = Duration::from_secs(5);

/// The largest message either side reads.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

const KIND_REQUEST: u8 = 1;
const KIND_REPLY: u8 = 2;
/// mac, version, kind, timestamp, nonce, sender_len (then sender, to_len, to).
const HEADER_LEN: usize = MAC_LEN + 1 + 1 + 8 + 8 + 2;

/// What a batched item asks of its peer; the transport only counts and carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Route by key: the owner decides.
    Ask,
    /// Route by key: give back what an ask reserved (all-or-nothing across owners).
    Refund,
    /// Gossip counters: this node's deltas.
    Gossip,
    /// Liveness.
    Ping,
    /// Route by key: spend cells at the owner whether or not they conform (a response
    /// reported a higher cost than the request was admitted on).
    Debit,
    /// Gossip counters: a node catching up after a stall asks for the peer's count of a
    /// key (nothing spent).
    Sync,
}

impl Op {
    /// The `op` label of `tollgate_peer_calls_total`.
    pub fn label(self) -> &'static str {
        match self {
            Op::Ask => "ask",
            Op::Refund => "refund",
            Op::Gossip => "gossip",
            Op::Ping => "ping",
            Op::Debit => "debit",
            Op::Sync => "sync",
        }
    }

    fn code(self) -> u8 {
        match self {
            Op::Ask => 1,
            Op::Refund => 2,
            Op::Gossip => 3,
            Op::Ping => 4,
            Op::Debit => 5,
            Op::Sync => 6,
        }
    }

    fn from_code(code: u8) -> Option<Op> {
        Some(match code {
            1 => Op::Ask,
            2 => Op::Refund,
            3 => Op::Gossip,
            4 => Op::Ping,
            5 => Op::Debit,
            6 => Op::Sync,
            _ => return None,
        })
    }
}

/// One item of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub op: Op,
    pub data: Bytes,
}

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not shaped like a message of this version.
    #[error("malformed peer message")]
    Malformed,
    /// Timestamp further than [`MAX_SKEW`] from the receiver's clock.
    #[error("peer message timestamp out of window")]
    Stale,
    /// The MAC does not match: wrong secret or altered bytes.
    #[error("peer message MAC mismatch")]
    BadMac,
    /// Authentic, but accepted once already (see the server's replay guard).
    #[error("peer message replayed")]
    Replayed,
    /// Authentic, but addressed to another peer.
    #[error("peer message addressed to another peer")]
    Misdirected,
}

impl WireError {
    /// The `kind` label of `tollgate_peer_errors_total`: stale and forged are both `auth`.
    pub fn kind(self) -> &'static str {
        match self {
            WireError::Malformed => "decode",
            WireError::Stale | WireError::BadMac | WireError::Replayed | WireError::Misdirected => {
                "auth"
            }
        }
    }
}

/// Wall clock in Unix milliseconds (the timestamps of two nodes are compared).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A request, ready to send, and its MAC (which its reply is bound to): the gateway's tests
/// of the wire seal requests with it (the client seals batches as they leave).
#[cfg(any(test, feature = "test-util"))]
pub fn seal_request(
    secret: &Secret,
    sender: &str,
    to: &str,
    timestamp_ms: u64,
    nonce: u64,
    items: &[Item],
) -> ([u8; MAC_LEN], Bytes) {
    let items = items.iter().map(|i| (i.op, &i.data[..]));
    seal_items(secret, sender, to, timestamp_ms, nonce, items)
}

/// [`seal_request`] of items given as `(op, data)` (the client's batch, not gathered into
/// [`Item`]s first).
pub fn seal_items<'a>(
    secret: &Secret,
    sender: &str,
    to: &str,
    timestamp_ms: u64,
    nonce: u64,
    items: impl Iterator<Item = (Op, &'a [u8])> + Clone,
) -> ([u8; MAC_LEN], Bytes) {
    let (count, len) = items
        .clone()
        .fold((0, 0), |(n, len), (_, data)| (n + 1, len + 5 + data.len()));
    let mut b = header(KIND_REQUEST, sender, to, timestamp_ms, nonce, len);
    put_count(&mut b, count);
    for (op, data) in items {
        b.put_u8(op.code());
        put_bytes(&mut b, data);
    }
    seal(secret, b, None)
}

/// A reply to the request whose MAC is `request_mac`.
pub fn seal_reply(
    secret: &Secret,
    timestamp_ms: u64,
    request_mac: &[u8; MAC_LEN],
    items: &[Bytes],
) -> Bytes {
    let len = items.iter().map(|i| 4 + i.len()).sum::<usize>();
    let mut b = header(KIND_REPLY, "", "", timestamp_ms, 0, len);
    put_count(&mut b, items.len());
    for item in items {
        put_bytes(&mut b, item);
    }
    seal(secret, b, Some(request_mac)).1
}

/// An authenticated request.
#[derive(Debug)]
pub struct OpenedRequest {
    pub mac: [u8; MAC_LEN],
    pub sender: String,
    /// The peer address it was sealed for.
    pub to: String,
    /// Checked when it is opened; read again only by the gateway's tests of the wire.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    pub timestamp_ms: u64,
    pub items: Vec<Item>,
}

/// Check a request's shape, timestamp and MAC (in that order), then decode its items.
pub fn open_request(
    secret: &Secret,
    message: &Bytes,
    now_ms: u64,
) -> Result<OpenedRequest, WireError> {
    let head = parse_header(message, KIND_REQUEST)?;
    if head.timestamp_ms.abs_diff(now_ms) > MAX_SKEW.as_millis() as u64 {
        return Err(WireError::Stale);
    }
    if !secret.verify(&message[MAC_LEN..], &message[..MAC_LEN]) {
        return Err(WireError::BadMac);
    }
    let mut body = message.slice(head.body_at..);
    let count = take_count(&mut body)?;
    let mut items = Vec::with_capacity(count.min(body.len() / 5));
    for _ in 0..count {
        if body.remaining() < 1 {
            return Err(WireError::Malformed);
        }
        let op = Op::from_code(body.get_u8()).ok_or(WireError::Malformed)?;
        let data = take_bytes(&mut body)?;
        items.push(Item { op, data });
    }
    if body.has_remaining() {
        return Err(WireError::Malformed);
    }
    Ok(OpenedRequest {
        mac: head.mac,
        sender: head.sender.to_string(),
        to: head.to.to_string(),
        timestamp_ms: head.timestamp_ms,
        items,
    })
}

/// Check a reply against the request it answers, then decode its items. The reply's MAC
/// covers its bytes and then `request_mac`: that is appended to `message` in place (a
/// reader that leaves [`MAC_LEN`] bytes of room spares a copy), hashed in one pass with the
/// rest, and taken off again.
pub fn open_reply(
    secret: &Secret,
    mut message: BytesMut,
    request_mac: &[u8; MAC_LEN],
) -> Result<Vec<Bytes>, WireError> {
    let body_at = parse_header(&message, KIND_REPLY)?.body_at;
    let len = message.len();
    message.extend_from_slice(request_mac);
    let authentic = secret.verify(&message[MAC_LEN..], &message[..MAC_LEN]);
    message.truncate(len);
    if !authentic {
        return Err(WireError::BadMac);
    }
    let mut body = message.freeze().slice(body_at..);
    let count = take_count(&mut body)?;
    let mut items = Vec::with_capacity(count.min(body.len() / 4));
    for _ in 0..count {
        items.push(take_bytes(&mut body)?);
    }
    if body.has_remaining() {
        return Err(WireError::Malformed);
    }
    Ok(items)
}

fn header(
    kind: u8,
    sender: &str,
    to: &str,
    timestamp_ms: u64,
    nonce: u64,
    body_len: usize,
) -> BytesMut {
    // A socket address is far shorter than u16::MAX; anything longer is cut, and then
    // fails to parse at the receiver rather than corrupting the frame.
    fn cut(s: &str) -> &[u8] {
        &s.as_bytes()[..s.len().min(usize::from(u16::MAX))]
    }
    let (sender, to) = (cut(sender), cut(to));
    // Room for a reply's bound request MAC too (`seal`), so sealing never reallocates.
    let len = HEADER_LEN + sender.len() + 2 + to.len() + 4 + body_len + MAC_LEN;
    let mut b = BytesMut::with_capacity(len);
    b.put_bytes(0, MAC_LEN);
    b.put_u8(VERSION);
    b.put_u8(kind);
    b.put_u64(timestamp_ms);
    b.put_u64(nonce);
    for part in [sender, to] {
        b.put_u16(part.len() as u16);
        b.put_slice(part);
    }
    b
}

fn put_count(b: &mut BytesMut, n: usize) {
    b.put_u32(u32::try_from(n).unwrap_or(u32::MAX));
}

fn put_bytes(b: &mut BytesMut, data: &[u8]) {
    b.put_u32(u32::try_from(data.len()).unwrap_or(u32::MAX));
    b.put_slice(data);
}

/// MAC `b` past its MAC slot, then `bound` (appended for one pass, then taken off).
fn seal(secret: &Secret, mut b: BytesMut, bound: Option<&[u8; MAC_LEN]>) -> ([u8; MAC_LEN], Bytes) {
    let len = b.len();
    b.extend_from_slice(bound.map_or(&[][..], |m| &m[..]));
    let mac = secret.mac(&b[MAC_LEN..]);
    b.truncate(len);
    b[..MAC_LEN].copy_from_slice(&mac);
    (mac, b.freeze())
}

/// A message's header, its names borrowed (a reply's are not needed).
struct Header<'a> {
    mac: [u8; MAC_LEN],
    timestamp_ms: u64,
    sender: &'a str,
    to: &'a str,
    body_at: usize,
}

fn parse_header(message: &[u8], kind: u8) -> Result<Header<'_>, WireError> {
    if message.len() < HEADER_LEN {
        return Err(WireError::Malformed);
    }
    let mut mac = [0u8; MAC_LEN];
    mac.copy_from_slice(&message[..MAC_LEN]);
    let mut r = &message[MAC_LEN..];
    if r.get_u8() != VERSION || r.get_u8() != kind {
        return Err(WireError::Malformed);
    }
    let timestamp_ms = r.get_u64();
    let _nonce = r.get_u64();
    let before = r.len();
    let sender = take_str(&mut r)?;
    let to = take_str(&mut r)?;
    Ok(Header {
        mac,
        timestamp_ms,
        sender,
        to,
        body_at: HEADER_LEN - 2 + (before - r.len()),
    })
}

/// A u16-length-prefixed UTF-8 string.
fn take_str<'a>(r: &mut &'a [u8]) -> Result<&'a str, WireError> {
    if r.len() < 2 {
        return Err(WireError::Malformed);
    }
    let len = usize::from(r.get_u16());
    if r.len() < len {
        return Err(WireError::Malformed);
    }
    let (s, rest) = r.split_at(len);
    *r = rest;
    std::str::from_utf8(s).map_err(|_| WireError::Malformed)
}

fn take_count(body: &mut Bytes) -> Result<usize, WireError> {
    if body.remaining() < 4 {
        return Err(WireError::Malformed);
    }
    Ok(body.get_u32() as usize)
}

fn take_bytes(body: &mut Bytes) -> Result<Bytes, WireError> {
    if body.remaining() < 4 {
        return Err(WireError::Malformed);
    }
    let len = body.get_u32() as usize;
    if body.remaining() < len {
        return Err(WireError::Malformed);
    }
    Ok(body.split_to(len))
}

#[cfg(test)]
mod tests;
