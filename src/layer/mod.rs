//! The limiter's tower layer (`tollgate_limit::layer`), built from a tollgate TOML file: a
//! `[layers.NAME]` table stands where a route stood (its `policies`, `mode`,
//! `on_store_error`, `require_account`), and the file's `[policies.NAME]`, `[store]`,
//! `[account]`, `[exempt]`, `[response]` and `[client_ip]` mean what they mean to the
//! gateway. The layer itself — what a request goes through, its answers, [`ClientAddr`] —
//! is the library's; this module only loads the file, builds the one limiter and hands out
//! a [`RateLimitLayer`] per table, so an app that builds its limiter in code needs only
//! `tollgate-limit` (feature `tower`).
//!
//! Its place in the request walk of ARCHITECTURE.md: steps 1, 4 and 6 (client, limit,
//! respond) without the rest.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use prometheus_client::registry::Registry;

use crate::config::{self, Config, ConfigError};
use crate::limit::clock::{Clock, SystemClock};
use crate::limit::layer::TrustedProxies;
use crate::limit::spec::LimiterSpec;
use crate::limit::{LimiterError, LimiterHandle};

pub use crate::limit::layer::{ClientAddr, RateLimit, RateLimitLayer};

/// Why [`Limits`] could not be built, or a layer not handed out. Printed, each names the
/// file and the key as `tollgate check` does.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The file does not load: the same messages as `tollgate check`.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The limiter could not be built from a valid file (a store URL the client refuses).
    #[error("{file}: {source}")]
    Limiter {
        file: PathBuf,
        #[source]
        source: LimiterError,
    },
    /// [`Limits::layer`] asked for a table the file does not have.
    #[error("{file}: layers.{name}: no such table (define [layers.{name}]; the file has {known})")]
    NoLayer {
        file: PathBuf,
        name: String,
        known: String,
    },
}

/// One file's policies and the limiter that decides them, shared by every layer handed out
/// (cheap to clone). Build it once per process, as the gateway builds one limiter: layers of
/// two `Limits` count apart, except where their store is shared.
#[derive(Clone)]
pub struct Limits {
    shared: Arc<Shared>,
}

/// What every layer of one [`Limits`] decides with.
struct Shared {
    limiter: Arc<LimiterHandle>,
    /// `tollgate_*` metrics (decisions, store, keys), for [`Limits::metrics_text`].
    registry: Registry,
    /// The validated file: a new clock rebuilds the limiter from it, and its `[response]`,
    /// `[client_ip]` and `[server]` path rules go to every layer.
    config: Config,
}

impl Limits {
    /// Read, check and build from the file at `path` (relative paths in it resolve against
    /// its folder, as for the gateway).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Limits, LayerError> {
        Self::build(
            config::load_file(path.as_ref())?,
            Arc::new(SystemClock::new()),
        )
    }

    /// As [`Limits::from_file`], from TOML text (errors name the file `tollgate.toml`;
    /// relative paths resolve against the working directory).
    pub fn from_toml(text: &str) -> Result<Limits, LayerError> {
        let origin = Path::new("tollgate.toml");
        let raw = config::parse_str(text, origin)?;
        Self::build(config::validate(raw, origin)?, Arc::new(SystemClock::new()))
    }

    /// The same policies decided on `clock` (tests: a `ManualClock` refills buckets only
    /// when told). Builds a fresh limiter: call it before any layer is handed out.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Limits {
        let config = self.shared.config.clone();
        // The file built a limiter once already; only the clock differs now.
        Self::build(config, clock).expect("a config that built a limiter builds one again")
    }

    fn build(config: Config, clock: Arc<dyn Clock>) -> Result<Limits, LayerError> {
        let mut registry = Registry::default();
        // The limiter decides routes by index: a layer is its route here, and the file's
        // `[[routes]]` (if it is a gateway's file too) are not this process's to decide.
        let mut spec = LimiterSpec::from(&config);
        spec.routes = config.layers.clone();
        let limiter = LimiterHandle::new(spec, clock, &mut registry).map_err(|source| {
            LayerError::Limiter {
                file: config.origin.clone(),
                source,
            }
        })?;
        let shared = Shared {
            limiter: Arc::new(limiter),
            registry,
            config,
        };
        Ok(Limits {
            shared: Arc::new(shared),
        })
    }

    /// The layer of table `[layers.NAME]`. Layers of one `Limits` share its limiter: a
    /// policy listed by two layers is one budget (keyed with `route` it is two).
    pub fn layer(&self, name: &str) -> Result<RateLimitLayer, LayerError> {
        let config = &self.shared.config;
        let layers = &config.layers;
        let Some(index) = layers.iter().position(|l| l.name == name) else {
            let known: Vec<String> = layers.iter().map(|l| format!("`{}`", l.name)).collect();
            return Err(LayerError::NoLayer {
                file: config.origin.clone(),
                name: name.to_owned(),
                known: if known.is_empty() {
                    "no [layers.NAME] table".into()
                } else {
                    known.join(", ")
                },
            });
        };
        let trusted = TrustedProxies::new(
            config.client_ip.trusted_proxies.clone(),
            config.client_ip.forwarded_header,
        );
        Ok(
            RateLimitLayer::new(self.shared.limiter.clone(), index, name)
                .response_headers(config.response)
                .trusted_proxies(trusted)
                .path_rules(config.server.paths),
        )
    }

    /// The limiter's metrics (`tollgate_decisions_total` by layer, policy and outcome, the
    /// store's, the keys held) as Prometheus text, for the service's own `/metrics`.
    pub fn metrics_text(&self) -> String {
        crate::admin::encode(&self.shared.registry)
    }
}
