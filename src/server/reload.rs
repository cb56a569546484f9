//! Reloading the config while serving: `SIGHUP`, the admin `POST /reload`, and through it
//! `tollgate reload`. One [`Reloader`] per process does all three the same way:
//!
//! 1. read and validate the file the process started from, with exactly `check`'s
//!    messages; an invalid file changes nothing;
//! 2. refuse a change to `[server]`, `[store]` or `[cluster]` (listeners, TLS, connection
//!    bounds, the store and the peer fleet are made once at start), naming the keys;
//! 3. reload the limiter through its handle (`LimiterHandle::reload`: the new limiter built
//!    on the old one's state and swapped in, in step with N), then publish the new routes,
//!    upstreams and admin views.
//!
//! Nothing is drained or dropped: a request in flight finishes on the config it started
//! with; the next request, on the same connection or a new one, takes the new one (each
//! worker rebuilds its request path when it sees a new generation, [`WorkerGateway`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use arc_swap::{ArcSwap, ArcSwapOption};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tracing::{error, info};

use crate::admin::{self, Views};
use crate::config::{self, Config};
use crate::limit::{Limiter, LimiterError, LimiterHandle, PolicyCarry};
use crate::proxy::Gateway;
use crate::proxy::metrics::RequestMetrics;
use crate::proxy::trace::Tracing;
use crate::proxy::upstream::UpstreamSlots;
use crate::proxy::upstream::health::{self, HealthMetrics};
use crate::proxy::upstream::metrics::UpstreamMetrics;
use crate::rls::service::RlsState;

/// Builds one worker's request path for the running config.
type MakeGateway = dyn Fn() -> Gateway + Send + Sync;

/// The request path every worker serves: a builder and its generation.
pub(crate) struct Live {
    generation: AtomicU64,
    make: ArcSwap<Box<MakeGateway>>,
    /// Each worker's current request path, emptied at every publish: a worker with no
    /// traffic must not keep the old config (its limiter, its tables) alive.
    workers: Mutex<Vec<Weak<Mine>>>,
}

/// A worker's request path and the generation it was built for.
type Mine = ArcSwapOption<(u64, Gateway)>;

impl Live {
    pub(crate) fn new(make: Box<MakeGateway>) -> Arc<Self> {
        Arc::new(Live {
            generation: AtomicU64::new(0),
            make: ArcSwap::from_pointee(make),
            workers: Mutex::new(Vec::new()),
        })
    }

    /// A new request path for every worker: builder first, then the generation, so a
    /// worker that sees the new generation builds from the new builder.
    fn publish(&self, make: Box<MakeGateway>) {
        self.make.store(Arc::new(make));
        self.generation.fetch_add(1, Ordering::Release);
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        workers.retain(|w| match w.upgrade() {
            Some(mine) => {
                mine.store(None);
                true
            }
            None => false,
        });
    }

    /// One worker's view, built now (call on the worker's thread).
    pub(crate) fn worker(self: &Arc<Self>) -> WorkerGateway {
        let generation = self.generation.load(Ordering::Acquire);
        let gateway = (self.make.load())();
        let mine = Arc::new(ArcSwapOption::from_pointee((generation, gateway)));
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        workers.push(Arc::downgrade(&mine));
        WorkerGateway {
            live: self.clone(),
            mine,
        }
    }
}

/// A worker's request path: its own `Gateway` (its own upstream client and pools), rebuilt
/// on its first request after a reload. Costs one atomic load per request otherwise.
#[derive(Clone)]
pub(crate) struct WorkerGateway {
    live: Arc<Live>,
    mine: Arc<Mine>,
}

