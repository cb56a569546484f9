//! The validation pass for the peer keys of `[cluster]`: `peer_listen`, `peers`,
//! `peer_secret_env` and `gossip_interval`, where the gateways of a fleet reach each other
//! without a store (the `owner` and `gossip` sites).

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use super::Validator;
use crate::config::raw::RawCluster;
use crate::config::{Cluster, Policy, Site};

/// The shortest accepted peer secret: the 256-bit key the peer MAC (keyed BLAKE3,
/// `limit/peer/mac.rs`) is derived from; a shorter, human-chosen one could be guessed
/// offline from one captured message.
const MIN_PEER_SECRET_BYTES: usize = 32;

/// The accepted range of `gossip_interval`.
const GOSSIP_INTERVAL: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(10);

/// `gossip_interval` when not given (and the stand-in after a problem was reported).
const DEFAULT_GOSSIP_INTERVAL: Duration = Duration::from_millis(20);

/// The peer keys of `[cluster]`, typed.
pub(super) struct Peers {
    pub peer_listen: Option<SocketAddr>,
    pub peers: Vec<SocketAddr>,
    pub peer_secret: Option<Vec<u8>>,
    pub gossip_interval: Duration,
}

impl Validator {
    /// An `owner` or `gossip` policy needs a fleet to talk to: `peer_listen` (and with it
    /// the secret); with no `peers` list the fleet comes from membership, which needs Redis.
    pub(super) fn peer_sites(&mut self, policies: &[Policy], cluster: &Cluster, redis: bool) {
        for p in policies {
            let site = match p.site {
                Site::Owner | Site::Gossip => p.site.name(),
                _ => continue,
            };
            if cluster.peer_listen.is_some() && cluster.peers.is_empty() && !redis {
                self.fail(
                    &format!("policies.{}.site", p.name),
                    format!(
                        "\"{site}\" needs to know the fleet: list it in [cluster] peers, or use \
                         a redis store (its membership lists the fleet)"
                    ),
                );
            }
            if cluster.peer_listen.is_none() {
                self.fail(
                    &format!("policies.{}.site", p.name),
                    format!(
                        "\"{site}\" needs the fleet's peer transport: set [cluster] \
                         peer_listen and peer_secret_env (and peers, or a redis store whose \
                         membership lists the fleet)"
                    ),
                );
            }
        }
    }

    /// The peer keys of `[cluster]`, the secret read from the process environment.
    pub(super) fn peers(&mut self, raw: &RawCluster) -> Peers {
        check(raw, |var| std::env::var_os(var), &mut |key, message| {
            self.fail(key, message)
        })
    }
}

/// Every problem of the peer keys goes to `fail` as (key, message); `env` reads variables.
fn check(
    raw: &RawCluster,
    env: impl Fn(&str) -> Option<OsString>,
    fail: &mut dyn FnMut(&str, String),
) -> Peers {
    let peer_listen = raw
        .peer_listen
        .as_deref()
        .and_then(|s| peer_addr("cluster.peer_listen", s, fail));
    let mut peers = Vec::with_capacity(raw.peers.len());
    let mut seen: HashMap<SocketAddr, usize> = HashMap::new();
    // An entry already reported may be this node's: then "not in peers" would be noise.
    let mut unreadable = false;
    for (i, s) in raw.peers.iter().enumerate() {
        let key = format!("cluster.peers[{i}]");
        let Some(addr) = peer_addr(&key, s, fail) else {
            unreadable = true;
            continue;
        };
        if let Some(first) = seen.get(&addr) {
            fail(
                &key,
                format!("`{addr}` is a duplicate of cluster.peers[{first}]"),
            );
            continue;
        }
        seen.insert(addr, i);
        peers.push(addr);
    }
    if !raw.peers.is_empty() {
        match (&raw.peer_listen, peer_listen) {
            (None, _) => fail(
                "cluster.peer_listen",
                "required when cluster.peers is set: the list names the whole fleet, this \
                 node's peer_listen included"
                    .into(),
            ),
            (Some(_), Some(own)) if !unreadable && !seen.contains_key(&own) => fail(
                "cluster.peer_listen",
                format!(
                    "`{own}` is not in cluster.peers: the list names the whole fleet, this \
                     node included"
                ),
            ),
            _ => {}
        }
    }
    let wants_secret = raw.peer_listen.is_some() || !raw.peers.is_empty();
    let peer_secret = match &raw.peer_secret_env {
        None => {
            if wants_secret {
                fail(
                    "cluster.peer_secret_env",
                    "required when peer_listen or peers is set: every peer message is signed \
                     with this shared secret"
                        .into(),
                );
            }
            None
        }
        Some(var) => peer_secret(var, env(var), fail),
    };
    let gossip_interval = match humantime::parse_duration(&raw.gossip_interval) {
        Ok(d) if GOSSIP_INTERVAL.contains(&d) => d,
        Ok(_) => {
            fail(
                "cluster.gossip_interval",
                "must be at least 1ms and at most 10s".into(),
            );
            DEFAULT_GOSSIP_INTERVAL
        }
        Err(_) => {
            fail(
                "cluster.gossip_interval",
                format!(
                    "`{}` is not a duration like \"5ms\" or \"20ms\"",
                    raw.gossip_interval
                ),
            );
            DEFAULT_GOSSIP_INTERVAL
        }
    };
    Peers {
        peer_listen,
        peers,
        peer_secret,
        gossip_interval,
    }
}

