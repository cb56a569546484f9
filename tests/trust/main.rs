//! What the gateway believes about a client, and what a client can lie about: client
//! identity behind trusted proxies, protected header and token spellings (with the
//! differential tests against real Python readers, of header values and of login bodies),
//! JWT accounts, and the attacks on key parts, tiers and spend.

#[path = "../common/mod.rs"]
mod common;

mod body_readers;
mod client_identity;
mod differential;
mod header_spellings;
mod jwt;
mod key_parts_attacks;
mod spend_attacks;
mod tiers_attacks;
mod token_spellings;
