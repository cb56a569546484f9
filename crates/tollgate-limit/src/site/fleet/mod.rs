//! The two decision sites without a store, where the gateways of a fleet ask each other
//! over the peer transport (`peer/`): **owner** (route by key: one node decides each key
//! exactly) and **gossip** (each node counts locally and tells the others what it spent).
//!
//! - [`ring`]: who is in the fleet, who answers, and which live peer owns a key.
//! - [`handler`]: what this node answers its peers, from its own local state.
//! - [`gossip`]: the cells this node admitted since its last push.
//! - [`report`]: how a push carries them to the peers (one report per policy).
//! - [`fresh`] and [`sync`]: a node whose view went stale (it stalled, its peers fell
//!   silent, a peer rejoined) hears its peers' counts of a gossip key before deciding it.
//! - [`rejoin`]: a node that may have been counted out (it started, stalled, or a peer's
//!   ping says so) owns no key until every peer counts it in again, then takes each of its
//!   owner keys up from the count of the node that decided it meanwhile.
//! - [`FleetSite`]: the request path's door to all of it (used by `owner_check.rs` and the
//!   local step); [`beat`]: its background loop, which pushes gossip, pings the peers and
//!   runs the rejoin rounds.
//!
//! Failure handling: a call that fails counts against its peer; after
//! [`ring::DOWN_AFTER`] failures in a row the peer leaves the live set and its keys move to
//! the peer that scored next for them, which starts them from full (at most one burst of
//! over-admission per moved key). Every peer, live or not, is pinged each heartbeat; one
//! answer brings it back, and a ping to a peer counted out tells it so: it hands its keys
//! back only once it has heard them spent (`rejoin.rs`), so the move back costs no burst.

mod beat;
mod codec;
mod fence;
mod fresh;
mod gossip;
mod gossip_check;
mod handler;
mod owner_check;
mod rejoin;
mod report;
pub mod ring;
mod sync;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prometheus_client::registry::Registry;
use tracing::warn;

use crate::peer::{Observer, Op, PeerClient, PeerError, PeerMetrics, PeerServer, Secret};
use crate::policy::PolicyRuntime;
use crate::site::local::LocalStore;
use crate::spec::Cluster;
pub use codec::{KeyItem, OwnerReply, fingerprint};
pub(crate) use gossip_check::GossipStep;
use handler::FleetHandler;
pub(crate) use owner_check::OwnerStep;
use rejoin::Rejoin;
use ring::Ring;

/// Why the owner of a key could not decide it.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("owner {owner}: {source}")]
    Peer {
        owner: SocketAddr,
        #[source]
        source: PeerError,
    },
    /// The owner runs a config without this owner policy.
    #[error("owner {owner} does not know policy `{policy}` as an owner policy (configs differ)")]
    Unknown { owner: SocketAddr, policy: Arc<str> },
}

impl FleetError {
    /// The `reason` label of `tollgate_fallback_decisions_total`: `peer_` and the
    /// transport's kind, or `peer_unknown_policy`.
    pub fn kind(&self) -> &'static str {
        match self {
            FleetError::Peer { source, .. } => match source {
                PeerError::Timeout => "peer_timeout",
                PeerError::Connect(_) => "peer_connect",
                PeerError::Send(_) => "peer_send",
                PeerError::Status(_) => "peer_status",
                PeerError::Auth => "peer_auth",
                PeerError::Decode => "peer_decode",
            },
            FleetError::Unknown { .. } => "peer_unknown_policy",
        }
    }
}

/// Which fleet sites `policies` use, as [`Ring::set_sites`] takes them.
fn fleet_sites(policies: &[PolicyRuntime]) -> u8 {
    policies.iter().fold(0, |bits, p| {
        bits | match p.spec.site {
            crate::spec::Site::Owner => ring::OWNER,
            crate::spec::Site::Gossip => ring::GOSSIP,
            _ => 0,
        }
    })
}

