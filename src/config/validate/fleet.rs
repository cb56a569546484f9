//! The validation pass for a fleet's reach: `[cluster] peer_listen` and `peers` checked
//! against each other, the policies and the store. Each rule catches a config where the
//! owner and gossip fleet silently splits: every node would decide every key alone (N× the
//! limit) with nothing in the logs.

use std::net::{IpAddr, SocketAddr};

use super::Validator;
use crate::config::raw::RawCluster;
use crate::config::{Cluster, Policy, Site, Store, StoreKind};

/// What the reach rules look at, from the typed config.
struct Fleet<'a> {
    peer_listen: Option<SocketAddr>,
    /// The typed `peers`: duplicates and unreadable entries already reported and left out.
    peers: &'a [SocketAddr],
    /// Every entry of `peers` was read and kept (none reported already).
    peers_read: bool,
    /// The first policy at an `owner` or `gossip` site: its name and site.
    peer_site: Option<(&'a str, &'static str)>,
    /// The store's URLs when it is Redis (membership then lists the fleet).
    store_urls: Option<&'a [String]>,
}

impl Validator {
    /// A loopback `peer_listen` in a fleet of other hosts, or a fleet of one at an owner or
    /// gossip site: refused, each with the key to fix.
    pub(super) fn fleet_reach(
        &mut self,
        raw: &RawCluster,
        cluster: &Cluster,
        policies: &[Policy],
        store: Option<&Store>,
    ) {
        let peer_site = policies.iter().find_map(|p| match p.site {
            Site::Owner | Site::Gossip => Some((p.name.as_str(), p.site.name())),
            _ => None,
        });
        let fleet = Fleet {
            peer_listen: cluster.peer_listen,
            peers: &cluster.peers,
            peers_read: raw.peers.len() == cluster.peers.len(),
            peer_site,
            store_urls: store
                .filter(|s| s.kind != StoreKind::Memory)
                .map(|s| s.urls.as_slice()),
        };
        check(&fleet, &mut |key, message| self.fail(key, message));
    }
}

/// Every problem of the fleet's reach goes to `fail` as (key, message).
fn check(fleet: &Fleet, fail: &mut dyn FnMut(&str, String)) {
    let Some(own) = fleet.peer_listen else {
        return;
    };
    let own_loopback = is_loopback(own.ip());
    if own_loopback && let Some(far) = fleet.peers.iter().find(|p| !is_loopback(p.ip())) {
        fail(
            "cluster.peer_listen",
            format!(
                "`{own}` is a loopback address but cluster.peers also names `{far}`, another \
                 host: the others cannot reach this node at the address it hashes itself as, \
                 so every node decides keys alone; name an address the other gateways can dial"
            ),
        );
    }
    if let Some((policy, site)) = fleet.peer_site
        && fleet.peers_read
        && fleet.peers == [own]
    {
        fail(
            "cluster.peers",
            format!(
                "a fleet of one: every key is decided here alone; list the other nodes, or \
                 use site = \"local\" (policies.{policy} has site = \"{site}\")"
            ),
        );
    }
    if own_loopback
        && fleet.peers.is_empty()
        && let Some(urls) = fleet.store_urls
        && let Some(i) = urls.iter().position(|u| url_is_loopback(u) == Some(false))
    {
        fail(
            "cluster.peer_listen",
            format!(
                "`{own}` is a loopback address but the fleet comes from the membership of a \
                 store other hosts can share (store.urls[{i}] is not loopback): every host \
                 would register the same {} address and none could reach another; name an \
                 address the other gateways can dial",
                own.ip()
            ),
        );
    }
}

