//! Listeners, TLS and connections: where a request enters tollgate (and where the admin
//! listener serves [`crate::admin`]'s endpoints, `admin.rs`).
//!
//! [`Server::bind`] binds every socket first (so a port clash fails before anything runs and
//! tests can bind port 0 and ask for the real port), then [`Server::run`] serves until the
//! shutdown future resolves, keeps serving with `/readyz` at 503 for `drain_delay` (so
//! balancers stop sending first), then closes the listeners and drains in-flight requests
//! within `shutdown_grace`.
//!
//! A connection's life: a listener takes one of `max_connections` places and accepts
//! (`listener.rs`), a worker thread runs the TLS handshake and hyper (`workers.rs`) under
//! the connection driver (`conn.rs`), which holds it to `header_timeout` and
//! `idle_timeout` using what `activity.rs` records, ends a response its client does not
//! take within `body_timeout` (`stall.rs`), and closes it gracefully on shutdown
//! ([`crate::shutdown`]).

pub(crate) mod activity;
mod admin;
pub(crate) mod conn;
mod cuts;
mod drain;
pub(crate) mod listener;
mod otel;
mod reload;
mod reload_request;
mod rls;
mod shadow_report;
mod stall;
mod tls;
mod tracked;
mod workers;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, broadcast, mpsc};
use tokio_rustls::TlsAcceptor;
use tracing::info;

use cuts::Cuts;

pub use crate::admin::activity::Sampler;
use crate::config::Config;
use crate::limit::clock::{Clock, SystemClock};
use crate::limit::peer::PeerServer;
use crate::limit::{Limiter, LimiterError, LimiterHandle};
use crate::proxy::metrics::RequestMetrics;
use crate::shutdown::Shutdown;
use activity::Timeouts;
use listener::Listener;
use reload::Reloader;
pub use reload_request::{AskError, request_reload};
pub use shadow_report::{ReportError, ShadowReportArgs, shadow_report};
use workers::{ConnSettings, Workers};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS: {path}: {reason}")]
    Tls { path: PathBuf, reason: String },
    #[error("rate limiting: {0}")]
    Limits(#[from] LimiterError),
    /// The OS refused a worker thread (the reason is in the message, not a source, so
    /// a log line without the error chain still says why).
    #[error("cannot start worker threads: {0}")]
    Workers(std::io::Error),
    #[error(transparent)]
    Telemetry(#[from] otel::OtelError),
}

/// The addresses actually bound (port 0 resolved).
#[derive(Debug, Clone, Copy)]
pub struct Addrs {
    /// The proxy's listener; in a config without one (`[rls]` alone), `0.0.0.0:0`: no
    /// socket is bound to it.
    pub listen: SocketAddr,
    /// Envoy's rate limit service (`[rls] listen`).
    pub rls_listen: Option<SocketAddr>,
    /// Its JSON listener (`[rls] json_listen`).
    pub rls_json_listen: Option<SocketAddr>,
    pub tls_listen: Option<SocketAddr>,
    pub admin_listen: Option<SocketAddr>,
}

/// A gateway with its sockets bound, not yet serving.
pub struct Server {
    /// The validated config it was built from.
    config: Config,
    /// Public plain listener; `None` when the config runs no proxy (`[rls]` alone).
    plain: Option<TcpListener>,
    /// Envoy's rate limit service's listeners (`[rls] listen`, `json_listen`).
    rls: rls::RlsListeners,
    /// Public TLS listener and its acceptor.
    tls: Option<(TcpListener, TlsAcceptor)>,
    /// Admin listener (health, metrics).
    admin: Option<TcpListener>,
    /// The peer listener of the owner and gossip sites (`[cluster] peer_listen`).
    peer: Option<PeerServer>,
    /// Every metric of the process, registered at bind; `/metrics` encodes it.
    registry: Arc<Registry>,
    /// `tollgate_timeouts_total`: connections and streams cut for a broken time bound.
    cuts: Cuts,
    /// The running config, limiter and request path; a reload swaps them.
    reloader: Arc<Reloader>,
    /// SIGHUPs to reload on (`Server::reload_on`).
    hangups: Option<mpsc::Receiver<()>>,
    /// Ends `drain_delay` early (`Server::hurry_on`: a second SIGTERM).
    hurry: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Flipped to true once every listener is serving; `/readyz` reads it.
    ready: Arc<AtomicBool>,
    /// Worker threads serving connections (default: one per core).
    workers: usize,
    /// Reads the decision counters into `/activity`'s ring.
    sampler: Sampler,
    /// The sampler ticks on its own every 10 s (false: a test ticks it, `sample_by_hand`).
    sample_on_timer: bool,
    /// The span exporter (`[telemetry] otlp_endpoint`), stopped after the last request.
    otel: Option<otel::Otel>,
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { what, addr, source })
}

