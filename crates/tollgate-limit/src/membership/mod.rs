//! Membership: how many gateways share the limits right now. It gives the L/N split its N
//! (`site = "split"` policies, and `on_store_error = "local"` while the store is down).
//!
//! Each node renews itself in one sorted set in the store every `heartbeat`, with an expiry
//! of three heartbeats; every renewal also drops expired members and returns the count. So
//! a joining node is counted by everyone within one heartbeat, a dying one leaves the set
//! within three and a node stopping cleanly at once; N is lowered only once the lower count
//! has held for a few beats ([`next_nodes`]), and each change of N rescales the split
//! states (`local/reload.rs`). With the memory store there is no shared place to meet: N
//! stays `[cluster] expected_nodes`. While the store is down the last N known is kept.
//! Where N decides nothing (no `split` policy, no local fallback, `peers` listed) a node
//! beats every ten heartbeats instead (`beats.rs`), its membership living as much longer.
//! The [`LimiterHandle`](crate::LimiterHandle) runs it: one beat before `start` returns,
//! then `beats.rs`'s loop until `shutdown` (or the handle's drop), which leaves the set.
//!
//! Membership is also the fleet's address book when `[cluster] peers` is empty: a node
//! with a `peer_listen` joins as `node_id#instance@peer_listen`, and each of its beats
//! reads back the addresses of the live members and gives them to the owner and gossip
//! sites' ring (`fleet/ring.rs`). So a fleet grows and shrinks as gateways start and stop,
//! with no config edit; a dead node leaves the ring when its membership expires (three
//! heartbeats), and the ring's own failure counts take it out of the live set sooner.
//! While the store is down the last peers known are kept, like N.
//!
//! What the member name relies on: a node id is 1 to 200 characters without whitespace
//! (`config/validate/store.rs`), so it may itself hold `#` or `@`; the instance is hex and a peer
//! address (`SocketAddr`'s text: `1.2.3.4:7946`, `[::1]:7946`) has neither. So the script
//! reads the node id as everything before the last `#`, and the address as what follows an
//! `@` after that `#`.

mod beats;
mod count;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Script;
use tracing::{info, warn};

use crate::handle::Running;
use crate::membership::count::{Lowering, MISSED_BEATS, next_nodes};
use crate::spec::Cluster;
use crate::store::{RedisStore, StoreError};

/// The membership script; see the file.
pub const MEMBERSHIP_LUA: &str = include_str!("membership.lua");

/// This node's membership: a background task of the
/// [`LimiterHandle`](crate::LimiterHandle), which starts and stops it.
pub(crate) struct Membership {
    /// The running limiter (a reload swaps it), rescaled when N changes, and membership's
    /// wake-up.
    running: Arc<Running>,
    /// The store's connection, breaker and metrics.
    store: Arc<RedisStore>,
    script: Script,
    /// The sorted set of members (one key, so it works on a cluster too).
    key: String,
    node_id: String,
    /// This process in the set: `node_id#instance`, unique even when two processes share
    /// a node id; `@peer_listen` follows when set, so other nodes can find this one.
    member: String,
    heartbeat: Duration,
    /// Other live processes with this node id at the last beat (warned about on change).
    twins: std::sync::atomic::AtomicU64,
    /// The ring's peers come from the members: `[cluster] peers` is empty and there is a
    /// fleet (`peer_listen` is set).
    peers_from_members: bool,
    /// The peer addresses of the last beat, sorted (logged on change).
    peers: Mutex<Vec<SocketAddr>>,
    /// The addresses more than one member registered at the last beat (warned about on
    /// change).
    shared: Mutex<Vec<SocketAddr>>,
    /// The last beat reached the store (the server's first decides when `run` beats next).
    last_ok: std::sync::atomic::AtomicBool,
    /// A count below N seen on the last beats, not yet believed ([`next_nodes`]).
    lowering: Mutex<Option<Lowering>>,
}

/// One reply of the script.
struct Reply {
    nodes: NonZeroU32,
    twins: u64,
    /// This member was in the set, unexpired, before the beat (`membership.lua`).
    intact: bool,
    /// The live members' peer addresses, when asked for.
    peers: Option<Vec<SocketAddr>>,
    /// The addresses among them that more than one member registered, sorted.
    shared: Vec<SocketAddr>,
}

