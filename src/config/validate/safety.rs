//! The validation pass for the request-safety keys: connection and body bounds, the `Via`
//! pseudonym, per-upstream connection caps, and each route's upgrades and body limit.

use std::borrow::Cow;
use std::hash::Hasher;
use std::num::NonZeroUsize;
use std::time::Duration;

use siphasher::sip::SipHasher13;

use super::Validator;
use crate::config::PathRules;
use crate::config::raw::{RawRoute, RawServer};
use crate::normalize::{PathError, normalize_path};

/// Longest timeout tokio's timer (and so `serve`) can run; beyond it `check` refuses, so a
/// config that passes `check` never makes `serve` panic.
const LONGEST_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Most open client connections per process: far above what one process's file
/// descriptors allow, so it only rejects typos.
const MOST_CONNECTIONS: u64 = 10_000_000;

/// The server's safety values, before they join `Server`.
pub(super) struct ServerSafety {
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub paths: PathRules,
    pub via_pseudonym: Option<String>,
}

/// A route's safety values, before they join its `Route`.
pub(super) struct RouteSafety {
    pub upgrades: Vec<String>,
    pub max_body_bytes: Option<u64>,
}

impl Validator {
    /// A duration that must also fit the timer: more than zero, at most a year.
    pub(super) fn timeout(&mut self, key: &str, s: &str) -> Option<Duration> {
        let d = self.duration(key, s)?;
        if d > LONGEST_TIMEOUT {
            self.fail(key, "must be at most a year (365d)");
            return None;
        }
        Some(d)
    }

    pub(super) fn server_safety(&mut self, s: &RawServer) -> Option<ServerSafety> {
        let idle_timeout = self.timeout("server.idle_timeout", &s.idle_timeout);
        let body_timeout = self.timeout("server.body_timeout", &s.body_timeout);
        if !(1..=MOST_CONNECTIONS).contains(&s.max_connections) {
            self.fail(
                "server.max_connections",
                format!(
                    "{} is out of range: use 1 to {MOST_CONNECTIONS}",
                    s.max_connections
                ),
            );
        }
        self.body_limit("server.max_body_bytes", s.max_body_bytes);
        let via_pseudonym = s.via_pseudonym.clone();
        if let Some(p) = &via_pseudonym
            && !is_token(p, 64)
        {
            self.fail(
                "server.via_pseudonym",
                "must be 1 to 64 letters, digits or `!#$%&'*+-.^_`|~` (an HTTP token)",
            );
        }
        Some(ServerSafety {
            idle_timeout: idle_timeout?,
            body_timeout: body_timeout?,
            max_connections: s.max_connections.clamp(1, MOST_CONNECTIONS) as usize,
            paths: PathRules {
                escaped_slashes: s.escaped_slashes,
                path_parameters: s.path_parameters,
            },
            via_pseudonym,
        })
    }

    /// `true` when `value` is an acceptable body limit (or absent).
    fn body_limit(&mut self, key: &str, value: Option<u64>) -> bool {
        match value {
            Some(0) => {
                self.fail(key, "must be at least 1 (leave it out for no limit)");
                false
            }
            _ => true,
        }
    }

    /// A route prefix must be canonical: requests are matched after normalization, so a
    /// prefix like `/api//login` or `/%61pi` could never match anything.
    pub(super) fn path_prefix(&mut self, key: &str, prefix: &str, rules: PathRules) {
        match normalize_path(prefix, rules) {
            Ok(Cow::Borrowed(_)) => {}
            Ok(Cow::Owned(canonical)) => self.fail(
                key,
                format!(
                    "`{prefix}` is not canonical, so no request can match it: write `{canonical}`"
                ),
            ),
            Err(PathError::NotOrigin) => self.fail(key, "must start with `/`"),
            Err(e) => self.fail(
                key,
                format!("`{prefix}`: {e}, so every request for it is refused"),
            ),
        }
    }

    pub(super) fn upstream_max_connections(&mut self, name: &str, n: u64) -> NonZeroUsize {
        let key = format!("upstreams.{name}.max_connections");
        if !(1..=100_000).contains(&n) {
            self.fail(&key, format!("{n} is out of range: use 1 to 100000"));
        }
        NonZeroUsize::new(n.clamp(1, 100_000) as usize).unwrap_or(NonZeroUsize::MIN)
    }

    pub(super) fn route_safety(
        &mut self,
        at: &dyn Fn(&str) -> String,
        r: &RawRoute,
        server_max_body: Option<u64>,
    ) -> RouteSafety {
        let mut upgrades = Vec::new();
        for (j, u) in r.upgrades.iter().enumerate() {
            let key = at(&format!("upgrades[{j}]"));
            let lower = u.to_ascii_lowercase();
            if lower == "h2c" {
                self.fail(
                    &key,
                    "`h2c` is never forwarded: requests inside it would skip every policy",
                );
            } else if !is_token(&lower, 64) {
                self.fail(
                    &key,
                    format!("`{u}` is not a protocol name like \"websocket\""),
                );
            } else {
                upgrades.push(lower);
            }
        }
        let own = r
            .max_body_bytes
            .filter(|_| self.body_limit(&at("max_body_bytes"), r.max_body_bytes));
        RouteSafety {
            upgrades,
            max_body_bytes: own.or(server_max_body),
        }
    }
}

/// The default `Via` pseudonym: stable for a node, derived from its id without revealing it
/// (the id holds the host name, which a `Via` on every response would leak).
pub(super) fn default_via_pseudonym(node_id: &str) -> String {
    let mut h = SipHasher13::new_with_keys(0x746f_6c6c, 0x6761_7465);
    h.write(node_id.as_bytes());
    format!("tollgate-{:08x}", h.finish() as u32)
}

/// An HTTP token (RFC 9110 §5.6.2) of at most `max` characters.
fn is_token(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
