//! Which rule a request's descriptor gets, as envoyproxy/ratelimit's `GetLimit` finds it:
//! one level per entry, at each level `key_value` first, then the level's wildcard patterns
//! in file order, then `key` alone; no going back up; a rule only if it sits at the level of
//! the descriptor's last entry (a descriptor of two entries never takes a one-level rule).
//! A descriptor's own `limit` (Envoy's override) replaces the search in a known domain.
//!
//! A [`Match`] remembers how each level matched, so the stats key (`detailed_metric`,
//! `value_to_metric`, `share_threshold`) and the counter's key are built only when asked.

use std::borrow::Cow;

use smallvec::SmallVec;

use super::tree::{Node, RlsConfig, Rule};
use super::unit::Limit;

/// One `(key, value)` of a request's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// One descriptor of a request: its entries and Envoy's optional limit override.
#[derive(Debug, Clone, Copy)]
pub struct Descriptor<'a> {
    pub entries: &'a [Entry<'a>],
    pub limit: Option<Limit>,
}

/// The rule a descriptor matched, and how each of its levels matched.
#[derive(Debug, Clone)]
pub struct Match<'c> {
    rule: Cow<'c, Rule>,
    /// One per entry for a config rule; empty for an override.
    levels: SmallVec<[Level<'c>; 4]>,
}

#[derive(Debug, Clone, Copy)]
struct Level<'c> {
    node: &'c Node,
    how: How<'c>,
}

#[derive(Debug, Clone, Copy)]
enum How<'c> {
    /// By `key_value`.
    Exact,
    /// By this wildcard pattern (`key_val*`).
    Wildcard(&'c str),
    /// By `key` alone.
    KeyOnly,
}

impl RlsConfig {
    /// The rule for `descriptor` in `domain`: `None` for an unknown domain, a descriptor
    /// without entries or one no rule matches at its depth. With an override `limit` and a
    /// known domain, a rule made of it (not shadowed, unnamed, replacing nothing), named by
    /// the descriptor's own `DOMAIN.key_value.key_value`, as ratelimit does.
    pub fn find<'c>(&'c self, domain: &str, descriptor: &Descriptor<'_>) -> Option<Match<'c>> {
        let root = self.domains.get(domain)?;
        if let Some(limit) = descriptor.limit {
            let rule = Rule {
                policy: descriptor_key(domain, descriptor.entries),
                name: None,
                limit: Some(limit),
                shadow_mode: false,
                replaces: Vec::new(),
                detailed_metric: false,
            };
            return Some(Match {
                rule: Cow::Owned(rule),
                levels: SmallVec::new(),
            });
        }
        let last = descriptor.entries.len().checked_sub(1)?;
        let mut node = root;
        let mut levels = SmallVec::new();
        let mut found = None;
        let mut key_value = String::new();
        for (i, entry) in descriptor.entries.iter().enumerate() {
            key_value.clear();
            key_value.push_str(entry.key);
            key_value.push('_');
            key_value.push_str(entry.value);
            let mut how = How::Exact;
            let mut next = node.children.get(key_value.as_str());
            if next.is_none()
                && let Some(w) = node
                    .wildcards
                    .iter()
                    .find(|w| wildcard_match(&w.parts, &key_value))
            {
                next = node.children.get(&w.key);
                how = How::Wildcard(&w.key);
            }
            if next.is_none() {
                next = node.children.get(entry.key);
                how = How::KeyOnly;
            }
            let Some(next) = next else { break };
            levels.push(Level { node: next, how });
            if i == last {
                found = next.rule;
            }
            if next.children.is_empty() {
                break;
            }
            node = next;
        }
        found.map(|r| Match {
            rule: Cow::Borrowed(&self.rules[r]),
            levels,
        })
    }
}

