//! Several gateways as a fleet: the `owner` and `gossip` sites on real processes, restarts,
//! stalls and config skew, request-side features and spend on peer sites, membership (the
//! address book; `membership.lua` alone is the limiter's own test), and the red-team attacks
//! on the peer transport (its own round trips are the limiter's test: `crates/tollgate-limit/tests/peer/`).

#[path = "../common/mod.rs"]
mod common;

mod features_fleet;
mod fleet_config_skew;
mod fleet_gossip;
mod fleet_hand_back;
mod fleet_owner;
mod fleet_owner_stop;
mod fleet_restarts;
mod fleet_stall;
mod membership_peers;
mod peer_wire_attacks;
mod spend_fleet;
