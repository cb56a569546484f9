//! The `lease` decision site: the coordinator (Redis, or this process with the memory
//! store) holds each key's global GCRA state and grants nodes batches of cells as
//! reservations; a node spends them locally on their schedule, so a request costs a store
//! call only about once per batch.
//!
//! - `params.rs`: the numbers a leased key runs on;
//! - `grant.rs`: the coordinator's grant rule and the in-process coordinator (and the
//!   over-admission bound, proved there);
//! - `ask.rs`: what a node asks the coordinator for, and what a take gives a request;
//! - `book.rs`: one key's lease on one node: spend, expire, size the batch, refill;
//! - `size.rs`: how many cells a node asks for, and how long it stays away after an
//!   empty answer (pure functions of its demand);
//! - `busy.rs`: the key's grant rate, which the coordinator reports with every grant;
//! - `calm.rs`: whether a key's grant rate leaves room to ask generously, as a node sees it;
//! - `hold.rs`: long cells, and the holds that keep them within the bound;
//! - `returns.rs`: cells given back under overload, and the run that keeps them within it;
//! - `fair.rs`: the key's demand and a node's share of a contended key;
//! - `books.rs`: every book of this node, in lock shards bounded by `max_keys`;
//! - `site.rs`: what a request does with the books (take, wait, give back);
//! - `refill.rs`: one coordinator call, settled in its book even if its request is gone.

mod ask;
mod batch;
mod book;
mod books;
mod busy;
mod calm;
mod check;
mod fair;
mod grant;
mod hold;
mod params;
mod refill;
mod returns;
mod site;
mod size;

pub use ask::{RefillAsk, Take, Taken};
pub use book::LeaseBook;
pub use busy::{BUSY_TTLS, GrantRate, busy, busy_span};
pub(crate) use check::LeaseStep;
pub use grant::{Grant, MemoryCoordinator, grant};
pub use hold::Holds;
pub use params::LeaseParams;
pub use refill::script_args;
pub use returns::{Returned, Returns, grant_returning};
pub use site::{LEASE_LUA, LeaseItem, LeaseSite};