/// This node's place in the fleet.
pub struct FleetSite {
    pub ring: Arc<Ring>,
    client: PeerClient,
    secret: Secret,
    metrics: PeerMetrics,
    handler: Arc<FleetHandler>,
    outbox: gossip::Outbox,
    /// Whether the gossip view is stale, and the keys caught up since.
    fresh: Arc<fresh::Freshness>,
    /// The catch-up pulls in flight, one a key (`sync.rs`).
    pulls: sync::Pulls,
    /// Whether this node may have been counted out, and the owner keys handed back since.
    rejoin: Arc<Rejoin>,
    /// The bound of every peer call (the store `timeout`).
    timeout: Duration,
    /// Last time (Unix ms) a fleet configuration error was logged.
    mismatch_logged: std::sync::atomic::AtomicU64,
    gossip_interval: Duration,
    /// How often every peer is pinged.
    heartbeat: Duration,
}

impl FleetSite {
    /// `None` when `[cluster] peer_listen` is not set. Call inside the runtime that is to
    /// carry peer traffic. `timeout` bounds every call (the store `timeout`).
    pub fn new(
        cluster: &Cluster,
        timeout: Duration,
        local: Arc<LocalStore>,
        policies: Arc<[PolicyRuntime]>,
        registry: &mut Registry,
    ) -> Option<Arc<FleetSite>> {
        let me = cluster.peer_listen?;
        // Validation demands a secret of at least 32 bytes whenever peer_listen is set.
        let secret = Secret::new(cluster.peer_secret.as_deref()?)?;
        let metrics = PeerMetrics::register(registry);
        let outbox = gossip::Outbox::default();
        registry.register(
            "tollgate_gossip_dropped",
            "Cells admitted on gossip keys that were not reported to the peers (outbox full)",
            outbox.dropped.clone(),
        );
        registry.register(
            "tollgate_gossip_sent_cells",
            "Cells admitted on gossip keys and pushed to a peer, once per peer",
            outbox.sent.clone(),
        );
        let live = prometheus_client::metrics::gauge::Gauge::default();
        registry.register(
            "tollgate_peers_live",
            "Peers of the owner and gossip sites this node sees answering, itself included",
            live.clone(),
        );
        let ring = Arc::new(Ring::new(me, &cluster.peers, live));
        registry.register(
            "tollgate_peer_quarantined",
            "Whether this node is quarantined (1): it may have been counted out by its peers (after a start, a stall, or a peer's word) and waits for each to count it in; its owner keys are decided by the next owner meanwhile",
            ring.quarantine_gauge(),
        );
        let fresh = Arc::new(fresh::Freshness::new(
            cluster.gossip_interval,
            cluster.heartbeat,
        ));
        let (observed, stale) = (ring.clone(), fresh.clone());
        // The ring counts failed messages, not failed calls: one lost message that carried
        // many asks is one failure of its peer. A peer back in the live set may have
        // counted us out meanwhile and not pushed to us: our gossip view is stale.
        let observer: Observer = Box::new(move |peer, answered| match answered {
            true if observed.answered(peer) => stale.mark(),
            true => {}
            false => drop(observed.failed(peer)),
        });
        // A stall is a gap between the loop's ticks (every gossip interval or heartbeat,
        // whichever is shorter) long enough for a peer's calls to time out meanwhile.
        let tick = cluster.gossip_interval.min(cluster.heartbeat);
        let stall = crate::clock::duration_to_nanos(tick * 2 + timeout);
        let rejoin = Arc::new(Rejoin::new(stall, crate::clock::duration_to_nanos(timeout)));
        registry.register(
            "tollgate_peer_rejoins",
            "Times this node rejoined its peers after it may have been counted out (a start, a stall, a peer's ping saying so): its owner keys were decided by the next owner meanwhile",
            rejoin.rejoins.clone(),
        );
        let client =
            PeerClient::observed(me, secret.clone(), timeout, metrics.clone(), Some(observer));
        let handler = FleetHandler::new(
            local,
            policies.clone(),
            me,
            fresh.clone(),
            ring.clone(),
            rejoin.clone(),
            client.clone(),
        );
        let site = Arc::new(FleetSite {
            ring,
            client,
            secret,
            metrics,
            mismatch_logged: std::sync::atomic::AtomicU64::new(0),
            handler: Arc::new(handler),
            outbox,
            fresh,
            pulls: sync::Pulls::default(),
            rejoin,
            timeout,
            gossip_interval: cluster.gossip_interval,
            heartbeat: cluster.heartbeat,
        });
        site.set_window(&policies);
        site.ring.set_sites(fleet_sites(&policies));
        // A node that starts may be one its peers counted out (a restart): it hears each of
        // them before it decides a key (the rounds run with `run`).
        site.rejoin.begin(&site.ring, "start");
        Some(site)
    }