impl Server {
    pub async fn bind(config: Config) -> Result<Server, ServerError> {
        Self::bind_with_clock(config, Arc::new(SystemClock::new())).await
    }

    /// As [`Server::bind`], with the limiter's time source chosen (tests use a manual clock).
    pub async fn bind_with_clock(
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Server, ServerError> {
        let mut registry = Registry::default();
        let metrics = RequestMetrics::new(&mut registry);
        let cuts = Cuts::register(&mut registry);
        let limiter = LimiterHandle::new(&config, clock, &mut registry)?;
        let fleet = limiter.load().fleet().cloned();
        let (otel, tracing) = match &config.telemetry {
            Some(t) => {
                let (otel, tracing) = otel::Otel::start(t)?;
                (Some(otel), Some(tracing))
            }
            None => (None, None),
        };
        let reloader = Reloader::new(
            config.clone(),
            limiter,
            Arc::new(metrics),
            tracing,
            &mut registry,
        );
        crate::admin::register(&mut registry);
        let plain = match config.proxy {
            true => Some(bind("listen", config.server.listen).await?),
            false => None,
        };
        let rls = rls::RlsListeners::bind(config.rls.as_ref()).await?;
        let tls = match &config.server.tls {
            Some(t) => Some((
                bind("tls_listen", t.listen).await?,
                tls::acceptor(&t.cert, &t.key)?,
            )),
            None => None,
        };
        let admin = match config.server.admin_listen {
            Some(a) => Some(bind("admin_listen", a).await?),
            None => None,
        };
        let peer = match (fleet, config.cluster.peer_listen) {
            (Some(fleet), Some(addr)) => {
                Some(fleet.serve().await.map_err(|source| ServerError::Bind {
                    what: "peer_listen",
                    addr,
                    source,
                })?)
            }
            _ => None,
        };
        let sampler = Sampler::new(Arc::default(), reloader.limiter.clone());
        Ok(Server {
            sampler,
            sample_on_timer: true,
            config,
            plain,
            rls,
            tls,
            admin,
            peer,
            registry: Arc::new(registry),
            cuts,
            reloader,
            hangups: None,
            hurry: None,
            ready: Arc::new(AtomicBool::new(false)),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            otel,
        })
    }

    /// The running limiter, for tests that inspect limiter state.
    pub fn limiter(&self) -> Arc<Limiter> {
        self.reloader.limiter.current()
    }

    /// `/activity`'s sampler, ticked by the caller only (no timer): a test decides which
    /// requests fall in which 10-second bucket without waiting for the clock.
    pub fn sample_by_hand(mut self) -> (Self, Sampler) {
        self.sample_on_timer = false;
        let sampler = self.sampler.clone();
        (self, sampler)
    }

    /// Reload the config file whenever `hangups` yields (`tollgate serve` feeds it SIGHUP).
    pub fn reload_on(mut self, hangups: mpsc::Receiver<()>) -> Self {
        self.hangups = Some(hangups);
        self
    }

    /// When `hurry` resolves during `[server] drain_delay`, the delay ends at once and the
    /// listeners close (`tollgate serve`: a second SIGTERM or SIGINT).
    pub fn hurry_on(mut self, hurry: impl Future<Output = ()> + Send + 'static) -> Self {
        self.hurry = Some(Box::pin(hurry));
        self
    }

    pub fn addrs(&self) -> Addrs {
        let local = |l: &TcpListener| l.local_addr().expect("a bound listener has an address");
        let (rls_listen, rls_json_listen) = self.rls.addrs();
        Addrs {
            listen: (self.plain.as_ref()).map_or(SocketAddr::from(([0, 0, 0, 0], 0)), local),
            rls_listen,
            rls_json_listen,
            tls_listen: self.tls.as_ref().map(|(l, _)| local(l)),
            admin_listen: self.admin.as_ref().map(local),
        }
    }

    /// Serve connections on `n` worker threads instead of one per core.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// As [`Server::try_run`], logging a failure to start instead of returning it.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        if let Err(e) = self.try_run(shutdown).await {
            tracing::error!(error = %e, "tollgate could not start");
        }
    }

    /// Serve until `shutdown` resolves, then drain. Returns once every listener has stopped
    /// and every worker has drained its connections (within `shutdown_grace`), or at once
    /// with the error when the worker threads cannot be started (nothing was served).
    pub async fn try_run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let addrs = self.addrs();
        let (notify, _) = broadcast::channel::<()>(1);
        let timeouts = Timeouts {
            header: self.config.server.header_timeout,
            idle: self.config.server.idle_timeout,
            body: self.config.server.body_timeout,
        };
        let settings = ConnSettings {
            http: conn::http_builder(&self.config, &self.cuts),
            cuts: self.cuts.clone(),
            timeouts,
            grace: self.config.server.shutdown_grace,
        };
        let live = self.reloader.live().clone();
        let current = self.reloader.limiter.current();
        let (warmed, mut warming) = tokio::sync::mpsc::unbounded_channel();
        let workers = Workers::start(self.workers, settings, live, current.clone(), warmed);
        let workers = Arc::new(workers.map_err(ServerError::Workers)?);
        // This thread's connection too (membership's first beat and the admin API use it),
        // then every worker's: each reports once, within its connect time.
        if let Err(e) = current.warm().await {
            tracing::warn!(error = %e, "store connection not made before serving; the first calls make it");
        }
        drop(current);
        while warming.recv().await.is_some() {}
        let mut tasks = tokio::task::JoinSet::new();
        let places = Arc::new(Semaphore::new(self.config.server.max_connections));
        let listener = |listener, tls| Listener {
            listener,
            tls,
            workers: workers.clone(),
            places: places.clone(),
        };
        if let Some(plain) = self.plain {
            tasks.spawn(listener(plain, None).run(Shutdown::new(notify.subscribe())));
        }
        if let Some(state) = self.reloader.rls.clone() {
            let cuts = self.cuts.clone();
            self.rls.spawn(state, timeouts, cuts, &notify, &mut tasks);
        }
        if let Some((l, acceptor)) = self.tls {
            tasks.spawn(listener(l, Some(acceptor)).run(Shutdown::new(notify.subscribe())));
        }
        if let Some(l) = self.admin {
            let reloader = self.reloader.clone();
            let state = crate::admin::State {
                registry: self.registry.clone(),
                ready: self.ready.clone(),
                views: self.reloader.views.clone(),
                token: self.config.server.admin_token.clone(),
                limiter: self.reloader.limiter.clone(),
                reload: Arc::new(move || reload::outcome(reloader.reload("POST /reload"))),
                activity: self.sampler.log.clone(),
                store_kind: self.config.store.kind.name(),
                // Absolute: `tollgate reload` compares it from another working folder.
                config_file: std::fs::canonicalize(&self.config.origin)
                    .unwrap_or_else(|_| self.config.origin.clone())
                    .display()
                    .to_string()
                    .into(),
                gate: Arc::new(crate::admin::Gate::new(
                    l.local_addr().expect("a bound listener has an address"),
                    self.config.server.admin_hosts.clone(),
                )),
            };
            let stop = Shutdown::new(notify.subscribe());
            tasks.spawn(admin::run(l, state, timeouts, self.cuts.clone(), stop));
        }
        if self.sample_on_timer {
            let stop = Shutdown::new(notify.subscribe());
            tasks.spawn(self.sampler.clone().run(stop));
        }
        if let Some(hangups) = self.hangups {
            let stop = Shutdown::new(notify.subscribe());
            tasks.spawn(reload::on_hangup(self.reloader.clone(), hangups, stop));
        }
        // Membership (one beat before serving, so split policies start at the right N) and
        // the fleet's loop.
        self.reloader.limiter.start().await;
        self.reloader.start_checks();
        self.ready.store(true, Ordering::Release);
        // Addresses as text, absent when not listening (no Rust `Debug` in a JSON line).
        let shown = |a: Option<std::net::SocketAddr>| a.map(tracing::field::display);
        let listen = self.config.proxy.then_some(addrs.listen);
        info!(
            listen = shown(listen),
            tls_listen = shown(addrs.tls_listen),
            rls_listen = shown(addrs.rls_listen),
            admin_listen = shown(addrs.admin_listen),
            workers = self.workers,
            "tollgate listening"
        );
        shutdown.await;
        info!("shutting down");
        self.ready.store(false, Ordering::Release);
        drain::drain_delay(self.config.server.drain_delay, self.hurry).await;
        self.reloader.stop_checks();
        let _ = notify.send(());
        // Membership leaves and the fleet's loop ends, as the listeners stop.
        self.reloader.limiter.shutdown().await;
        // Listeners close their sockets first, so new clients are refused while draining.
        while tasks.join_next().await.is_some() {}
        if let Some(workers) = Arc::into_inner(workers) {
            let _ = tokio::task::spawn_blocking(move || workers.shutdown()).await;
        }
        // Peers were answered while draining; now the listener closes.
        drop(self.peer);
        if let Some(otel) = self.otel {
            let _ = tokio::task::spawn_blocking(move || otel.stop()).await;
        }
        info!("stopped");
        Ok(())
    }
}
