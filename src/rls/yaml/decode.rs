//! Each field decoded into `YamlFile` as go-yaml v2 decodes ratelimit's structs: strings take
//! any scalar's text (`value: 123` is "123"), booleans only booleans, `requests_per_unit` a
//! `uint32`, null leaves the zero value; a key no struct field has is ignored once ratelimit's
//! key check (`node.rs`) accepted it. Every problem is kept, the decoding goes on.

use std::path::Path;

use super::node::{self, Node, View, check_any, describe, entries, join, key_name, line};
use super::{YamlDescriptor, YamlFile, YamlRateLimit};
use crate::rls::error::{Problem, RlsError};
use crate::rls::scalar::Scalar;

pub(super) struct Decoder<'a> {
    file: &'a Path,
    errors: &'a mut Vec<RlsError>,
}

impl<'a> Decoder<'a> {
    pub(super) fn new(file: &'a Path, errors: &'a mut Vec<RlsError>) -> Self {
        Decoder { file, errors }
    }

    fn push(&mut self, line: usize, at: &str, problem: Problem) {
        self.errors.push(RlsError {
            file: self.file.to_path_buf(),
            line,
            at: at.into(),
            problem,
        });
    }

    /// The map's entries whose keys ratelimit accepts, merges expanded; problems pushed.
    fn fields<'n, 'i>(&mut self, node: &'n Node<'i>, at: &str) -> Vec<(&'n str, &'n Node<'i>)> {
        let View::Map(map) = node::view(node) else {
            return Vec::new();
        };
        let mut list = Vec::new();
        let mut merges = Vec::new();
        entries(map, &mut list, &mut merges);
        for (l, p) in merges {
            self.push(l, at, p);
        }
        let mut fields = Vec::with_capacity(list.len());
        for (k, v) in list {
            match key_name(k) {
                Ok(name) => fields.push((name, v)),
                Err(p) => self.push(line(k), at, p),
            }
        }
        fields
    }

    /// ratelimit's key check below a value we do not decode.
    fn check(&mut self, node: &Node<'_>, at: &str) {
        let mut found = Vec::new();
        check_any(node, at, &mut found);
        for (l, at, p) in found {
            self.push(l, &at, p);
        }
    }

    fn wrong(&mut self, node: &Node<'_>, at: &str, field: &'static str, expected: &'static str) {
        self.check(node, at);
        let found = describe(node);
        self.push(
            line(node),
            at,
            Problem::WrongType {
                field,
                expected,
                found,
            },
        );
    }

    /// The document: a map (or nothing) with `domain` and `descriptors`.
    pub(super) fn file(&mut self, root: &Node<'_>) -> Option<YamlFile> {
        match node::view(root) {
            View::Null => return Some(YamlFile::default()),
            View::Map(_) => {}
            View::Seq(_) => {
                self.push(line(root), "", Problem::NotAMap("a list".into()));
                return None;
            }
            View::Scalar { .. } => {
                self.push(line(root), "", Problem::NotAMap(describe(root)));
                return None;
            }
        }
        let mut file = YamlFile::default();
        for (name, v) in self.fields(root, "") {
            match name {
                "domain" => {
                    file.domain = self.string(v, "domain", "domain");
                    file.domain_line = line(v);
                }
                "descriptors" => file.descriptors = self.descriptors(v, ""),
                "metadata" => self.metadata(v, "metadata"),
                other => self.check(v, other),
            }
        }
        Some(file)
    }

    /// A `descriptors:` list below `parent` (empty at the top).
    fn descriptors(&mut self, node: &Node<'_>, parent: &str) -> Vec<YamlDescriptor> {
        let at = join(parent, "descriptors");
        let items = match node::view(node) {
            View::Null => return Vec::new(),
            View::Seq(items) => items,
            _ => {
                self.wrong(node, &at, "descriptors", "a list of descriptors");
                return Vec::new();
            }
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let item_at = format!("{at}[{i}]");
            match node::view(item) {
                View::Map(_) => out.push(self.descriptor(item, item_at)),
                _ => self.push(
                    line(item),
                    &item_at,
                    Problem::NonMapListItem(node::show(item)),
                ),
            }
        }
        out
    }

    fn descriptor(&mut self, node: &Node<'_>, at: String) -> YamlDescriptor {
        let at = match label(node) {
            Some(label) => format!("{at}({label})"),
            None => at,
        };
        let mut d = YamlDescriptor {
            line: line(node),
            ..YamlDescriptor::default()
        };
        for (name, v) in self.fields(node, &at) {
            let field_at = join(&at, name);
            match name {
                "key" => d.key = self.string(v, &field_at, "key"),
                "value" => d.value = self.string(v, &field_at, "value"),
                "rate_limit" => d.rate_limit = self.rate_limit(v, &field_at),
                "descriptors" => d.descriptors = self.descriptors(v, &at),
                "shadow_mode" => d.shadow_mode = self.boolean(v, &field_at, "shadow_mode"),
                "quota_mode" => d.quota_mode = self.boolean(v, &field_at, "quota_mode"),
                "detailed_metric" => {
                    d.detailed_metric = self.boolean(v, &field_at, "detailed_metric")
                }
                "value_to_metric" => {
                    d.value_to_metric = self.boolean(v, &field_at, "value_to_metric")
                }
                "share_threshold" => {
                    d.share_threshold = self.boolean(v, &field_at, "share_threshold")
                }
                "metadata" => self.metadata(v, &field_at),
                _ => self.check(v, &field_at),
            }
        }
        d.at = at;
        d
    }

