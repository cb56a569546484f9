//! The admin endpoints: health, readiness, metrics, the routing table (`/routes`), the
//! running config with its secrets masked (`/config`) and one key's state, read or reset
//! (`/limits/{policy}`, `limits.rs`), who is being denied (`/limits/{policy}/top`,
//! `/shadow`, `top.rs`), `POST /reload`, and what the dashboard shows: the last 15 minutes
//! of decisions (`/activity`, `activity.rs`), the store and fleet (`/status`, `status.rs`)
//! and the page itself (`/dashboard`, `dashboard.rs`). All but health and the page (which
//! holds no data) are behind the optional bearer token of `[server] admin_token_env`.
//! Served on their own listener
//! (`server/admin.rs`), apart from public traffic so a flood on the public port never hides
//! the gateway's own state from its operators. `/metrics` also says which build runs
//! (`build_info.rs`) and what the process costs (`process.rs`). Before any of them, a
//! request whose `Host` is not this listener's, or a state-changing one from another site,
//! is refused (`gate.rs`: DNS rebinding and cross-site forms from a browser on the machine).

pub mod activity;
mod build_info;
mod dashboard;
mod gate;
mod limits;
mod process;
mod status;
mod top;
mod views;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;

use crate::body::{ResponseBody, full};
use crate::config::{AdminToken, Config};
use crate::limit::LimiterHandle;
pub use gate::Gate;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct State {
    /// Every metric of the process (request path, limits, store): what `/metrics` exports.
    pub registry: Arc<Registry>,
    /// Listeners bound and config loaded; false again while shutting down so balancers drain.
    pub ready: Arc<AtomicBool>,
    /// `/routes` and `/config` of the running config, rendered once per config.
    pub views: Arc<ArcSwap<Views>>,
    /// `[server] admin_token_env`: what every endpoint but health requires.
    pub token: Option<AdminToken>,
    /// `/limits/{policy}` reads and resets keys through the running limiter.
    pub limiter: Arc<LimiterHandle>,
    /// `POST /reload`: the server's reload.
    pub reload: Reload,
    /// `/activity`: the sampler's readings of the decision counters.
    pub activity: Arc<activity::ActivityLog>,
    /// `[store] kind`, for `/status` (the store is not reloaded).
    pub store_kind: &'static str,
    /// Which `Host`s and origins the listener answers (`gate.rs`).
    pub gate: Arc<Gate>,
    /// The file this gateway runs and a reload re-reads: `POST /reload` names it, so that
    /// `tollgate reload -c OTHER` can tell it asked a gateway running another file.
    pub config_file: Arc<str>,
}

/// Reloads the config and says how it went (the server's reloader).
pub type Reload = Arc<dyn Fn() -> ReloadOutcome + Send + Sync>;

/// How a reload went, as `POST /reload` answers it.
pub enum ReloadOutcome {
    /// Running the new config: each policy and what its state did (`kept`, `new`, …).
    Reloaded(Vec<(String, String)>),
    /// The file does not load (`check`'s message): 422.
    Invalid(String),
    /// The file changes what only a restart can: 409.
    Refused(String),
    /// The new config could not be built: 500.
    Failed(String),
}

/// Keys of `sections` (top-level keys of the `/config` view) whose values differ between
/// two configs, as `[section] key`; the secrets the view masks are compared unmasked (a
/// renamed `*_env` variable, a new password in a URL), and only their key is named.
pub fn changed_keys(old: &Config, new: &Config, sections: &[&str]) -> Vec<String> {
    let mut changed = changed_views(old, new, sections);
    let token = |c: &Config| {
        c.server
            .admin_token
            .as_ref()
            .map(|t| t.secret().to_string())
    };
    let hidden = [
        ("server", "[server] admin_token", token(old) != token(new)),
        ("store", "[store] urls", old.store.urls != new.store.urls),
        (
            "store",
            "[store] password",
            old.store.password != new.store.password,
        ),
        (
            "cluster",
            "[cluster] peer_secret",
            old.cluster.peer_secret != new.cluster.peer_secret,
        ),
        ("telemetry", "[telemetry]", old.telemetry != new.telemetry),
    ];
    for (section, key, differs) in hidden {
        if differs && sections.contains(&section) && !changed.iter().any(|c| c == key) {
            changed.push(key.to_string());
        }
    }
    changed
}

/// [`changed_keys`] as the masked `/config` views show it.
fn changed_views(old: &Config, new: &Config, sections: &[&str]) -> Vec<String> {
    let (old, new) = (views::config(old), views::config(new));
    let mut changed = Vec::new();
    for &section in sections {
        let (a, b) = (&old[section], &new[section]);
        match (a.as_object(), b.as_object()) {
            (Some(a), Some(b)) => {
                let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
                keys.sort();
                keys.dedup();
                changed.extend(
                    keys.into_iter()
                        .filter(|k| a.get(*k) != b.get(*k))
                        .map(|k| format!("[{section}] {k}")),
                );
            }
            _ if a != b => changed.push(format!("[{section}]")),
            _ => {}
        }
    }
    changed
}

/// The JSON bodies of `/routes` and `/config`.
#[derive(Debug)]
pub struct Views {
    routes: Bytes,
    config: Bytes,
}

impl Views {
    /// Render both from the running config (secrets masked: see [`views`]).
    pub fn new(config: &Config) -> Views {
        let render = |v: serde_json::Value| {
            let mut out = serde_json::to_vec_pretty(&v).unwrap_or_default();
            out.push(b'\n');
            Bytes::from(out)
        };
        Views {
            routes: render(views::routes(config)),
            config: render(views::config(config)),
        }
    }
}

