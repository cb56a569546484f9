//! The config reference (`docs/src/reference/`) documents every key the config accepts.
//!
//! How: the keys are read from the code that accepts them, not from a list kept by hand.
//! The TOML file is deserialized by serde into the `Raw*` structs of `src/config/` (every
//! one `#[serde(deny_unknown_fields)]`, so a key is accepted exactly when it is a field of
//! one of them). This test reads those sources as text, finds every struct that derives
//! `Deserialize`, and takes its keys as serde spells them: the field name, or its
//! `rename`, after the struct's `rename_all`, plus every `alias`; `skip`ped fields are not
//! keys and `flatten`ed ones lend their struct's keys to the parent. Starting from
//! `RawConfig`, each top-level field is a table with a page of its own
//! (`client_ip` → `reference/client-ip.md`), and every struct reachable from that field's
//! type (`RawPolicy`, then `RawTier`, `RawOverride`, `RawCount`, `RawExempt`, …) belongs to
//! that page. Each key must then be documented there, read with pulldown-cmark (the parser
//! mdBook uses):
//!
//! - as `` `name` `` in the first cell of a row of a *keys* table (a table whose second
//!   column is `type`), and of a row of a *check* table (second column `bad value`): so no
//!   key lacks its type, default and example, nor the error `check` prints for it;
//! - for a nested table's key (`health.path`, `tiers.NAME.limit`), in tables under a heading
//!   that names the nested field as `` `health` ``, so `limit` of a tier is not taken as
//!   documented by the policy's own `limit`.
//!
//! And every top-level table must have a row in `reference/index.md`. The test also fails
//! when it cannot see what it checks: no `RawConfig`, fewer structs or keys than the config
//! has today, a `deny_unknown_fields` struct no table reaches (a new struct this walk does
//! not know), or a reachable struct without `deny_unknown_fields` (the reference promises
//! that unknown keys are errors). A failure lists every missing key with its page.
//!
//! The modules: `syntax` (the Rust source read as text: comments, brackets, attributes),
//! `structs` (the serde structs of `src/config/` and their keys, walked from a field's type),
//! `page` (a reference page's tables, read with pulldown-cmark) and `tests`; `config_view`
//! holds `GET /config` to the same keys (each shown, or named by the operating chapter as
//! left out), read from the view's source; `config_served` asks a running gateway's
//! `/config` the same, and that what the chapter calls not shown is not.

#[path = "../common/mod.rs"]
mod common;

mod config_served;
mod config_view;
mod page;
mod structs;
mod syntax;
mod tests;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