    /// Listen on `peer_listen` (a fixed port: the other nodes' `peers` name it).
    pub async fn serve(&self) -> std::io::Result<PeerServer> {
        PeerServer::bind(
            self.ring.me(),
            self.secret.clone(),
            self.handler.clone(),
            self.metrics.clone(),
        )
        .await
    }

    /// Ask `owner` to decide `items` (one message, coalesced with other requests' asks).
    pub async fn ask(
        &self,
        owner: SocketAddr,
        items: &[KeyItem],
    ) -> Result<Vec<OwnerReply>, FleetError> {
        let data = items.iter().map(KeyItem::encode).collect();
        let replies = match self.client.call(owner, Op::Ask, data).await {
            Ok(replies) => replies,
            Err(source) => return Err(FleetError::Peer { owner, source }),
        };
        let mut answers = Vec::with_capacity(items.len());
        for (item, reply) in items.iter().zip(replies) {
            match OwnerReply::decode(reply) {
                Some(OwnerReply::Unknown) => {
                    self.metrics.error("config");
                    return Err(FleetError::Unknown {
                        owner,
                        policy: item.policy.clone(),
                    });
                }
                Some(a) => answers.push(a),
                None => {
                    return Err(FleetError::Peer {
                        owner,
                        source: PeerError::Decode,
                    });
                }
            }
        }
        Ok(answers)
    }

    /// Give back reservations at their owners, in the background.
    pub fn refund(self: &Arc<Self>, items: Vec<(SocketAddr, KeyItem)>) {
        self.send(Op::Refund, items);
    }

    /// Spend cells at their owners whether or not they conform, in the background.
    pub fn debit(self: &Arc<Self>, items: Vec<(SocketAddr, KeyItem)>) {
        self.send(Op::Debit, items);
    }

    /// `op` for each item at its owner, one message per owner, in the background.
    fn send(self: &Arc<Self>, op: Op, items: Vec<(SocketAddr, KeyItem)>) {
        let mut by_owner: Vec<(SocketAddr, Vec<Bytes>)> = Vec::new();
        for (owner, item) in items {
            match by_owner.iter_mut().find(|(o, _)| *o == owner) {
                Some((_, v)) => v.push(item.encode()),
                None => by_owner.push((owner, vec![item.encode()])),
            }
        }
        for (owner, data) in by_owner {
            let client = self.client.clone();
            tokio::spawn(async move {
                if let Err(e) = client.call(owner, op, data).await {
                    warn!(peer = %owner, op = op.label(), error = %e, "owner call failed: the key keeps its state until it refills");
                }
            });
        }
    }

    /// Give back `item`'s cells at `owner` and wait for its answer (the admin API's reset).
    pub async fn refund_now(&self, owner: SocketAddr, item: KeyItem) -> Result<(), PeerError> {
        self.client
            .call(owner, Op::Refund, vec![item.encode()])
            .await
            .map(drop)
    }

    /// This node admitted `cost` cells of a gossip key of `policy`.
    pub fn record(&self, policy: &Arc<str>, headroom: u32, key: &str, cost: u32) {
        self.outbox.record(policy, headroom, key, cost);
    }

    /// A reloaded config: answer peers from its policies and state. Pending gossip is
    /// pushed under the names it was recorded with, at the numbers running then.
    pub fn rebind(self: &Arc<Self>, local: Arc<LocalStore>, policies: Arc<[PolicyRuntime]>) {
        self.push_gossip();
        self.ring.set_sites(fleet_sites(&policies));
        self.set_window(&policies);
        self.handler.rebind(local, policies);
    }
}
