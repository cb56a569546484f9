//! What a node asks the coordinator for (`book.rs` decides it, `refill.rs` sends it), and
//! what a request's take of a lease gives it.

use super::returns::Returned;
use crate::clock::Nanos;

/// One call to make: up to `want` cells conforming within `lead` ns of the coordinator's now;
/// or, when `long > 0` and the key has room for them, `long` long cells (`hold.rs`) instead.
/// `returned`: cells given back with the call (`returns.rs`). `demand`: the requests (cells)
/// the node counted for the key since its previous call, for the key's demand (`fair.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefillAsk {
    pub want: u32,
    pub lead: Nanos,
    pub long: u32,
    pub returned: Returned,
    pub demand: u32,
}

/// When the cells of one take may be spent again if given back (ticks): from the earliest
/// conform time among them until the earliest expiry among them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Taken {
    pub conform: i128,
    pub expires: i128,
}

/// What one request got from a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Spent; `remaining` cells conform now.
    Admitted { remaining: u64 },
    /// Not enough conforming cells; `retry_after` is a hint (ns).
    Denied { retry_after: Nanos },
}
