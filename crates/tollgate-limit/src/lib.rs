//! The "limit" step of the request path: turning a request into rate-limit keys,
//! deciding each key against its policy's algorithm, and choosing where that
//! decision is made (the decision site).
//!
//! The [`clock`] every decision is timed by and the per-key [`algorithm`]s are
//! pure computation, free of I/O and of per-key maps, so the store layer can
//! choose its own locking and eviction while the admission math stays testable
//! with explicit timestamps.
//!
//! A front end (the gateway, the tower [`layer`] with feature `tower`, the rate limit
//! service) builds a [`spec::LimiterSpec`] — from its config, or in code with
//! [`spec::Policy::new`] and [`spec::LimiterSpec::in_memory`] — holds one [`LimiterHandle`],
//! and reads each request's [`Answer`] from [`Limiter::check_request`]. What only the
//! gateway's tests and benches read (the sites' state, the peer wire, membership's script)
//! is exported with the `test-util` feature alone.

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
pub mod rules;
pub mod shutdown;
mod site;
pub mod spec;
pub mod store_time;
mod tiers;
pub mod top;

pub use admission::{Admission, Admitted, Answer, Decision, Outcome, PolicyReport};
pub use carry::PolicyCarry;
pub use counted::{Counted, SentBytes};
pub use handle::LimiterHandle;
pub use limiter::{At, Checked, KeyAsk, KeyAskError, KeyResult, Keyed, Limiter, LimiterError};
pub use rules::SpecError;
pub(crate) mod deny_cache;
// Membership's Lua, read by the gateway's tests of the script; the handle runs it.
#[cfg(feature = "test-util")]
pub mod membership;
#[cfg(not(feature = "test-util"))]
mod membership;
pub mod peer;
pub mod store;

// The sites by their short names, as the gateway's tools (`simulate`: `fleet`, `lease`) name
// them; `central` and `local` only its tests and benches read (feature `test-util`).
#[cfg(feature = "test-util")]
pub use site::{central, local};
pub use site::{fleet, lease};