    fn rate_limit(&mut self, node: &Node<'_>, at: &str) -> Option<YamlRateLimit> {
        match node::view(node) {
            View::Null => return None,
            View::Map(_) => {}
            _ => {
                self.wrong(node, at, "rate_limit", "a map");
                return None;
            }
        }
        let mut r = YamlRateLimit {
            line: line(node),
            unit_line: line(node),
            ..YamlRateLimit::default()
        };
        for (name, v) in self.fields(node, at) {
            let field_at = join(at, name);
            match name {
                "requests_per_unit" => r.requests_per_unit = self.uint32(v, &field_at),
                "unit" => {
                    r.unit = self.string(v, &field_at, "unit");
                    r.unit_line = line(v);
                }
                "unlimited" => r.unlimited = self.boolean(v, &field_at, "unlimited"),
                "name" => r.name = self.string(v, &field_at, "name"),
                "replaces" => r.replaces = self.replaces(v, &field_at),
                "metadata" => self.metadata(v, &field_at),
                _ => self.check(v, &field_at),
            }
        }
        Some(r)
    }

    fn replaces(&mut self, node: &Node<'_>, at: &str) -> Vec<(String, usize)> {
        let items = match node::view(node) {
            View::Null => return Vec::new(),
            View::Seq(items) => items,
            _ => {
                self.wrong(node, at, "replaces", "a list of maps with `name`");
                return Vec::new();
            }
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let item_at = format!("{at}[{i}]");
            if !matches!(node::view(item), View::Map(_)) {
                self.push(
                    line(item),
                    &item_at,
                    Problem::NonMapListItem(node::show(item)),
                );
                continue;
            }
            let mut name = String::new();
            for (field, v) in self.fields(item, &item_at) {
                let field_at = join(&item_at, field);
                match field {
                    "name" => name = self.string(v, &field_at, "name"),
                    "metadata" => self.metadata(v, &field_at),
                    _ => self.check(v, &field_at),
                }
            }
            out.push((name, line(item)));
        }
        out
    }

    /// `metadata`: any map, not checked further (ratelimit turns it into a protobuf Struct).
    fn metadata(&mut self, node: &Node<'_>, at: &str) {
        if !matches!(node::view(node), View::Null | View::Map(_)) {
            self.wrong(node, at, "metadata", "a map");
        }
    }

    /// A string field: any scalar's text as written; null is empty.
    fn string(&mut self, node: &Node<'_>, at: &str, field: &'static str) -> String {
        match node::view(node) {
            View::Null => String::new(),
            View::Scalar {
                text,
                kind: Scalar::Unaccepted,
            } => {
                self.push(line(node), at, Problem::BadScalar(text.into()));
                String::new()
            }
            View::Scalar { text, .. } => text.into(),
            View::Seq(_) | View::Map(_) => {
                self.wrong(node, at, field, "a string");
                String::new()
            }
        }
    }

    /// A boolean field: a YAML 1.1 boolean (`true`, `yes`, `on`, …); null is false.
    fn boolean(&mut self, node: &Node<'_>, at: &str, field: &'static str) -> bool {
        match node::view(node) {
            View::Null => false,
            View::Scalar {
                kind: Scalar::Bool(b),
                ..
            } => b,
            View::Scalar {
                text,
                kind: Scalar::Unaccepted,
            } => {
                self.push(line(node), at, Problem::BadScalar(text.into()));
                false
            }
            _ => {
                self.wrong(node, at, field, "a boolean");
                false
            }
        }
    }

    /// `requests_per_unit`: an integer from 0 to 4294967295; null is 0.
    fn uint32(&mut self, node: &Node<'_>, at: &str) -> u32 {
        match node::view(node) {
            View::Null => 0,
            View::Scalar {
                kind: Scalar::Int(n),
                ..
            } if u32::try_from(n).is_ok() => u32::try_from(n).unwrap_or_default(),
            View::Scalar {
                text,
                kind: Scalar::Unaccepted,
            } => {
                self.push(line(node), at, Problem::BadScalar(text.into()));
                0
            }
            _ => {
                self.wrong(
                    node,
                    at,
                    "requests_per_unit",
                    "an integer from 0 to 4294967295",
                );
                0
            }
        }
    }
}

/// A descriptor's composite key for its path, `key_value` or `key`, read before its fields
/// are decoded so every message about it names it; `None` when it has no key.
fn label(node: &Node<'_>) -> Option<String> {
    let View::Map(map) = node::view(node) else {
        return None;
    };
    let mut list = Vec::new();
    entries(map, &mut list, &mut Vec::new());
    let (mut key, mut value) = ("", "");
    for (k, v) in list {
        let text = match node::view(v) {
            View::Scalar { text, .. } => text,
            _ => "",
        };
        match key_name(k) {
            Ok("key") => key = text,
            Ok("value") => value = text,
            _ => {}
        }
    }
    if key.is_empty() {
        None
    } else if value.is_empty() {
        Some(key.into())
    } else {
        Some(format!("{key}_{value}"))
    }
}