impl Membership {
    /// This node (`cluster`) in the member set under `key_prefix`; `None` with the memory
    /// store: N is `expected_nodes` for good.
    pub(crate) fn new(
        cluster: &Cluster,
        key_prefix: &str,
        running: Arc<Running>,
    ) -> Option<Membership> {
        let limiter = running.limiter.load();
        let store = limiter.store()?.clone();
        let has_fleet = limiter.fleet().is_some();
        drop(limiter);
        let mut member = format!("{}#{}", cluster.node_id, instance());
        if let Some(addr) = cluster.peer_listen {
            member.push_str(&format!("@{addr}"));
        }
        Some(Membership {
            key: format!("{key_prefix}members"),
            node_id: cluster.node_id.clone(),
            member,
            heartbeat: cluster.heartbeat,
            twins: std::sync::atomic::AtomicU64::new(0),
            peers_from_members: cluster.peers.is_empty() && has_fleet,
            peers: Mutex::new(Vec::new()),
            shared: Mutex::new(Vec::new()),
            lowering: Mutex::new(None),
            last_ok: std::sync::atomic::AtomicBool::new(false),
            script: Script::new(MEMBERSHIP_LUA),
            running,
            store,
        })
    }

    /// Renew this node and rescale to the members counted; returns N.
    pub(crate) async fn beat(&self) -> Result<NonZeroU32, StoreError> {
        self.beat_apart(self.beats_apart()).await
    }

    /// A beat whose membership lives until `apart` heartbeats have been missed
    /// `MISSED_BEATS` times.
    pub(super) async fn beat_apart(&self, apart: u32) -> Result<NonZeroU32, StoreError> {
        let reply = self.call("join", apart).await;
        self.last_ok
            .store(reply.is_ok(), std::sync::atomic::Ordering::Release);
        let reply = reply?;
        let n = {
            let mut lowering = self.lowering.lock().unwrap_or_else(|e| e.into_inner());
            let current = self.running.limiter.load().nodes();
            next_nodes(current, reply.nodes, reply.intact, &mut lowering)
        };
        if let Some(peers) = reply.peers {
            self.set_peers(peers);
            self.warn_shared(reply.shared);
        }
        if self.running.set_nodes(n) {
            info!(nodes = n.get(), node_id = %self.node_id, "membership changed: limits rescaled to L/N");
        }
        // The store answers: pay what the outage fallback spent, even with no traffic to
        // pay it (`store/debts.rs`).
        self.store.start_paying();
        Ok(n)
    }

    /// Leave the set (a clean stop): the others rescale, and drop this node from their
    /// rings, on their next beat.
    pub(crate) async fn leave(&self) {
        let _ = self.call("leave", 1).await;
    }

    /// One script call; a `join`'s membership lives `MISSED_BEATS · apart` heartbeats.
    async fn call(&self, op: &'static str, apart: u32) -> Result<Reply, StoreError> {
        let ttl_ms = (self.heartbeat * MISSED_BEATS * apart).as_millis().max(1) as u64;
        let mut args = vec![op.to_string(), self.member.clone(), ttl_ms.to_string()];
        let with_peers = op == "join" && self.peers_from_members;
        if with_peers {
            args.push("peers".into());
        }
        let reply = self
            .store
            .eval_script_value(
                &self.script,
                "membership",
                std::slice::from_ref(&self.key),
                &args,
            )
            .await?;
        let reply = parse_reply(reply, with_peers).map_err(StoreError::Reply)?;
        self.warn_twins(reply.twins);
        Ok(reply)
    }

    /// Give the ring the members' peer addresses (this node stays in whatever they say).
    fn set_peers(&self, peers: Vec<SocketAddr>) {
        let running = self.running.limiter.load();
        let Some(fleet) = running.fleet() else {
            return;
        };
        fleet.ring.set_peers(&peers);
        let mut last = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if *last != peers {
            let list: Vec<String> = peers.iter().map(SocketAddr::to_string).collect();
            info!(peers = %list.join(","), node_id = %self.node_id, "fleet changed: peers from membership");
            *last = peers;
        }
    }

    /// Another live process shares this node id: counted apart (N stays right), but the
    /// operator most likely copied one config to every node. Said once per change.
    fn warn_twins(&self, twins: u64) {
        use std::sync::atomic::Ordering;
        if self.twins.swap(twins, Ordering::Relaxed) != twins && twins > 0 {
            warn!(node_id = %self.node_id, others = twins, "another gateway uses this [cluster] node_id; both are counted, but give each node its own");
        }
    }

    /// Two members registered one peer address (most often a loopback `peer_listen` on two
    /// hosts): the ring holds it once, a dial reaches one of them at most, and the other
    /// decides its keys alone. Said once per change.
    fn warn_shared(&self, shared: Vec<SocketAddr>) {
        if changed_to_some(&self.shared, shared.clone()) {
            let list: Vec<String> = shared.iter().map(SocketAddr::to_string).collect();
            warn!(addresses = %list.join(","), node_id = %self.node_id, "two gateways registered the same peer_listen in membership: they cannot both be reached; give each its own address (a gateway restarted without leaving shows here until its old membership expires, three of its beats)");
        }
    }
}

