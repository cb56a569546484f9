//! A saphyr node seen as go-yaml v2 sees it (null, a typed scalar, a list, a map with its
//! `<<` merges expanded), and ratelimit's key check (`validateYamlKeys`): every map key,
//! at any depth but inside `metadata`, a string from one fixed list; every list item a map;
//! every leaf a string, an int, a bool or null.

use saphyr::{AnnotatedMapping, MarkedYaml, YamlData};
use saphyr_parser::ScalarStyle;

use crate::rls::error::Problem;
use crate::rls::scalar::{Scalar, resolve};

/// ratelimit's `validKeys`: the keys accepted in any map of the file, at any level (a key
/// valid elsewhere, such as `unit` in a descriptor, is accepted and ignored, as there).
pub(crate) const VALID_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

pub(crate) type Node<'i> = MarkedYaml<'i>;

/// A node's shape once typed.
pub(crate) enum View<'n, 'i> {
    Null,
    Scalar { text: &'n str, kind: Scalar },
    Seq(&'n [Node<'i>]),
    Map(&'n AnnotatedMapping<'i, Node<'i>>),
}

pub(crate) fn view<'n, 'i>(node: &'n Node<'i>) -> View<'n, 'i> {
    match &node.data {
        YamlData::Representation(text, style, tag) => match resolve(text, *style, tag.as_deref()) {
            Scalar::Null => View::Null,
            kind => View::Scalar { text, kind },
        },
        YamlData::Sequence(items) => View::Seq(items),
        YamlData::Mapping(map) => View::Map(map),
        YamlData::Tagged(_, inner) => view(inner),
        // Scalars stay as written (`early_parse` off) and aliases are resolved by the loader.
        YamlData::Value(_) | YamlData::Alias(_) | YamlData::BadValue => View::Null,
    }
}

/// The node's 1-based line.
pub(crate) fn line(node: &Node<'_>) -> usize {
    node.span.start.line()
}

/// How a value shows in a message: go-yaml's tag and the text.
pub(crate) fn describe(node: &Node<'_>) -> String {
    match view(node) {
        View::Null => "!!null".into(),
        View::Scalar { text, kind } => {
            let tag = match kind {
                Scalar::Bool(_) => "!!bool",
                Scalar::Int(_) => "!!int",
                Scalar::Unaccepted => "!!float",
                Scalar::Null | Scalar::Str => "!!str",
            };
            format!("{tag} `{text}`")
        }
        View::Seq(_) => "!!seq".into(),
        View::Map(_) => "!!map".into(),
    }
}

/// A list item or key as Go's `%v` prints go-yaml's value in ratelimit's messages
/// (`yes` is `true`, `0x10` is `16`).
pub(crate) fn show(node: &Node<'_>) -> String {
    match view(node) {
        View::Null => "<nil>".into(),
        View::Scalar {
            kind: Scalar::Bool(b),
            ..
        } => b.to_string(),
        View::Scalar {
            kind: Scalar::Int(n),
            ..
        } => n.to_string(),
        View::Scalar { text, .. } => text.into(),
        View::Seq(_) => "a list".into(),
        View::Map(_) => "a map".into(),
    }
}

/// A map's entries in order, each `<<: *anchor` merge expanded where it stands (go-yaml v2
/// applies merges; saphyr leaves `<<` as a key). The later of two equal keys wins when the
/// caller decodes them in order. A merge of anything but maps is a problem.
pub(crate) fn entries<'n, 'i>(
    map: &'n AnnotatedMapping<'i, Node<'i>>,
    out: &mut Vec<(&'n Node<'i>, &'n Node<'i>)>,
    problems: &mut Vec<(usize, Problem)>,
) {
    for (k, v) in map {
        if !is_merge(k) {
            out.push((k, v));
            continue;
        }
        match view(v) {
            View::Map(m) => entries(m, out, problems),
            // In a list of merged maps the first takes precedence: expand it last.
            View::Seq(items) => {
                for item in items.iter().rev() {
                    match view(item) {
                        View::Map(m) => entries(m, out, problems),
                        _ => problems.push((line(item), merge_problem(item))),
                    }
                }
            }
            _ => problems.push((line(v), merge_problem(v))),
        }
    }
}

fn merge_problem(node: &Node<'_>) -> Problem {
    Problem::WrongType {
        field: "<<",
        expected: "a map or a list of maps to merge",
        found: describe(node),
    }
}

fn is_merge(key: &Node<'_>) -> bool {
    matches!(&key.data, YamlData::Representation(text, ScalarStyle::Plain, None) if text == "<<")
}

/// A key's name if ratelimit accepts it, else the problem.
pub(crate) fn key_name<'n>(key: &'n Node<'_>) -> Result<&'n str, Problem> {
    match view(key) {
        View::Scalar {
            text,
            kind: Scalar::Str,
        } => {
            if VALID_KEYS.contains(&text) {
                Ok(text)
            } else {
                Err(Problem::UnknownKey(text.into()))
            }
        }
        _ => Err(Problem::NonStringKey(show(key))),
    }
}

/// ratelimit's key check of a value no field of ours decodes (or decodes no further):
/// problems found below `node`, each with its line and the path below `at`.
pub(crate) fn check_any(node: &Node<'_>, at: &str, found: &mut Vec<(usize, String, Problem)>) {
    match view(node) {
        View::Null => {}
        View::Scalar { text, kind } => {
            if kind == Scalar::Unaccepted {
                found.push((line(node), at.into(), Problem::BadScalar(text.into())));
            }
        }
        View::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("{at}[{i}]");
                match view(item) {
                    View::Map(_) => check_any(item, &at, found),
                    _ => found.push((line(item), at, Problem::NonMapListItem(show(item)))),
                }
            }
        }
        View::Map(map) => {
            let mut list = Vec::new();
            let mut merges = Vec::new();
            entries(map, &mut list, &mut merges);
            for (l, p) in merges {
                found.push((l, at.into(), p));
            }
            for (k, v) in list {
                match key_name(k) {
                    Err(p) => found.push((line(k), at.into(), p)),
                    // Arbitrary below `metadata`, as in ratelimit.
                    Ok("metadata") => {}
                    Ok(name) => check_any(v, &join(at, name), found),
                }
            }
        }
    }
}

/// `at.name`, or `name` at the top.
pub(crate) fn join(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.into()
    } else {
        format!("{at}.{name}")
    }
}