impl WorkerGateway {
    pub(crate) fn current(&self) -> Gateway {
        let generation = self.live.generation.load(Ordering::Acquire);
        if let Some(mine) = &*self.mine.load()
            && mine.0 == generation
        {
            return mine.1.clone();
        }
        let gateway = (self.live.make.load())();
        self.mine
            .store(Some(Arc::new((generation, gateway.clone()))));
        gateway
    }
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file does not load: `check`'s message.
    #[error("{0}")]
    Invalid(String),
    /// The file changes what only a restart can.
    #[error("{0}")]
    Refused(String),
    #[error("rate limiting: {0}")]
    Limits(#[from] LimiterError),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// The running config and everything a reload swaps.
pub(crate) struct Reloader {
    /// The config running now and its upstream slots; held for the whole of a reload, so
    /// two reloads (a SIGHUP and a `POST /reload` at once) run one after the other.
    running: Mutex<(Config, UpstreamSlots)>,
    /// The limiter, its reloads, N and its background tasks.
    pub limiter: Arc<LimiterHandle>,
    pub views: Arc<ArcSwap<Views>>,
    live: Arc<Live>,
    metrics: Arc<RequestMetrics>,
    /// The span recorder every request path is built with (`None`: tracing is off).
    tracing: Option<Tracing>,
    /// `tollgate_config_reloads_total{result="ok"|"error"}`.
    reloads: Family<ResultLabel, Counter>,
    /// `tollgate_upstream_healthy`, and the running config's health checks (`None` until
    /// the server runs; each reload replaces them).
    health: HealthMetrics,
    checks: Mutex<Option<Vec<JoinHandle<()>>>>,
    /// Envoy's rate limit service's state (`[rls]`): its YAML follows each reload.
    pub rls: Option<Arc<RlsState>>,
}

/// Sections a reload may not change, and why.
const RESTART_ONLY: &str = "[server], [store], [cluster] and [telemetry] are read once at start (listeners, TLS, connection bounds, the store, the peer fleet, the span exporter)";

impl Reloader {
    /// The running state of a server just bound; registers the reload counter.
    pub(crate) fn new(
        config: Config,
        limiter: LimiterHandle,
        metrics: Arc<RequestMetrics>,
        tracing: Option<Tracing>,
        registry: &mut Registry,
    ) -> Arc<Self> {
        let reloads = Family::<ResultLabel, Counter>::default();
        registry.register(
            "tollgate_config_reloads",
            "Config reloads (SIGHUP, POST /reload), by result: ok, or error (nothing changed)",
            reloads.clone(),
        );
        for result in ["ok", "error"] {
            drop(reloads.get_or_create(&ResultLabel { result }));
        }
        let health = HealthMetrics::register(registry);
        let slots = UpstreamSlots::new(&config.upstreams, UpstreamMetrics::register(registry));
        let views = Arc::new(ArcSwap::from_pointee(Views::new(&config)));
        let limiter = Arc::new(limiter);
        let live = Live::new(make_gateway(
            &config,
            &limiter.current(),
            &metrics,
            &slots,
            tracing.as_ref(),
        ));
        let rls = (config.rls.as_ref()).map(|r| RlsState::new(limiter.clone(), r.served.clone()));
        Arc::new(Reloader {
            rls,
            running: Mutex::new((config, slots)),
            limiter,
            views,
            live,
            metrics,
            tracing,
            reloads,
            health,
            checks: Mutex::new(None),
        })
    }

    /// Start the running config's health checks (the server is serving).
    pub(crate) fn start_checks(&self) {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let (config, slots) = &*running;
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        *checks = Some(health::spawn_checks(config, slots, &self.health));
    }

    /// Stop the health checks (shutdown).
    pub(crate) fn stop_checks(&self) {
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        for h in checks.take().into_iter().flatten() {
            h.abort();
        }
    }

    /// A reload's config takes over the checks, if they run.
    fn restart_checks(&self, config: &Config, slots: &UpstreamSlots) {
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = checks.as_mut() {
            for h in old.drain(..) {
                h.abort();
            }
            *old = health::spawn_checks(config, slots, &self.health);
        }
    }

    pub(crate) fn live(&self) -> &Arc<Live> {
        &self.live
    }

    /// Reload the file the running config came from; logged and counted either way.
    pub(crate) fn reload(&self, why: &str) -> Result<Vec<PolicyCarry>, ReloadError> {
        let result = self.try_reload();
        let label = match &result {
            Ok(carried) => {
                for c in carried {
                    info!(policy = %c.policy, state = %c.state, "reload: policy state");
                }
                info!(trigger = why, policies = carried.len(), "config reloaded");
                "ok"
            }
            Err(e) => {
                error!(trigger = why, error = %e, "config reload failed; the running config stays");
                "error"
            }
        };
        self.reloads
            .get_or_create(&ResultLabel { result: label })
            .inc();
        result
    }

    fn try_reload(&self) -> Result<Vec<PolicyCarry>, ReloadError> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let (old, slots) = &*running;
        let new =
            config::load_file(&old.origin).map_err(|e| ReloadError::Invalid(e.to_string()))?;
        let changed = admin::changed_keys(old, &new, &["server", "store", "cluster", "telemetry"]);
        if !changed.is_empty() {
            return Err(ReloadError::Refused(format!(
                "{}: changes {} ({RESTART_ONLY}; restart to change them)",
                new.origin.display(),
                changed.join(", ")
            )));
        }
        let listeners =
            |c: &Config| (c.rls.as_ref()).map(|r| (r.listen, r.json_listen, r.tls.clone()));
        if listeners(old) != listeners(&new) {
            return Err(ReloadError::Refused(format!(
                "{}: changes [rls] listen, json_listen, tls_cert or tls_key (the rate limit service's sockets and TLS are made once at start; restart to change them)",
                new.origin.display()
            )));
        }
        // Built at this node's N and swapped in, in step with N (the handle's business).
        let (limiter, carried) = self.limiter.reload(&new)?;
        if let (Some(state), Some(r)) = (&self.rls, &new.rls) {
            state.reload(r.served.clone());
        }
        let slots = slots.reloaded(&old.upstreams, &new.upstreams);
        // The request path first, the admin views last: once `/routes` shows the new
        // config, every request that starts after it is served by the new config.
        self.live.publish(make_gateway(
            &new,
            &limiter,
            &self.metrics,
            &slots,
            self.tracing.as_ref(),
        ));
        self.views.store(Arc::new(Views::new(&new)));
        self.restart_checks(&new, &slots);
        *running = (new, slots);
        Ok(carried)
    }
}

fn make_gateway(
    config: &Config,
    limiter: &Arc<Limiter>,
    metrics: &Arc<RequestMetrics>,
    slots: &UpstreamSlots,
    tracing: Option<&Tracing>,
) -> Box<MakeGateway> {
    let (config, limiter, metrics, slots) = (
        config.clone(),
        limiter.clone(),
        metrics.clone(),
        slots.clone(),
    );
    let tracing = tracing.cloned();
    Box::new(move || {
        Gateway::new(
            &config,
            limiter.clone(),
            metrics.clone(),
            &slots,
            tracing.clone(),
        )
    })
}

/// A reload's result as the admin API answers it.
pub(crate) fn outcome(result: Result<Vec<PolicyCarry>, ReloadError>) -> admin::ReloadOutcome {
    match result {
        Ok(carried) => admin::ReloadOutcome::Reloaded(
            carried
                .into_iter()
                .map(|c| (c.policy.to_string(), c.state))
                .collect(),
        ),
        Err(ReloadError::Invalid(e)) => admin::ReloadOutcome::Invalid(e),
        Err(ReloadError::Refused(e)) => admin::ReloadOutcome::Refused(e),
        Err(ReloadError::Limits(LimiterError::Refused(e))) => admin::ReloadOutcome::Refused(e),
        Err(e @ ReloadError::Limits(_)) => admin::ReloadOutcome::Failed(e.to_string()),
    }
}

/// Reload on every hangup until shutdown (hangups that arrive while one is pending make
/// one more reload, not one each: `shutdown::signal`).
pub(crate) async fn on_hangup(
    reloader: Arc<Reloader>,
    mut hangups: tokio::sync::mpsc::Receiver<()>,
    mut stop: crate::shutdown::Shutdown,
) {
    loop {
        tokio::select! {
            got = hangups.recv() => match got {
                Some(()) => drop(reloader.reload("SIGHUP")),
                None => return,
            },
            () = stop.recv() => return,
        }
    }
}
