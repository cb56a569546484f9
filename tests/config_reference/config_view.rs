//! `GET /config` shows every key the config accepts, or the operating chapter says which it
//! leaves out (issue 52: the chapter called it "the whole running config" while
//! `request_id_header` and a dozen other keys were never in it).
//!
//! How: the keys are the walk's (`structs.rs`, the same as the reference test's), and the
//! view is the `json!` literal of `src/admin/views.rs` that renders `/config`, read per
//! table (the admin module is private to the gateway, so its keys are read where they are
//! written, as the config's own keys are). A key is shown when its table's part of the view
//! names it: as written, without its `_env` (the masked secret it names: `password_env` is
//! `password`), nested under its first word ([`NESTED`]: `lease_max` is `lease.max`), or
//! by one of the few names the view spells otherwise ([`RENAMED`]). Otherwise the chapter's
//! section on `/config` must name it in a code span: the key (`` `cgnat_headroom` ``,
//! `` `[server] max_body_bytes` ``), the nested table it sits in (`` `[account] jwt` ``), or
//! its table (`` `[telemetry]` ``).

use std::collections::BTreeSet;

use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};

use crate::root;
use crate::structs::{config_structs, referenced, walk};

/// Keys the view shows under another name: `shared_ranges`' `cidr` and `headroom` are each
/// range's `range` and `multiplier`.
const RENAMED: &[(&str, &str)] = &[("cidr", "range"), ("headroom", "multiplier")];

/// The `"name":` keys of a piece of the view's source.
fn json_keys(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for part in src.split('"').collect::<Vec<_>>().windows(2) {
        let (name, after) = (part[0], part[1]);
        if after.trim_start().starts_with(':')
            && !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            out.insert(name.to_string());
        }
    }
    out
}

/// The body of `fn name` in `src`: up to the next item at the left margin.
fn function<'a>(src: &'a str, name: &str) -> &'a str {
    let start = src
        .find(&format!("fn {name}("))
        .unwrap_or_else(|| panic!("src/admin/views.rs has no fn {name}"));
    let rest = &src[start..];
    let end = rest.find("\n}\n").map_or(rest.len(), |e| e + 3);
    &rest[..end]
}

/// The keys the view shows for each top-level table: the part of `config`'s literal after
/// `"TABLE":` up to the next table, with the functions it calls for one route, policy or
/// exemption list (`route` calls `policy` too).
fn view_keys(table: &str, tables: &[String]) -> Option<BTreeSet<String>> {
    let src = std::fs::read_to_string(root().join("src/admin/views.rs")).unwrap();
    let config = function(&src, "config");
    let start = config.find(&format!("\"{table}\":"))?;
    let rest = &config[start + table.len() + 3..];
    let end = tables
        .iter()
        .filter_map(|t| rest.find(&format!("\n        \"{t}\":")))
        .min()
        .unwrap_or(rest.len());
    let mut part = rest[..end].to_string();
    for (call, body) in [
        ("route(", "route"),
        ("policy(", "policy"),
        ("exempt(", "exempt"),
    ] {
        if part.contains(call) || (body == "policy" && part.contains("route(")) {
            part.push_str(function(&src, body));
        }
    }
    Some(json_keys(&part))
}

/// The code spans of the operating chapter's `/config` section.
fn left_out_names() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/src/operating.md")).unwrap();
    let mut out = BTreeSet::new();
    let (mut heading, mut inside) = (None::<String>, false);
    for event in Parser::new(&text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(level)) => {
                let h = heading.take().unwrap_or_default();
                if inside || level <= HeadingLevel::H3 {
                    inside = h.starts_with("The running config") && h.contains("/config");
                }
            }
            Event::Code(c) => match heading.as_mut() {
                Some(h) => h.push_str(&c),
                None if inside => {
                    out.insert(c.to_string());
                }
                None => {}
            },
            Event::Text(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            _ => {}
        }
    }
    out
}

/// Keys the view nests under a word of their own: `lease_max` is `lease.max`, `tls_cert`
/// is `tls.cert`.
const NESTED: &[&str] = &["lease_", "tls_"];

/// Nested tables whose keys the view writes into their parent's object.
const FLATTENED: &[&str] = &["match"];

#[test]
fn config_view_shows_every_key_or_the_chapter_says_it_leaves_it_out() {
    let structs = config_structs();
    let tables: Vec<String> = structs["RawConfig"]
        .fields
        .iter()
        .map(|f| f.names[0].clone())
        .collect();
    let server = view_keys("server", &tables).unwrap_or_default();
    assert!(
        server.len() > 15 && server.contains("request_id_header"),
        "the view's [server] keys were not read from src/admin/views.rs: {server:?}"
    );
    let missing = unshown_keys(|table| view_keys(table, &tables));
    assert!(
        missing.is_empty(),
        "keys GET /config does not show (src/admin/views.rs) and docs/src/operating.md's \
         section on /config does not say it leaves out:\n{}",
        missing.join("\n")
    );
}

/// Every key of the config (the walk's) that `view` (a top-level table's keys in `/config`,
/// `None`: the table is not in it) does not show and the operating chapter's section on
/// `/config` does not name as left out, as `[table] section.key`.
pub(crate) fn unshown_keys(view: impl Fn(&str) -> Option<BTreeSet<String>>) -> Vec<String> {
    let structs = config_structs();
    let top = &structs["RawConfig"];
    let left_out = left_out_names();
    assert!(
        left_out.contains("[telemetry]"),
        "docs/src/operating.md's section `The running config: /config` was not read: {left_out:?}"
    );
    let mut missing = Vec::new();
    for table in &top.fields {
        let name = &table.names[0];
        if left_out.contains(&format!("[{name}]")) || left_out.contains(&format!("[{name}.*]")) {
            continue;
        }
        let Some(view) = view(name) else {
            missing.push(format!("[{name}]"));
            continue;
        };
        let mut seen = BTreeSet::new();
        let mut keys = Vec::new();
        for s in referenced(&table.ty, &structs) {
            walk(s, None, &structs, &mut seen, &mut keys);
        }
        let shown = |key: &str| shows(&view, key);
        // A nested table the view flattens (a route's `match`) is shown when its keys are.
        let flattened = |section: &str| {
            if !FLATTENED.contains(&section) {
                return false;
            }
            let inner: Vec<&str> = keys
                .iter()
                .filter(|(s, _, _)| *s == Some(section))
                .map(|(_, k, _)| *k)
                .collect();
            !inner.is_empty() && inner.iter().all(|k| shown(k))
        };
        for &(section, key, _) in &keys {
            let named =
                |k: &str| left_out.contains(k) || left_out.contains(&format!("[{name}] {k}"));
            if !shown(key) && !flattened(key) && !named(key) && !section.is_some_and(named) {
                let at = section.map_or(String::new(), |s| format!("{s}."));
                missing.push(format!("[{name}] {at}{key}"));
            }
        }
    }
    missing
}

/// `view` (one table's keys in `/config`) shows the config's `key`: as written, without its
/// `_env` (the masked secret it names), nested under its first word, or renamed.
pub(crate) fn shows(view: &BTreeSet<String>, key: &str) -> bool {
    view.contains(key)
        || key.strip_suffix("_env").is_some_and(|k| view.contains(k))
        || NESTED.iter().any(|n| {
            key.strip_prefix(n)
                .is_some_and(|k| view.contains(k) && view.contains(n.trim_end_matches('_')))
        })
        || RENAMED.iter().any(|(k, v)| *k == key && view.contains(*v))
}