/// 127.0.0.0/8 or ::1 (also written as an IPv4-mapped IPv6 address).
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Whether a store URL names this host; `None` when it does not read (reported already).
fn url_is_loopback(url: &str) -> Option<bool> {
    use redis::ConnectionAddr;
    let info = redis::IntoConnectionInfo::into_connection_info(url).ok()?;
    let host = match info.addr() {
        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host,
        ConnectionAddr::Unix(_) => return Some(true),
        _ => return None,
    };
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    Some(match name.parse::<IpAddr>() {
        Ok(ip) => is_loopback(ip),
        // RFC 6761: `localhost` and its subdomains resolve to loopback.
        Err(_) => name == "localhost" || name.ends_with(".localhost"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    /// Problems as `key: message`.
    fn problems(fleet: &Fleet) -> Vec<String> {
        let mut list = Vec::new();
        check(fleet, &mut |key, message| {
            list.push(format!("{key}: {message}"))
        });
        list
    }

    fn fleet<'a>(own: &str, peers: &'a [SocketAddr]) -> Fleet<'a> {
        Fleet {
            peer_listen: Some(addr(own)),
            peers,
            peers_read: true,
            peer_site: Some(("p", "owner")),
            store_urls: None,
        }
    }

    fn one(fleet: &Fleet, key: &str, fragment: &str) {
        let got = problems(fleet);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with(&format!("{key}: ")), "{got:?}");
        assert!(got[0].contains(fragment), "{got:?}");
    }

    #[test]
    fn a_loopback_fleet_or_one_of_real_hosts_passes() {
        let local = [addr("127.0.0.1:7946"), addr("127.0.0.2:7947")];
        assert!(problems(&fleet("127.0.0.1:7946", &local)).is_empty());
        let hosts = [addr("10.0.0.5:7946"), addr("10.0.0.6:7946")];
        assert!(problems(&fleet("10.0.0.5:7946", &hosts)).is_empty());
        let v6 = [addr("[::1]:7946"), addr("[::1]:7947")];
        assert!(problems(&fleet("[::1]:7946", &v6)).is_empty());
        let none = Fleet {
            peer_listen: None,
            ..fleet("127.0.0.1:7946", &[])
        };
        assert!(problems(&none).is_empty(), "no fleet at all");
    }

    #[test]
    fn a_loopback_peer_listen_among_other_hosts_is_refused() {
        let peers = [addr("127.0.0.1:7946"), addr("10.0.0.6:7946")];
        one(
            &fleet("127.0.0.1:7946", &peers),
            "cluster.peer_listen",
            "`10.0.0.6:7946`",
        );
        let peers = [addr("[::1]:7946"), addr("[2001:db8::6]:7946")];
        one(
            &fleet("[::1]:7946", &peers),
            "cluster.peer_listen",
            "loopback",
        );
        let peers = [addr("[::ffff:127.0.0.1]:7946"), addr("10.0.0.6:7946")];
        one(
            &fleet("[::ffff:127.0.0.1]:7946", &peers),
            "cluster.peer_listen",
            "loopback",
        );
    }

    #[test]
    fn a_fleet_of_one_is_refused_only_at_a_peer_site() {
        let me = [addr("10.0.0.5:7946")];
        one(
            &fleet("10.0.0.5:7946", &me),
            "cluster.peers",
            "a fleet of one",
        );
        let local_only = Fleet {
            peer_site: None,
            ..fleet("10.0.0.5:7946", &me)
        };
        assert!(problems(&local_only).is_empty());
        let unread = Fleet {
            peers_read: false,
            ..fleet("10.0.0.5:7946", &me)
        };
        assert!(
            problems(&unread).is_empty(),
            "the list was reported already"
        );
    }

    /// A loopback node whose fleet comes from the membership of a store at `urls`.
    fn from_store(urls: &[String]) -> Fleet<'_> {
        Fleet {
            store_urls: Some(urls),
            ..fleet("127.0.0.1:7946", &[])
        }
    }

    #[test]
    fn a_loopback_peer_listen_with_a_shared_store_is_refused() {
        let urls = |list: &[&str]| list.iter().map(|u| u.to_string()).collect::<Vec<_>>();
        let shared = urls(&["redis://127.0.0.1:6379", "redis://redis.internal:6379"]);
        one(&from_store(&shared), "cluster.peer_listen", "store.urls[1]");
        let v6 = urls(&["redis://[2001:db8::1]:6379"]);
        one(&from_store(&v6), "cluster.peer_listen", "store.urls[0]");
        let on_host = urls(&[
            "redis://127.0.0.1:6379",
            "redis://localhost:6380",
            "redis://[::1]:6381",
        ]);
        assert!(problems(&from_store(&on_host)).is_empty());
        let memory = fleet("127.0.0.1:7946", &[]);
        assert!(problems(&memory).is_empty(), "no store: no membership");
        let listed = [addr("127.0.0.1:7946"), addr("127.0.0.1:7947")];
        let static_fleet = Fleet {
            store_urls: Some(&shared),
            ..fleet("127.0.0.1:7946", &listed)
        };
        assert!(
            problems(&static_fleet).is_empty(),
            "peers listed, not from membership"
        );
    }
}
