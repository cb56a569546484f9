//! The matcher and the loader on README examples 1–11 of envoyproxy/ratelimit (which rule:
//! `examples_rules.rs`; which stats and counter keys: `examples_keys.rs`) and on its test
//! corpus's trickier cases (`corpus.rs`, its stats keys `corpus_stats.rs`).

mod corpus;
mod corpus_stats;
mod examples_keys;
mod examples_rules;

use std::path::PathBuf;

use super::{Applied, Descriptor, Entry, Limit, Match, RlsConfig, Unit};

/// One file's config, or the panic message listing its problems.
pub(super) fn config(yaml: &str) -> RlsConfig {
    RlsConfig::from_texts(&[(PathBuf::from("test.yaml"), yaml.to_owned())])
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Entries from pairs.
pub(super) fn entries<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<Entry<'a>> {
    pairs
        .iter()
        .map(|&(key, value)| Entry { key, value })
        .collect()
}

/// The rule `pairs` get in `domain`: its policy, limit and stats key, or `None`.
pub(super) fn rule(
    c: &RlsConfig,
    domain: &str,
    pairs: &[(&str, &str)],
) -> Option<(String, Option<Limit>, String)> {
    let e = entries(pairs);
    let d = Descriptor {
        entries: &e,
        limit: None,
    };
    let m: Match<'_> = c.find(domain, &d)?;
    Some((
        m.rule().policy.clone(),
        m.rule().limit,
        m.stats_key(domain, &d).into_owned(),
    ))
}

pub(super) fn per(requests_per_unit: u32, unit: Unit) -> Option<Limit> {
    Some(Limit {
        requests_per_unit,
        unit,
    })
}

/// What each of a request's descriptors gets: "none", "unlimited", "replaced:POLICY" or
/// "limited:POLICY".
pub(super) fn applied(c: &RlsConfig, domain: &str, descriptors: &[&[(&str, &str)]]) -> Vec<String> {
    let owned: Vec<Vec<Entry<'_>>> = descriptors.iter().map(|p| entries(p)).collect();
    let ds: Vec<Descriptor<'_>> = owned
        .iter()
        .map(|e| Descriptor {
            entries: e,
            limit: None,
        })
        .collect();
    c.apply(domain, &ds)
        .iter()
        .map(|a| match a {
            Applied::NoRule => "none".to_owned(),
            Applied::Unlimited(m) => format!("unlimited:{}", m.rule().policy),
            Applied::Replaced(m) => format!("replaced:{}", m.rule().policy),
            Applied::Limited(m) => format!("limited:{}", m.rule().policy),
        })
        .collect()
}
