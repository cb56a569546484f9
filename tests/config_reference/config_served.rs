//! `GET /config` of a running gateway against the same keys as `config_view.rs`: what the
//! view's source names is what a gateway serves, and what the operating chapter says
//! `/config` leaves out it does leave out (a key the chapter calls "not shown" that the
//! gateway shows is a stale sentence).
//!
//! The gateway serves a config that sets what the view shows only when set (a TLS listener,
//! `[account]`, a policy reading the body, a lease policy), so a key is absent because the
//! view leaves it out, not because this config left it unset.

use std::collections::BTreeSet;

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

use crate::common::{Gateway, get, json, send_h1};
use crate::config_view::{shows, unshown_keys};
use crate::root;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
tls_listen = "127.0.0.1:0"
tls_cert = "certs/localhost.pem"
tls_key = "certs/localhost-key.pem"
admin_listen = "127.0.0.1:0"

[upstreams.app]
urls = ["http://127.0.0.1:3000"]

[account]
header = "x-api-key"

[policies.body]
key = ["ip", "form:user"]
algorithm = "gcra"
limit = 10
period = "1s"
on_missing_key = "skip"

[policies.leased]
key = ["ip"]
algorithm = "gcra"
limit = 10
period = "1s"
site = "lease"

[[routes]]
name = "api"
upstream = "app"
policies = ["body", "leased"]
"#;

/// Every object key at any depth of `value`.
fn keys_in(value: &serde_json::Value, out: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                out.insert(k.clone());
                keys_in(v, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| keys_in(v, out)),
        _ => {}
    }
}

/// What the chapter's "Not shown" paragraph names: a whole table (`[telemetry]`,
/// `[layers.*]`: key `None`) or a key of one (`[account] jwt`; after "of an upstream," an
/// upstream's, after "of a policy," a policy's).
fn said_not_shown() -> Vec<(String, Option<String>)> {
    let text = std::fs::read_to_string(root().join("docs/src/operating.md")).unwrap();
    let mut out = Vec::new();
    let (mut inside, mut in_paragraph, mut scope) = (false, false, None::<&str>);
    for event in Parser::new(&text) {
        match event {
            Event::Start(Tag::Paragraph) => in_paragraph = true,
            Event::End(TagEnd::Paragraph) => {
                in_paragraph = false;
                if inside {
                    break;
                }
            }
            Event::Text(t) if in_paragraph => {
                if t.trim_start().starts_with("Not shown") {
                    inside = true;
                }
                if t.contains("of an upstream") {
                    scope = Some("upstreams");
                }
                if t.contains("of a policy") {
                    scope = Some("policies");
                }
            }
            Event::Code(c) if inside => {
                if let Some(rest) = c.strip_prefix('[') {
                    let (table, key) = rest.split_once(']').unwrap();
                    let table = table.trim_end_matches(".*").to_string();
                    let key = key.trim();
                    out.push((table, (!key.is_empty()).then(|| key.to_string())));
                } else if c
                    .chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
                {
                    // A key (`ca_file`); not a command or a type (`RateLimitLayer`).
                    let table = scope.unwrap_or_else(|| {
                        panic!("`{c}` in the \"Not shown\" paragraph names no table")
                    });
                    out.push((table.to_string(), Some(c.to_string())));
                }
            }
            _ => {}
        }
    }
    assert!(
        out.len() > 10,
        "docs/src/operating.md's \"Not shown\" paragraph was not read: {out:?}"
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_config_shows_every_key_but_those_the_chapter_says_it_leaves_out() {
    let gw = Gateway::start(CONFIG).await;
    let admin = gw
        .addrs
        .admin_listen
        .expect("the config has an admin listener");
    let view = json(send_h1(admin, get(&format!("http://{admin}/config"))).await).await;
    let table = |name: &str| {
        view.get(name).filter(|v| !v.is_null()).map(|v| {
            let mut keys = BTreeSet::new();
            keys_in(v, &mut keys);
            keys
        })
    };
    let mut problems: Vec<String> = unshown_keys(table)
        .into_iter()
        .map(|k| format!("{k}: not in the served /config, and the chapter does not say so"))
        .collect();
    for (name, key) in said_not_shown() {
        match (&key, table(&name)) {
            (None, Some(_)) => problems.push(format!("[{name}]: said not shown, but served")),
            (Some(k), Some(keys)) if shows(&keys, k) => {
                problems.push(format!("[{name}] {k}: said not shown, but served"))
            }
            _ => {}
        }
    }
    assert!(
        problems.is_empty(),
        "GET /config against docs/src/operating.md's section on it:\n{}\n/config: {view:#}",
        problems.join("\n")
    );
}
