//! A request's descriptors together, as envoyproxy/ratelimit's `constructLimitsToCheck`
//! weighs them: every matched rule's `replaces` (an unlimited or replaced one's too) drops
//! each other matched rule of that `name`, which is then neither counted nor answered with
//! a limit; an `unlimited` rule is answered OK whatever replaces it.

use std::collections::HashSet;

use super::matcher::{Descriptor, Match};
use super::tree::RlsConfig;

/// What one descriptor of a request gets.
#[derive(Debug, Clone)]
pub enum Applied<'c> {
    /// No rule: unknown domain, no match at the descriptor's depth. Answered OK, no limit.
    NoRule,
    /// An `unlimited` rule: answered OK with `limit_remaining` at its maximum, not counted.
    Unlimited(Match<'c>),
    /// A rule another matched rule `replaces`: answered as [`Applied::NoRule`], not counted.
    Replaced(Match<'c>),
    /// A rule to count and answer (OK regardless when the rule has `shadow_mode`).
    Limited(Match<'c>),
}

impl RlsConfig {
    /// Each of a request's `descriptors` in `domain` matched, `replaces` applied across them.
    pub fn apply<'c>(&'c self, domain: &str, descriptors: &[Descriptor<'_>]) -> Vec<Applied<'c>> {
        let matches: Vec<Option<Match<'c>>> =
            descriptors.iter().map(|d| self.find(domain, d)).collect();
        let replacing: HashSet<String> = matches
            .iter()
            .flatten()
            .flat_map(|m| m.rule().replaces.iter().cloned())
            .collect();
        matches
            .into_iter()
            .map(|m| match m {
                None => Applied::NoRule,
                Some(m) if m.rule().unlimited() => Applied::Unlimited(m),
                Some(m)
                    if m.rule()
                        .name
                        .as_ref()
                        .is_some_and(|n| replacing.contains(n)) =>
                {
                    Applied::Replaced(m)
                }
                Some(m) => Applied::Limited(m),
            })
            .collect()
    }
}
