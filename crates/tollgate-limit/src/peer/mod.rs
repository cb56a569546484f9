//! The peer transport: how the gateways of a fleet ask each other without a store (the
//! foundation of the `owner` and `gossip` sites; nothing here decides a limit).
//!
//! Framed messages over plain TCP ([`frame`]): one long-lived connection per peer and
//! calling thread, one message in flight on it at a time, its reply the next frame back. A
//! message is a batch of items, length-delimited binary, sealed with keyed BLAKE3 over
//! (sender, recipient, timestamp, nonce, items) with the fleet's shared secret ([`wire`] has
//! the layout). The receiver drops messages that are forged, stale (timestamp more than 5 s
//! away), replayed or addressed to another peer, counts them in
//! `tollgate_peer_errors_total{kind="auth"}`, never hands them to its handler, and closes
//! the connection; a reply is bound to its request's MAC, so a reply cannot be forged or
//! replayed either.
//!
//! Not HTTP/2, which carried these messages first: with one message in flight per
//! connection, h2's streams, flow control and headers bought nothing, and its stream
//! bookkeeping was most of the asker's cost per message (BENCHMARKS.md: the owner row went
//! from 0.65× to 0.76× local throughput when the frames replaced it).
//!
//! [`PeerClient::call`] coalesces: while one message to a peer is in flight, new calls to it
//! queue and leave together in the next message (Gubernator's batching), so a burst of
//! concurrent calls costs a handful of round trips, not one each.
//!
//! Within `limit` this is a leaf: it imports nothing of tollgate.

mod client;
#[cfg(feature = "test-util")]
pub mod frame;
#[cfg(not(feature = "test-util"))]
pub(crate) mod frame;
mod mac;
mod metrics;
mod replay;
mod server;
mod waiters;
#[cfg(feature = "test-util")]
pub mod wire;
#[cfg(not(feature = "test-util"))]
pub(crate) mod wire;

use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;

pub use client::{MAX_BATCH_BYTES, MAX_BATCH_ITEMS, Observer, PeerClient, PeerError};
pub use metrics::PeerMetrics;
pub use server::PeerServer;
pub use wire::{Item, Op, Secret};

/// One authenticated message as the handler sees it: every item of the calls it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub items: Vec<Item>,
}

/// The handler's answer: exactly one reply per request item, in the same order (anything
/// else is answered 500 and the callers get an error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    pub items: Vec<Bytes>,
}

/// What a [`PeerServer`] serves. `from` is the sender's peer address as it signed it.
pub trait PeerHandler: Send + Sync + 'static {
    fn handle(&self, from: SocketAddr, request: Request) -> impl Future<Output = Response> + Send;
}