/// Store `now` in `last`; true when it changed and is not empty (time to warn).
fn changed_to_some(last: &Mutex<Vec<SocketAddr>>, now: Vec<SocketAddr>) -> bool {
    let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
    if *last == now {
        return false;
    }
    let warn = !now.is_empty();
    *last = now;
    warn
}

/// `{members, twins, intact}`, and with `peers` a fourth element: the live members' peer addresses
/// (sorted and deduplicated; a member whose address does not read is left out). The script
/// lists one address per member, and members are distinct: an address listed twice was
/// registered by two gateways, and goes to `shared`.
fn parse_reply(reply: redis::Value, with_peers: bool) -> Result<Reply, String> {
    use redis::Value;
    let shape = || format!("membership script: unexpected reply {reply:?}");
    let Value::Array(items) = &reply else {
        return Err(shape());
    };
    let (n, twins, intact, peers) = match (items.as_slice(), with_peers) {
        ([Value::Int(n), Value::Int(t), Value::Int(i)], false) => (*n, *t, *i, None),
        ([Value::Int(n), Value::Int(t), Value::Int(i), Value::Array(p)], true) => {
            (*n, *t, *i, Some(p))
        }
        _ => return Err(shape()),
    };
    let mut shared = Vec::new();
    let peers = peers.map(|p| {
        let mut addrs: Vec<SocketAddr> = p
            .iter()
            .filter_map(|v| redis::from_redis_value_ref::<String>(v).ok())
            .filter_map(|s| s.parse().ok())
            .collect();
        addrs.sort_unstable();
        shared = addrs
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        shared.dedup();
        addrs.dedup();
        addrs
    });
    Ok(Reply {
        nodes: u32::try_from(n)
            .ok()
            .and_then(NonZeroU32::new)
            .unwrap_or(NonZeroU32::MIN),
        twins: u64::try_from(twins).unwrap_or(0),
        intact: intact == 1,
        peers,
        shared,
    })
}

/// This process's instance id: random per start (the std hasher's random keys, the pid and
/// the time), so a restarted or copied node never takes another's place in the set.
fn instance() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    /// A `join … peers` reply listing `addrs`, one per member.
    fn reply(addrs: &[&str]) -> Reply {
        let list = addrs
            .iter()
            .map(|a| Value::BulkString(a.as_bytes().to_vec()))
            .collect();
        let value = Value::Array(vec![
            Value::Int(addrs.len() as i64),
            Value::Int(0),
            Value::Int(1),
            Value::Array(list),
        ]);
        parse_reply(value, true).expect("a reply")
    }

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter()
            .map(|a| a.parse().expect("an address"))
            .collect()
    }

    #[test]
    fn an_address_two_members_registered_is_shared() {
        let r = reply(&[
            "10.0.0.6:7946",
            "10.0.0.5:7946",
            "10.0.0.6:7946",
            "10.0.0.6:7946",
        ]);
        assert_eq!(r.peers, Some(addrs(&["10.0.0.5:7946", "10.0.0.6:7946"])));
        assert_eq!(
            r.shared,
            addrs(&["10.0.0.6:7946"]),
            "once, however many share it"
        );
        let r = reply(&[
            "127.0.0.1:7946",
            "10.0.0.5:7946",
            "127.0.0.1:7946",
            "10.0.0.5:7946",
        ]);
        assert_eq!(r.shared, addrs(&["10.0.0.5:7946", "127.0.0.1:7946"]));
        let r = reply(&[
            "10.0.0.5:7946",
            "10.0.0.6:7946",
            "[::1]:7946",
            "not an address",
        ]);
        assert_eq!(r.shared, Vec::<SocketAddr>::new(), "distinct addresses");
        let r = parse_reply(
            Value::Array(vec![Value::Int(2), Value::Int(0), Value::Int(1)]),
            false,
        )
        .expect("a reply without peers");
        assert!(r.peers.is_none() && r.shared.is_empty());
    }

    #[test]
    fn the_shared_warning_is_said_once_per_change() {
        let last = Mutex::new(Vec::new());
        let one = addrs(&["10.0.0.6:7946"]);
        let two = addrs(&["10.0.0.5:7946", "10.0.0.6:7946"]);
        assert!(!changed_to_some(&last, Vec::new()), "nothing shared");
        assert!(changed_to_some(&last, one.clone()));
        assert!(
            !changed_to_some(&last, one.clone()),
            "the same again: quiet"
        );
        assert!(changed_to_some(&last, two));
        assert!(!changed_to_some(&last, Vec::new()), "resolved: quiet");
        assert!(changed_to_some(&last, one), "back again: said again");
    }
}
