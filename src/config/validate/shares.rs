//! A node's share of a policy (the L/N split): `burst / N` for gcra and token_bucket,
//! `limit / N` for the others, at least 1. A request costing more than that share is
//! denied on every node forever, so a config that would enforce such a share is rejected
//! for `N = [cluster] expected_nodes` (membership may later say another N; the 429 then
//! omits `Retry-After` rather than promise centuries). Two places enforce a share: `split`
//! policies always, and central or lease policies on a route with
//! `on_store_error = "local"` while the store is down.

use std::num::NonZeroU32;

use super::Validator;
use crate::config::raw::{AlgorithmName, OnStoreError, Site};
use crate::config::{Policy, Route};

/// What a node's share is taken of (`burst` or `limit`), the whole, and the share.
fn node_share(p: &Policy, nodes: NonZeroU32) -> (&'static str, NonZeroU32, u32) {
    let (what, whole) = match p.algorithm {
        AlgorithmName::Gcra | AlgorithmName::TokenBucket => ("burst", p.burst),
        _ => ("limit", p.limit),
    };
    (what, whole, (whole.get() / nodes.get()).max(1))
}

impl Validator {
    /// Every `split` policy's cost must fit a node's share.
    pub(super) fn split_shares(&mut self, policies: &[Policy], nodes: NonZeroU32) {
        for p in policies.iter().filter(|p| p.site == Site::Split) {
            let (what, whole, share) = node_share(p, nodes);
            if p.cost.get() > share {
                self.fail(
                    &format!("policies.{}.cost", p.name),
                    format!(
                        "{} is more than a split node's share of the {what} ({whole} / {nodes} \
                         expected nodes = {share}): no request could ever pass",
                        p.cost
                    ),
                );
            }
        }
    }

    /// A central, lease or owner policy on a route with `on_store_error = "local"` falls
    /// back to a node's share while the store (or the key's owner) is down: its cost must fit that share, or the fallback
    /// denies every request until the store returns.
    pub(super) fn fallback_shares(
        &mut self,
        routes: &[Route],
        policies: &[Policy],
        nodes: NonZeroU32,
    ) {
        for r in routes
            .iter()
            .filter(|r| r.on_store_error == OnStoreError::Local)
        {
            let stored = r.policies.iter().filter_map(|&i| policies.get(i));
            for p in stored.filter(|p| matches!(p.site, Site::Central | Site::Lease | Site::Owner))
            {
                let (what, whole, share) = node_share(p, nodes);
                if p.cost.get() > share {
                    self.fail(
                        &format!("policies.{}.cost", p.name),
                        format!(
                            "{} is more than a node's share of the {what} ({whole} / {nodes} \
                             expected nodes = {share}) that route `{}` falls back to with \
                             on_store_error = \"local\": no request could pass while the \
                             store is down",
                            p.cost, r.name
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::raw::RawPolicy;

    fn policies(v: &mut Validator, policy: &str) -> Vec<Policy> {
        let raw: BTreeMap<String, RawPolicy> = toml::from_str(policy).expect("a policy table");
        let policies = v.policies(&raw);
        assert_eq!(v.problem_count(), 0, "valid on its own");
        policies
    }

    /// Problems of `split_shares` for one policy at `nodes`.
    fn split_problems(policy: &str, nodes: u32) -> usize {
        let mut v = Validator::default();
        let policies = policies(&mut v, policy);
        v.split_shares(&policies, NonZeroU32::new(nodes).expect("non-zero"));
        v.problem_count()
    }

    fn gcra(site: &str) -> String {
        format!(
            "[p]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 100\nperiod = \"1s\"\nburst = 8\ncost = 3\nsite = \"{site}\"\n"
        )
    }

    #[test]
    fn a_split_cost_above_a_nodes_share_is_rejected() {
        assert_eq!(split_problems(&gcra("split"), 2), 0, "8 / 2 = 4 ≥ 3");
        assert_eq!(split_problems(&gcra("split"), 4), 1, "8 / 4 = 2 < 3");
        assert_eq!(split_problems(&gcra("central"), 4), 0, "not split");
        let window = "[p]\nkey = [\"ip\"]\nalgorithm = \"sliding_window\"\nlimit = 10\nperiod = \"1s\"\ncost = 3\nsite = \"split\"\n";
        assert_eq!(split_problems(window, 3), 0, "10 / 3 = 3");
        assert_eq!(split_problems(window, 4), 1, "10 / 4 = 2");
    }

    /// Problems of `fallback_shares` for one policy on one route at `nodes` (the message
    /// is checked through `tollgate check` on tests/common/fixtures/invalid).
    fn fallback_problems(policy: &str, on_store_error: OnStoreError, nodes: u32) -> usize {
        let mut v = Validator::default();
        let policies = policies(&mut v, policy);
        let route = Route {
            name: "api".into(),
            host: None,
            path_prefix: "/".into(),
            methods: Vec::new(),
            upstream: 0,
            strip_prefix: false,
            policies: vec![0],
            mode: Default::default(),
            on_store_error,
            case_insensitive: false,
            upgrades: Vec::new(),
            max_body_bytes: None,
            require_account: false,
            key_body: None,
        };
        v.fallback_shares(
            &[route],
            &policies,
            NonZeroU32::new(nodes).expect("non-zero"),
        );
        v.problem_count()
    }

    #[test]
    fn a_local_fallback_share_below_the_cost_is_rejected() {
        use OnStoreError::{Closed, Local, Open};
        let local = |site: &str, nodes| fallback_problems(&gcra(site), Local, nodes);
        assert_eq!(local("central", 2), 0, "8 / 2 = 4 ≥ 3");
        assert_eq!(local("central", 4), 1, "8 / 4 = 2 < 3");
        assert_eq!(local("lease", 4), 1, "a lease falls back too");
        assert_eq!(local("local", 4), 0, "no store, no fallback");
        assert_eq!(local("split", 4), 0, "split_shares reports it");
        for other in [Open, Closed] {
            assert_eq!(fallback_problems(&gcra("central"), other, 4), 0);
        }
        let window = "[p]\nkey = [\"ip\"]\nalgorithm = \"sliding_window\"\nlimit = 10\nperiod = \"1s\"\ncost = 3\nsite = \"central\"\n";
        assert_eq!(fallback_problems(window, Local, 3), 0, "10 / 3 = 3");
        assert_eq!(fallback_problems(window, Local, 4), 1, "10 / 4 = 2");
    }
}