/// An address other gateways can dial: a wildcard address or port 0 names no one.
fn peer_addr(key: &str, s: &str, fail: &mut dyn FnMut(&str, String)) -> Option<SocketAddr> {
    match SocketAddr::from_str(s) {
        Err(_) => {
            fail(
                key,
                format!("`{s}` is not an address like \"127.0.0.1:7946\""),
            );
            None
        }
        Ok(a) if a.ip().is_unspecified() || a.port() == 0 => {
            fail(
                key,
                format!(
                    "`{s}` cannot be dialled by other peers: name this node's own address and \
                     a port other than 0"
                ),
            );
            None
        }
        Ok(a) => Some(a),
    }
}

/// The secret's bytes; its value never appears in a message.
fn peer_secret(
    var: &str,
    value: Option<OsString>,
    fail: &mut dyn FnMut(&str, String),
) -> Option<Vec<u8>> {
    let bytes = value.map(OsString::into_encoded_bytes).unwrap_or_default();
    if bytes.is_empty() {
        fail(
            "cluster.peer_secret_env",
            format!("environment variable `{var}` is not set"),
        );
        return None;
    }
    if bytes.len() < MIN_PEER_SECRET_BYTES {
        fail(
            "cluster.peer_secret_env",
            format!(
                "environment variable `{var}` holds {} bytes: the shared secret needs at least \
                 {MIN_PEER_SECRET_BYTES}",
                bytes.len()
            ),
        );
        return None;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    /// Problems as `key: message`, with `TG_SECRET` = `secret` in the environment.
    fn problems(toml: &str, secret: Option<&str>) -> Vec<String> {
        let raw: RawCluster = toml::from_str(toml).expect("a cluster table");
        let env = |var: &str| {
            (var == "TG_SECRET")
                .then_some(secret)
                .flatten()
                .map(Into::into)
        };
        let mut list = Vec::new();
        check(&raw, env, &mut |key, message| {
            list.push(format!("{key}: {message}"))
        });
        list
    }

    fn one(toml: &str, secret: Option<&str>, key: &str) {
        let got = problems(toml, secret);
        assert_eq!(got.len(), 1, "{toml}: {got:?}");
        assert!(got[0].starts_with(&format!("{key}: ")), "{toml}: {got:?}");
    }

    const FLEET: &str = "peer_listen = \"127.0.0.1:7946\"\n\
                         peers = [\"127.0.0.1:7946\", \"127.0.0.1:7947\"]\n\
                         peer_secret_env = \"TG_SECRET\"\n";

    #[test]
    fn a_fleet_with_its_secret_passes() {
        assert_eq!(problems(FLEET, Some(SECRET)), Vec::<String>::new());
        assert_eq!(problems("", None), Vec::<String>::new(), "no peers at all");
        let raw: RawCluster = toml::from_str(FLEET).expect("a cluster table");
        let p = check(&raw, |_| Some(SECRET.into()), &mut |k, m| {
            panic!("{k}: {m}")
        });
        assert_eq!(p.peers.len(), 2);
        assert_eq!(p.peer_listen, Some(p.peers[0]));
        assert_eq!(p.peer_secret.as_deref(), Some(SECRET.as_bytes()));
        assert_eq!(p.gossip_interval, Duration::from_millis(20), "the default");
    }

    #[test]
    fn own_address_must_be_in_the_fleet() {
        let t = FLEET.replace(
            "peer_listen = \"127.0.0.1:7946\"",
            "peer_listen = \"127.0.0.1:7948\"",
        );
        one(&t, Some(SECRET), "cluster.peer_listen");
        let t = FLEET.replace("peer_listen = \"127.0.0.1:7946\"\n", "");
        one(&t, Some(SECRET), "cluster.peer_listen");
    }

    #[test]
    fn duplicate_peers_are_named() {
        let t = FLEET.replace(
            "\"127.0.0.1:7947\"]",
            "\"127.0.0.1:7947\", \"127.0.0.1:7946\"]",
        );
        one(&t, Some(SECRET), "cluster.peers[2]");
    }

    #[test]
    fn peers_need_a_long_enough_secret() {
        let t = FLEET.replace("peer_secret_env = \"TG_SECRET\"\n", "");
        one(&t, Some(SECRET), "cluster.peer_secret_env");
        one(
            "peer_listen = \"127.0.0.1:7946\"",
            None,
            "cluster.peer_secret_env",
        );
        one(FLEET, None, "cluster.peer_secret_env");
        one(FLEET, Some(""), "cluster.peer_secret_env");
        one(FLEET, Some(&SECRET[1..]), "cluster.peer_secret_env");
    }

    #[test]
    fn addresses_must_be_dialable() {
        one(
            "peers = [\"nowhere\"]\npeer_listen = \"127.0.0.1:1\"\npeer_secret_env = \"TG_SECRET\"",
            Some(SECRET),
            "cluster.peers[0]",
        );
        let t = FLEET.replace(
            "peer_listen = \"127.0.0.1:7946\"",
            "peer_listen = \"0.0.0.0:7946\"",
        );
        one(&t, Some(SECRET), "cluster.peer_listen");
    }

    #[test]
    fn gossip_interval_is_bounded() {
        for (interval, ok) in [
            ("1ms", true),
            ("10s", true),
            ("999us", false),
            ("11s", false),
        ] {
            let t = format!("gossip_interval = \"{interval}\"");
            assert_eq!(problems(&t, None).is_empty(), ok, "{interval}");
        }
        one("gossip_interval = \"0s\"", None, "cluster.gossip_interval");
    }
}