/// Answer one admin request.
pub async fn handle<B>(state: &State, req: Request<B>) -> Response<ResponseBody> {
    if let Some(refused) = state.gate.refuse(&req) {
        return refused;
    }
    let path = req.uri().path();
    // The dashboard page is static and holds no data: it asks for the token itself.
    let open = matches!(path, "/healthz" | "/readyz" | "/dashboard");
    if let (false, Some(token)) = (open, &state.token) {
        let given = req.headers().get(header::AUTHORIZATION);
        if !given.is_some_and(|v| token.admits(v.as_bytes())) {
            let mut resp = text(
                StatusCode::UNAUTHORIZED,
                "unauthorized\n".into(),
                "text/plain",
            );
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return resp;
        }
    }
    // Probes and scrapers read; a POST or DELETE here is a mistake worth saying so.
    let read_only = matches!(path, "/healthz" | "/readyz" | "/metrics");
    if read_only && !matches!(*req.method(), Method::GET | Method::HEAD) {
        return method_not_allowed("GET, HEAD");
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/readyz" if state.ready.load(Ordering::Acquire) => {
            text(StatusCode::OK, "ready\n".into(), "text/plain")
        }
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready\n".into(),
            "text/plain",
        ),
        "/metrics" => text(
            StatusCode::OK,
            encode(&state.registry),
            prometheus_text::CONTENT_TYPE,
        ),
        "/routes" => get_json(req.method(), &state.views.load().routes),
        "/config" => get_json(req.method(), &state.views.load().config),
        "/activity" => json_value(req.method(), &state.activity.render()),
        "/status" => {
            let ready = state.ready.load(Ordering::Acquire);
            let view = status::render(&state.limiter.load(), state.store_kind, ready);
            json_value(req.method(), &view)
        }
        "/dashboard" => dashboard::page(req.method()),
        "/reload" if req.method() == Method::POST => reload(state),
        "/reload" => method_not_allowed("POST"),
        "/shadow" => top::shadow(&state.limiter.load(), &req),
        p if let Some(policy) = p
            .strip_prefix("/limits/")
            .and_then(|p| p.strip_suffix("/top")) =>
        {
            top::answer(&state.limiter.load(), policy, &req)
        }
        p if p.starts_with("/limits/") => limits::answer(&state.limiter.current(), &req).await,
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}

/// `POST /reload`: 200 with each policy's state, or why nothing changed.
fn reload(state: &State) -> Response<ResponseBody> {
    let (status, body) = match (state.reload)() {
        ReloadOutcome::Reloaded(policies) => {
            let policies: serde_json::Map<String, serde_json::Value> = policies
                .into_iter()
                .map(|(p, s)| (p, serde_json::Value::String(s)))
                .collect();
            (
                StatusCode::OK,
                serde_json::json!({
                    "result": "ok",
                    "file": &*state.config_file,
                    "policies": policies,
                }),
            )
        }
        ReloadOutcome::Invalid(e) => (StatusCode::UNPROCESSABLE_ENTITY, error_json(e)),
        ReloadOutcome::Refused(e) => (StatusCode::CONFLICT, error_json(e)),
        ReloadOutcome::Failed(e) => (StatusCode::INTERNAL_SERVER_ERROR, error_json(e)),
    };
    let mut body = serde_json::to_string_pretty(&body).unwrap_or_default();
    body.push('\n');
    text(status, body, "application/json")
}

fn error_json(e: String) -> serde_json::Value {
    serde_json::json!({ "result": "error", "error": e })
}

/// Register what `/metrics` says of the process itself, beside the gateway's own metrics:
/// `tollgate_build_info` and the `process_*` metrics (read at each scrape).
pub fn register(registry: &mut Registry) {
    build_info::register(registry);
    registry.register_collector(Box::new(process::ProcessCollector));
}

/// Everything registered, in the Prometheus text format (0.0.4) that the content type
/// names: its counter families are named with `_total`, as their samples are. (The
/// OpenMetrics encoder, which this once used under the same content type, names a counter
/// family without the suffix, so a Prometheus reading it as 0.0.4 text saw untyped samples
/// without help, and `promtool check metrics` refused them.)
pub(crate) fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_text::encode(&mut out, registry);
    out
}

/// A JSON body for `GET`; any other method gets 405 with `Allow: GET`.
fn get_json(method: &Method, body: &Bytes) -> Response<ResponseBody> {
    if method != Method::GET {
        return method_not_allowed("GET");
    }
    let mut resp = Response::new(full(body.clone()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// [`get_json`] of a body rendered now.
fn json_value(method: &Method, value: &serde_json::Value) -> Response<ResponseBody> {
    let mut body = serde_json::to_vec(value).unwrap_or_default();
    body.push(b'\n');
    get_json(method, &Bytes::from(body))
}

/// 405 with the methods the path answers.
fn method_not_allowed(allow: &'static str) -> Response<ResponseBody> {
    let mut resp = text(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed\n".into(),
        "text/plain",
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<ResponseBody> {
    let mut resp = Response::new(full(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    /// A counter's family is named as its sample is, and nothing but 0.0.4 text is written
    /// (no OpenMetrics `# EOF`); build and process metrics come along.
    #[test]
    fn a_counter_family_is_named_with_its_total() {
        let mut registry = Registry::default();
        let c = Counter::<u64>::default();
        registry.register("tollgate_things", "Things", c.clone());
        c.inc();
        register(&mut registry);
        let text = encode(&registry);
        assert!(
            text.starts_with(
                "# HELP tollgate_things_total Things.\n\
                 # TYPE tollgate_things_total counter\n\
                 tollgate_things_total 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        assert!(
            text.contains("# TYPE tollgate_build_info gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{text}"
        );
    }
}
