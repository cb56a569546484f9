//! The "limit" step of the request path: turning a request into rate-limit keys,
//! deciding each key against its policy's algorithm, and choosing where that
//! decision is made (the decision site).
//!
//! The [`clock`] every decision is timed by and the per-key [`algorithm`]s are
//! pure computation, free of I/O and of per-key maps, so the store layer can
//! choose its own locking and eviction while the admission math stays testable
//! with explicit timestamps.

pub(crate) mod admission;
pub mod algorithm;
mod ask;
mod carry;
mod check;
pub mod clock;
mod cost;
mod counted;
mod handle;
mod in_code;
pub mod inspect;
pub mod keys;
#[cfg(feature = "tower")]
pub mod layer;
pub mod limiter;
pub mod metrics;
pub mod permit;
pub mod policy;
mod route_limits;
pub mod shutdown;
pub mod site;
pub mod spec;
pub mod store_time;
mod tiers;
pub mod top;

pub use admission::{Admission, Admitted, Answer, Decision, Outcome, PolicyReport};
pub use carry::PolicyCarry;
pub use counted::{Counted, SentBytes};
pub use handle::LimiterHandle;
pub use in_code::SpecError;
pub use limiter::{At, Checked, KeyAsk, KeyAskError, KeyResult, Keyed, Limiter, LimiterError};
pub(crate) mod deny_cache;
pub mod membership;
pub mod peer;
pub mod store;

// The sites by their short names, as the gateway, its tests and benches name them.
pub use site::{central, fleet, lease, local};
