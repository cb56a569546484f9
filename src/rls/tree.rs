//! The YAML files built into one [`RlsConfig`]: per domain, a tree of descriptors keyed as
//! envoyproxy/ratelimit keys them (`key_value`, or `key` for a descriptor without a value),
//! the wildcard patterns of each level in file order, and a flat list of [`Rule`]s, one per
//! `rate_limit` block. What ratelimit's `loadDescriptors` and `loadConfig` refuse is refused
//! here, every problem reported.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::error::{Problem, RlsError};
use super::unit::{Limit, Unit};
use super::yaml::{YamlDescriptor, YamlFile};

/// The rate limit service's config: every domain's rules, ready for [`RlsConfig::find`].
#[derive(Debug, Clone, Default)]
pub struct RlsConfig {
    pub(crate) domains: HashMap<String, Node>,
    pub(crate) rules: Vec<Rule>,
}

/// One `rate_limit` block: what tollgate will run as one policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The policy's name, as ratelimit names the rule's stats: the domain and each level's
    /// `key` or `key_value` joined by dots, a wildcard value as written
    /// (`messaging.message_type_marketing.to_number`, `test-domain.wild_foo*`). Stable: it
    /// depends on the config only. (A request's own stats key, which `detailed_metric` and
    /// `value_to_metric` may extend with its values, is [`Match::stats_key`].)
    ///
    /// [`Match::stats_key`]: super::Match::stats_key
    pub policy: String,
    /// `rate_limit.name`: what other rules' `replaces` name; `None` when absent.
    pub name: Option<String>,
    /// The limit; `None` for `unlimited: true` (answered OK without counting).
    pub limit: Option<Limit>,
    /// `shadow_mode: true`: counted, but the answer is always OK.
    pub shadow_mode: bool,
    /// The `name`s of the rules this one drops when both match one request.
    pub replaces: Vec<String>,
    /// `detailed_metric: true`: the request's stats key carries its full values.
    pub detailed_metric: bool,
}

impl Rule {
    /// `unlimited: true`.
    pub fn unlimited(&self) -> bool {
        self.limit.is_none()
    }
}

/// One level of a domain's tree (the domain itself is the root).
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    /// The next level, by `key_value` or `key` (wildcard patterns too, under their text).
    pub(crate) children: HashMap<String, Node>,
    /// The children whose `key_value` holds a `*`, in file order: the first that matches wins.
    pub(crate) wildcards: Vec<Wildcard>,
    /// Index in [`RlsConfig::rules`] of this level's `rate_limit`.
    pub(crate) rule: Option<usize>,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: bool,
}

/// A child whose `key_value` has a `*`: its text and the text split at each `*`.
#[derive(Debug, Clone)]
pub(crate) struct Wildcard {
    pub(crate) key: String,
    pub(crate) parts: Vec<String>,
}

impl RlsConfig {
    /// The domains, in no order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// Every rule of every domain, each once: the policies to build.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rules of `domain`, in the order they were read (none for an unknown domain).
    pub fn domain_rules(&self, domain: &str) -> Vec<&Rule> {
        fn walk(node: &Node, out: &mut Vec<usize>) {
            out.extend(node.rule);
            for child in node.children.values() {
                walk(child, out);
            }
        }
        let mut found = Vec::new();
        if let Some(root) = self.domains.get(domain) {
            walk(root, &mut found);
        }
        found.sort_unstable();
        found.into_iter().map(|i| &self.rules[i]).collect()
    }
}

/// `files` (in load order) built into a config; problems pushed to `errors`.
pub(crate) fn build(files: Vec<(PathBuf, YamlFile)>, errors: &mut Vec<RlsError>) -> RlsConfig {
    let mut config = RlsConfig::default();
    let mut first_file: HashMap<String, PathBuf> = HashMap::new();
    for (path, file) in files {
        let mut b = Builder {
            file: &path,
            errors,
            rules: &mut config.rules,
        };
        if file.domain.is_empty() {
            b.push(file.domain_line, "domain", Problem::EmptyDomain);
            continue;
        }
        if let Some(first) = first_file.get(&file.domain) {
            let problem = Problem::DuplicateDomain {
                domain: file.domain.clone(),
                first: first.display().to_string(),
            };
            b.push(file.domain_line, "domain", problem);
            continue;
        }
        let mut root = Node::default();
        b.load(&mut root, &format!("{}.", file.domain), file.descriptors);
        first_file.insert(file.domain.clone(), path.clone());
        config.domains.insert(file.domain, root);
    }
    config
}

