//! The limiter as a process runs it: the one [`LimiterHandle`] the gateway (or any caller)
//! holds. It owns what used to be the caller's to get right: the swap of a reloaded
//! limiter, N of the L/N split and the lock that orders the two (`running.rs`), and the
//! limiter's background tasks — the membership heartbeat (`membership/`) and the fleet's
//! loop of gossip pushes, pings and rejoin rounds (`site/fleet/beat.rs`) — with their
//! shutdown. As mini-redis's `DbDropGuard` owns its purge task, dropping the handle stops
//! them too.
//!
//! Not here: the tasks a request or the store starts and that end on their own (lease
//! refills, refunds, a breaker's recovery pings, a debt payment), and the peer listener,
//! which the server binds before serving and closes after its workers drained.

mod running;
#[cfg(test)]
pub(crate) mod tests;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::Guard;
use prometheus_client::registry::Registry;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tracing::warn;

use crate::carry::PolicyCarry;
use crate::clock::Clock;
use crate::limiter::{Limiter, LimiterError};
use crate::membership::Membership;
use crate::shutdown::Shutdown;
use crate::spec::{Cluster, LimiterSpec};
pub(crate) use running::Running;

/// The running limiter, its reloads, N and its background tasks. Build it once per
/// process; [`LimiterHandle::start`] the tasks once the store connection is warm;
/// [`LimiterHandle::shutdown`] them before the process ends (or drop the handle).
pub struct LimiterHandle {
    /// The limiter, the nodes lock and membership's wake-up, shared with the tasks.
    running: Arc<Running>,
    /// This node as membership names it (`[cluster]`): read once at start, like the store
    /// (a reload may not change `[cluster]`).
    cluster: Cluster,
    /// The store's `key_prefix`: membership's set lives under it.
    key_prefix: String,
    /// Set by the first [`LimiterHandle::start`]: tasks start once.
    started: AtomicBool,
    /// The background tasks and their stop signal, once started; taken by `shutdown`.
    tasks: Mutex<Option<Tasks>>,
}

/// Started background tasks: every one watches `stop`.
struct Tasks {
    stop: broadcast::Sender<()>,
    set: JoinSet<()>,
}

impl LimiterHandle {
    /// The limiter of `spec` (as [`Limiter::new`]), no task started yet.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate_limit::spec::{AlgorithmName, KeyPart, LimiterSpec, Policy};
    /// use tollgate_limit::{LimiterHandle, clock::SystemClock};
    ///
    /// let per_ip = Policy::new("per_ip", vec![KeyPart::Ip], AlgorithmName::Gcra, 10, Duration::from_secs(1))?;
    /// let spec = LimiterSpec::in_memory(vec![per_ip]).route("api", &["per_ip"])?;
    /// let registry = &mut prometheus_client::registry::Registry::default();
    /// let limiter = LimiterHandle::new(spec, Arc::new(SystemClock::new()), registry)?;
    /// assert_eq!(limiter.nodes().get(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(
        spec: impl Into<LimiterSpec>,
        clock: Arc<dyn Clock>,
        registry: &mut Registry,
    ) -> Result<LimiterHandle, LimiterError> {
        let spec = spec.into();
        let (cluster, key_prefix) = (spec.cluster.clone(), spec.store.key_prefix.clone());
        let limiter = Limiter::new(spec, clock, registry)?;
        Ok(LimiterHandle {
            running: Arc::new(Running::new(limiter)),
            cluster,
            key_prefix,
            started: AtomicBool::new(false),
            tasks: Mutex::new(None),
        })
    }

    /// The limiter that decides now (the request path's one atomic load).
    pub fn load(&self) -> Guard<Arc<Limiter>> {
        self.running.limiter.load()
    }

    /// The limiter that decides now, to keep (a worker's request path holds it until its
    /// next rebuild).
    pub fn current(&self) -> Arc<Limiter> {
        self.running.limiter.load_full()
    }

    /// N of the L/N split now (membership's count, else `expected_nodes`).
    pub fn nodes(&self) -> NonZeroU32 {
        self.load().nodes()
    }

    /// Build the limiter of `spec` on the running one's state ([`Limiter::reload`]: each
    /// kept policy's very state; the same `[store]` and `[cluster]`) and swap it in, at
    /// this node's N: a change of N waits for the swap and lands on the new limiter. A
    /// reload that makes N decide wakes membership to beat at once. Returns the new
    /// limiter and what each policy kept; on an error nothing changed.
    pub fn reload(
        &self,
        spec: impl Into<LimiterSpec>,
    ) -> Result<(Arc<Limiter>, Vec<PolicyCarry>), LimiterError> {
        let held = self.running.hold_nodes();
        let old = self.running.limiter.load_full();
        let (limiter, carried) = old.reload(spec)?;
        let limiter = Arc::new(limiter);
        // Membership beat seldom while N decided nothing: it beats now, once the new
        // limiter runs, so the beat is spaced for it and its N lands on it.
        let wake = limiter.decides_on_nodes() && !old.decides_on_nodes();
        self.running.limiter.store(limiter.clone());
        drop(held);
        if wake {
            self.running.beat_now.notify_one();
        }
        Ok((limiter, carried))
    }

    /// Start the background tasks (once; later calls do nothing). With a store, membership
    /// beats once before this returns, so `split` policies start at the right N (a failed
    /// first beat is logged: N stays `expected_nodes` until the store answers); with a
    /// fleet, its loop starts, and without a store the fleet's live peers are N. Call it on
    /// the runtime the tasks should run on, once this thread's store connection is warm
    /// ([`Limiter::warm`]).
    pub async fn start(&self) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let (stop, _) = broadcast::channel(1);
        let mut set = JoinSet::new();
        if let Some(m) = Membership::new(&self.cluster, &self.key_prefix, self.running.clone()) {
            if let Err(e) = m.beat().await {
                warn!(error = %e, "first membership heartbeat failed; N = expected_nodes until the store answers");
            }
            set.spawn(m.run(Shutdown::new(stop.subscribe())));
        }
        let running = self.load();
        if let Some(fleet) = running.fleet().cloned() {
            // Without a store to meet in, N of the L/N fallback is the live peers.
            let nodes = Some(self.running.clone()).filter(|_| running.store().is_none());
            let on_live = move |n: usize| {
                if let Some(r) = &nodes {
                    r.set_nodes(NonZeroU32::new(n as u32).unwrap_or(NonZeroU32::MIN));
                }
            };
            set.spawn(fleet.run(Shutdown::new(stop.subscribe()), on_live));
        }
        drop(running);
        *self.lock_tasks() = Some(Tasks { stop, set });
    }

    /// Stop the background tasks and wait for them: membership leaves the set (the other
    /// nodes rescale on their next beat) and the fleet's loop ends. The limiter still
    /// decides (a request in flight finishes on it); nothing beats any more.
    pub async fn shutdown(&self) {
        let tasks = self.lock_tasks().take();
        if let Some(Tasks { stop, mut set }) = tasks {
            let _ = stop.send(());
            while set.join_next().await.is_some() {}
        }
    }

    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Option<Tasks>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for LimiterHandle {
    /// Dropped without [`LimiterHandle::shutdown`]: the tasks hear the stop signal and end
    /// on their own (membership still leaves, if its runtime runs), unawaited.
    fn drop(&mut self) {
        if let Some(Tasks { stop, mut set }) = self.lock_tasks().take() {
            let _ = stop.send(());
            set.detach_all();
        }
    }
}
