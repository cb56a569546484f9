//! envoyproxy/ratelimit's YAML as written: one file's `domain` and its nested `descriptors`,
//! each field as go-yaml v2 decodes it into ratelimit's `YamlRoot` (`config_impl.go`), and
//! nothing checked beyond that decoding and ratelimit's key check (`validateYamlKeys`). What
//! the values mean — units, duplicates, `replaces` — is checked when the tree is built
//! (`rls/tree.rs`).
//!
//! Read with saphyr into a tree of nodes with their lines (`node.rs`), then decoded field by
//! field (`decode.rs`) so every problem of the file is reported, not only the first.

mod decode;
mod node;

use std::path::Path;

use saphyr::{MarkedYaml, YamlLoader};
use saphyr_parser::Parser;

use super::error::{Problem, RlsError};

/// One file: `domain:` and its top-level `descriptors:`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct YamlFile {
    /// Empty when absent (refused when the tree is built, as ratelimit refuses it).
    pub domain: String,
    /// Line of `domain:` (0 when absent), for the duplicate-domain message.
    pub domain_line: usize,
    pub descriptors: Vec<YamlDescriptor>,
}

/// One item of a `descriptors:` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct YamlDescriptor {
    /// Empty when absent.
    pub key: String,
    /// Empty when absent: the descriptor matches any value of `key`. May hold `*` anywhere.
    pub value: String,
    pub rate_limit: Option<YamlRateLimit>,
    pub descriptors: Vec<YamlDescriptor>,
    pub shadow_mode: bool,
    /// Accepted and kept, as ratelimit keeps it; tollgate does not act on it yet.
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub share_threshold: bool,
    /// Where the descriptor is, for the tree's messages: its YAML path and line.
    pub at: String,
    pub line: usize,
}

/// A descriptor's `rate_limit:` block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct YamlRateLimit {
    pub requests_per_unit: u32,
    /// As written: checked (any case) when the tree is built.
    pub unit: String,
    pub unit_line: usize,
    pub unlimited: bool,
    /// The name other rules' `replaces` refer to; empty when absent.
    pub name: String,
    /// Each `replaces` item's `name` (empty when absent) and line.
    pub replaces: Vec<(String, usize)>,
    pub line: usize,
}

/// `text`, named `file` in messages, decoded; problems are pushed to `errors` and what could
/// be decoded is returned (`None` when the text is not YAML or not a map).
pub fn parse(file: &Path, text: &str, errors: &mut Vec<RlsError>) -> Option<YamlFile> {
    let mut loader: YamlLoader<'_, MarkedYaml<'_>> = YamlLoader::default();
    // Scalars as written, typed by `scalar.rs` as go-yaml v2 types them (YAML 1.1).
    loader.early_parse(false);
    // go-yaml v2 keeps the last of duplicate keys; so does ratelimit.
    loader.allow_duplicate_keys(true);
    let mut parser = Parser::new_from_str(text);
    let scanned = parser.load(&mut loader, true);
    if let Some(e) = scanned.err().or_else(|| loader.error().cloned()) {
        errors.push(RlsError {
            file: file.to_path_buf(),
            line: e.marker().line(),
            at: String::new(),
            problem: Problem::Syntax(format!(
                "{} at line {} column {}",
                e.info(),
                e.marker().line(),
                e.marker().col() + 1
            )),
        });
        return None;
    }
    // go-yaml v2's Unmarshal reads the first document; an empty file is an empty map.
    let docs = loader.into_documents();
    let mut decoder = decode::Decoder::new(file, errors);
    match docs.first() {
        None => Some(YamlFile::default()),
        Some(root) => decoder.file(root),
    }
}
