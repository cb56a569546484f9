//! `[layers.NAME]` checked: each name a plain label (it labels the decision counters, as a
//! route's name does), its policies resolved as a route's are (same rules, same messages),
//! and only what a layer can decide: a service that embeds the limiter has no peer
//! transport, so `owner` and `gossip` policies are refused here rather than never decided.

use super::Validator;
use crate::config::raw::RawConfig;
use crate::config::{Account, Policy, RouteSpec, Site};

impl Validator {
    pub(super) fn layers(
        &mut self,
        config: &RawConfig,
        policies: &[Policy],
        account: Option<&Account>,
    ) -> Vec<RouteSpec> {
        config
            .layers
            .iter()
            .map(|(name, l)| {
                let at = |k: &str| format!("layers.{name}.{k}");
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
                {
                    self.fail(
                        &format!("layers.{name}"),
                        "layer names may use only letters, digits, `_`, `-` and `.`",
                    );
                }
                let indexes = self.route_policies(&at, &l.policies, policies, config);
                for (j, wanted) in l.policies.iter().enumerate() {
                    let Some(policy) = policies.iter().find(|q| q.name == *wanted) else {
                        continue;
                    };
                    if policy.spend.request_bytes {
                        self.fail(
                            &at(&format!("policies[{j}]")),
                            format!(
                                "policy `{}` costs `request_bytes`, which the gateway counts as it forwards the body: a layer does not see the body its service reads",
                                policy.name
                            ),
                        );
                    }
                    if let Some(part) = policy.key.iter().find(|k| k.reads_body()) {
                        self.fail(
                            &at(&format!("policies[{j}]")),
                            format!(
                                "policy `{}` keys on `{}`, read from the request body, which the gateway reads before the limit step: a layer does not read its service's body",
                                policy.name,
                                part
                            ),
                        );
                    }
                    if matches!(policy.site, Site::Owner | Site::Gossip) {
                        let site = policy.site.name();
                        self.fail(
                            &at(&format!("policies[{j}]")),
                            format!(
                                "policy `{}` is decided at site `{site}`, which needs the gateway's peer transport: a layer decides `local`, `split`, `central` and `lease` policies",
                                policy.name
                            ),
                        );
                    }
                }
                if l.require_account && account.is_none() {
                    self.fail(
                        &at("require_account"),
                        "needs an [account] section to read the account from",
                    );
                }
                RouteSpec {
                    name: name.clone(),
                    policies: indexes,
                    mode: l.mode,
                    on_store_error: l.on_store_error,
                    require_account: l.require_account,
                }
            })
            .collect()
    }
}
