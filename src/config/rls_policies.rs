//! `[rls]`'s YAML as the limiter runs it: each counted rule one policy named as the rule
//! (`DOMAIN.key_value.subkey`, ratelimit's stats key), N per unit at the domain's site and
//! algorithm, shadow when the rule says `shadow_mode`, keyed by the key the service gives
//! (`key = [Given]`: a descriptor's values); each domain one route named after it.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroUsize};

use super::raw::defaults;
use super::rls::{RawRls, route_on_store_error};
use super::{KeyPart, LeaseKnobs, Mode, Policy, RouteSpec};
use crate::rls::Domain;
use crate::rls::RlsConfig;

/// What [`build`] makes.
pub(super) struct Built {
    pub domains: BTreeMap<String, Domain>,
    pub policies: Vec<Policy>,
    pub routes: Vec<RouteSpec>,
}

/// The policies and routes of `yaml`, after `policies_before` policies of the config's own. A rule that counts nothing — `unlimited`, or a limit of 0,
/// which refuses every request (ratelimit's README, example 3) — is no policy: the service
/// answers it without asking the limiter.
pub(super) fn build(raw: &RawRls, yaml: &RlsConfig, policies_before: usize) -> Built {
    let mut names: Vec<&str> = yaml.domains().collect();
    names.sort_unstable();
    let (mut domains, mut policies, mut routes) = (BTreeMap::new(), Vec::new(), Vec::new());
    for name in names {
        let own = raw.domains.get(name);
        let site = own.and_then(|d| d.site).unwrap_or(raw.site);
        let algorithm = own.and_then(|d| d.algorithm).unwrap_or(raw.algorithm);
        let on_store_error = own
            .and_then(|d| d.on_store_error)
            .unwrap_or(raw.on_store_error);
        let mut asked = Vec::new();
        for rule in yaml.domain_rules(name) {
            let Some(limit) = rule.limit else { continue };
            let Some(n) = NonZeroU32::new(limit.requests_per_unit) else {
                continue;
            };
            asked.push(policies_before + policies.len());
            policies.push(Policy {
                name: rule.policy.clone(),
                key: vec![KeyPart::Given],
                algorithm,
                limit: n,
                period: limit.period(),
                burst: n,
                cost: NonZeroU32::MIN,
                max_delay: std::time::Duration::ZERO,
                mode: rule.shadow_mode.then_some(Mode::Shadow),
                max_keys: NonZeroUsize::new(defaults::max_keys() as usize)
                    .unwrap_or(NonZeroUsize::MIN),
                site,
                local_first: false,
                lease: LeaseKnobs::default(),
                spend: Default::default(),
                on_missing_key: None,
                show_values: Vec::new(),
            });
        }
        routes.push(RouteSpec {
            name: name.to_owned(),
            policies: asked,
            mode: Mode::Enforce,
            on_store_error: route_on_store_error(on_store_error),
            require_account: false,
        });
        domains.insert(name.to_owned(), Domain { on_store_error });
    }
    Built {
        domains,
        policies,
        routes,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::config::{AlgorithmName, OnStoreError, Site};

    const YAML: &str = r#"
domain: messaging
descriptors:
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
"#;

    fn raw(toml: &str) -> RawRls {
        toml::from_str(&format!("listen = \"127.0.0.1:0\"\nconfig = \"x\"\n{toml}")).unwrap()
    }

    /// Each counted rule one policy named as the rule, keyed by the caller; unlimited and
    /// zero rules none; the domain a route of them, after the config's own policies.
    #[test]
    fn each_counted_rule_is_a_given_key_policy_of_its_domains_route() {
        let yaml = RlsConfig::from_texts(&[(PathBuf::from("a.yaml"), YAML.into())]).unwrap();
        let built = build(&raw(""), &yaml, 3);
        let names: Vec<&str> = built.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["messaging.to_number", "messaging.shadow"]);
        let p = &built.policies[0];
        assert_eq!(p.key, [KeyPart::Given]);
        assert_eq!(
            (p.limit.get(), p.period),
            (100, Duration::from_secs(86_400))
        );
        assert_eq!(p.algorithm, AlgorithmName::SlidingWindow);
        assert_eq!((p.site, p.mode), (Site::Local, None));
        assert_eq!(built.policies[1].mode, Some(Mode::Shadow));
        assert_eq!(built.routes.len(), 1);
        assert_eq!(built.routes[0].name, "messaging");
        assert_eq!(built.routes[0].policies, [3, 4]);
        assert_eq!(built.routes[0].on_store_error, OnStoreError::Open);
    }

    /// A domain's own settings win over `[rls]`'s; `error` fails closed on the route.
    #[test]
    fn a_domain_table_overrides_the_sections_settings() {
        let yaml = RlsConfig::from_texts(&[(PathBuf::from("a.yaml"), YAML.into())]).unwrap();
        let raw = raw(
            "site = \"split\"\n[domains.messaging]\nalgorithm = \"gcra\"\non_store_error = \"error\"\n",
        );
        let built = build(&raw, &yaml, 0);
        let p = &built.policies[0];
        assert_eq!((p.site, p.algorithm), (Site::Split, AlgorithmName::Gcra));
        assert_eq!(built.routes[0].on_store_error, OnStoreError::Closed);
        let domain = built.domains["messaging"];
        assert_eq!(domain.on_store_error, crate::rls::OnStoreError::Error);
    }
}
