//! `GET /status`: what the dashboard shows beside the traffic — whether the gateway is
//! ready, its store and each store node's breaker, N of the L/N split, and the fleet's
//! members as this node sees them. Small on purpose: `/metrics` has the rest.

use serde_json::{Value, json};

use crate::limit::Limiter;

/// The `/status` body. `store_kind`: `[store] kind` (read once at start, as the store is).
pub fn render(limiter: &Limiter, store_kind: &str, ready: bool) -> Value {
    let breakers: Vec<Value> = limiter
        .store()
        .map(|s| s.breaker_states())
        .unwrap_or_default()
        .into_iter()
        .map(|(node, open)| json!({ "node": node, "open": open }))
        .collect();
    let fleet = limiter.fleet_view().map(|f| {
        let text = |v: Vec<std::net::SocketAddr>| -> Vec<String> {
            v.into_iter().map(|a| a.to_string()).collect()
        };
        json!({
            "me": f.me.to_string(),
            "live": text(f.live),
            "down": text(f.down),
        })
    });
    json!({
        "ready": ready,
        "store": {
            "kind": store_kind,
            "breaker_open": breakers.iter().any(|b| b["open"] == true),
            "breakers": breakers,
        },
        "nodes": limiter.nodes().get(),
        "fleet": fleet,
    })
}