struct Builder<'a> {
    file: &'a Path,
    errors: &'a mut Vec<RlsError>,
    rules: &'a mut Vec<Rule>,
}

impl Builder<'_> {
    fn push(&mut self, line: usize, at: &str, problem: Problem) {
        self.errors.push(RlsError {
            file: self.file.to_path_buf(),
            line,
            at: at.into(),
            problem,
        });
    }

    /// ratelimit's `loadDescriptors`: `descriptors` as `node`'s children, under `parent`
    /// (the policy name so far, ending in a dot).
    fn load(&mut self, node: &mut Node, parent: &str, descriptors: Vec<YamlDescriptor>) {
        for d in descriptors {
            if d.key.is_empty() {
                self.push(d.line, &d.at, Problem::EmptyKey);
                continue;
            }
            let final_key = if d.value.is_empty() {
                d.key.clone()
            } else {
                format!("{}_{}", d.key, d.value)
            };
            let policy = format!("{parent}{final_key}");
            if node.children.contains_key(&final_key) {
                self.push(d.line, &d.at, Problem::DuplicateKey(policy));
                continue;
            }
            let mut child = Node {
                value_to_metric: d.value_to_metric,
                share_threshold: d.share_threshold,
                ..Node::default()
            };
            if let Some(rule) = self.rule(&d, &policy) {
                child.rule = Some(self.rules.len());
                self.rules.push(rule);
            }
            let wildcard = final_key.contains('*');
            if d.share_threshold && !wildcard {
                let problem = Problem::ShareThresholdWithoutWildcard(final_key.clone());
                self.push(d.line, &format!("{}.share_threshold", d.at), problem);
            }
            if wildcard {
                node.wildcards.push(Wildcard {
                    key: final_key.clone(),
                    parts: final_key.split('*').map(str::to_owned).collect(),
                });
            }
            self.load(&mut child, &format!("{policy}."), d.descriptors);
            node.children.insert(final_key, child);
        }
    }

    /// The descriptor's `rate_limit` as a rule, or `None` (absent, or refused: pushed).
    fn rule(&mut self, d: &YamlDescriptor, policy: &str) -> Option<Rule> {
        let r = d.rate_limit.as_ref()?;
        let at = format!("{}.rate_limit", d.at);
        let unit = Unit::parse(&r.unit);
        let mut ok = true;
        match (r.unlimited, unit) {
            (true, Some(_)) => {
                self.push(
                    r.unit_line,
                    &format!("{at}.unit"),
                    Problem::UnlimitedWithUnit,
                );
                ok = false;
            }
            (false, None) => {
                let problem = Problem::BadUnit(r.unit.clone());
                self.push(r.unit_line, &format!("{at}.unit"), problem);
                ok = false;
            }
            _ => {}
        }
        for (i, (name, line)) in r.replaces.iter().enumerate() {
            let problem = if name.is_empty() {
                Problem::ReplacesEmpty
            } else if *name == r.name {
                Problem::ReplacesSelf
            } else {
                continue;
            };
            self.push(*line, &format!("{at}.replaces[{i}]"), problem);
            ok = false;
        }
        ok.then(|| Rule {
            policy: policy.into(),
            name: (!r.name.is_empty()).then(|| r.name.clone()),
            limit: unit.filter(|_| !r.unlimited).map(|unit| Limit {
                requests_per_unit: r.requests_per_unit,
                unit,
            }),
            shadow_mode: d.shadow_mode,
            replaces: r.replaces.iter().map(|(n, _)| n.clone()).collect(),
            detailed_metric: d.detailed_metric,
        })
    }
}