impl Match<'_> {
    /// The matched rule (for an override, the one made of it).
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// Whether the rule came from the descriptor's `limit` override, not the config.
    pub fn is_override(&self) -> bool {
        matches!(self.rule, Cow::Owned(_))
    }

    /// The stats key ratelimit gives this request (`descriptor` is the one matched): the
    /// rule's policy name, unless `detailed_metric` (every entry's `key_value`, the wildcard
    /// pattern for a `share_threshold` level), or `value_to_metric` levels and wildcard
    /// levels that write their value (the request's value, or the pattern's with
    /// `share_threshold`).
    pub fn stats_key<'m>(&'m self, domain: &str, descriptor: &Descriptor<'_>) -> Cow<'m, str> {
        let entries = descriptor.entries;
        if self.levels.is_empty() {
            return Cow::Borrowed(&self.rule.policy);
        }
        let mut key = String::from(domain);
        if self.rule.detailed_metric {
            let shared = entries
                .iter()
                .enumerate()
                .any(|(i, e)| self.share_pattern(i, e).is_some());
            for (i, e) in entries.iter().enumerate() {
                key.push('.');
                key.push_str(e.key);
                if let Some(pattern) = shared.then(|| self.share_pattern(i, e)).flatten() {
                    key.push('_');
                    key.push_str(pattern);
                } else if !shared || !e.value.is_empty() {
                    key.push('_');
                    key.push_str(e.value);
                }
            }
            return Cow::Owned(key);
        }
        for (i, (level, e)) in self.levels.iter().zip(entries).enumerate() {
            let value = match level.how {
                How::Wildcard(pattern) => match self.share_pattern(i, e) {
                    Some(shared) => shared,
                    None if level.node.value_to_metric => e.value,
                    None => trim_key(pattern, e.key),
                },
                How::Exact => e.value,
                How::KeyOnly if level.node.value_to_metric => e.value,
                How::KeyOnly => "",
            };
            key.push('.');
            key.push_str(e.key);
            if !value.is_empty() {
                key.push('_');
                key.push_str(value);
            }
        }
        if key == self.rule.policy {
            Cow::Borrowed(&self.rule.policy)
        } else {
            Cow::Owned(key)
        }
    }

    /// The key the limit counts this request under, ratelimit's cache key without its prefix
    /// and window: `DOMAIN_` then `key_value_` for each entry, a `share_threshold` level's
    /// wildcard pattern in place of its value (so all values matching it share one count).
    /// Like ratelimit's, the key does not escape `_`: within one rule, values holding `_`
    /// can collide (`a_b`+`c` and `a`+`b_c` under keys of the same names).
    pub fn key(&self, domain: &str, descriptor: &Descriptor<'_>) -> String {
        let entries = descriptor.entries;
        let len = domain.len()
            + 1
            + entries
                .iter()
                .map(|e| e.key.len() + e.value.len() + 2)
                .sum::<usize>();
        let mut key = String::with_capacity(len);
        key.push_str(domain);
        key.push('_');
        for (i, e) in entries.iter().enumerate() {
            key.push_str(e.key);
            key.push('_');
            key.push_str(self.share_pattern(i, e).unwrap_or(e.value));
            key.push('_');
        }
        key
    }

    /// Level `i`'s wildcard value (`files/*`) if it matched by a `share_threshold` pattern.
    fn share_pattern<'p>(&'p self, i: usize, entry: &Entry<'_>) -> Option<&'p str> {
        let level = self.levels.get(i)?;
        match level.how {
            How::Wildcard(pattern) if level.node.share_threshold => {
                Some(trim_key(pattern, entry.key))
            }
            _ => None,
        }
    }
}

/// Go's `strings.TrimPrefix(pattern, key + "_")`.
fn trim_key<'p>(pattern: &'p str, key: &str) -> &'p str {
    pattern
        .strip_prefix(key)
        .and_then(|rest| rest.strip_prefix('_'))
        .unwrap_or(pattern)
}

/// ratelimit's `descriptorKey`: `DOMAIN.` and each entry's `key` or `key_value`, by dots.
fn descriptor_key(domain: &str, entries: &[Entry<'_>]) -> String {
    let mut key = String::new();
    for e in entries {
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(e.key);
        if !e.value.is_empty() {
            key.push('_');
            key.push_str(e.value);
        }
    }
    format!("{domain}.{key}")
}

/// ratelimit's `wildcardMatch`: `value` against a pattern split at its `*`s, each `*` any
/// run of characters (none too): the first part a prefix, the last a suffix, the middle
/// ones in order between them.
pub(crate) fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    if value.len() < parts.iter().map(String::len).sum::<usize>() {
        return false;
    }
    let mut remaining = &value[first.len()..value.len() - last.len()];
    for part in middle {
        match remaining.find(part.as_str()) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    true
}
