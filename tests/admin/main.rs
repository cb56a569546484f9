//! The admin listener and what operators read: `/routes`, `/limits`, `/activity`, `/top`,
//! `/metrics` (through `promtool`), the dashboard in a real browser, and the access log
//! (its lines, decisions and buffer).

#[path = "../common/mod.rs"]
mod common;

mod access_decisions;
mod access_duration;
mod access_file;
mod access_log;
mod access_log_buffer;
mod access_request_id;
mod admin_activity;
mod admin_api;
mod admin_browser;
mod admin_limits;
mod admin_shadow_trial;
mod admin_top;
mod dashboard;
mod doc_shadow;
mod grafana;
mod metrics_lint;
mod shadow_range;
