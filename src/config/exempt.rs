//! `[exempt]` and `[policies.NAME.exempt]`: clients no policy (or one policy) ever denies —
//! health checkers, an internal network, a partner's account. Validated here; the limit
//! step skips the exempt policies of a request and counts them as `outcome="exempt"`.
//!
//! Accounts are matched on their keyed hash, as keys hold them: a value may be written raw
//! (hashed at load with `[account]`'s key, never kept raw) or as `hash:` and the 32 hex
//! digits the admin API shows in a key, so the file need not hold the secret itself.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::validate::Validator;
use super::{Account, Exempt, Exemptions};

/// `[exempt]` or `[policies.NAME.exempt]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExempt {
    /// Client networks (or single addresses), matched on the client address after the
    /// trusted-proxy rules.
    #[serde(default)]
    pub cidrs: Vec<String>,
    /// Account values (raw, or `hash:` + 32 hex digits).
    #[serde(default)]
    pub accounts: Vec<String>,
}

impl Validator {
    /// `[exempt]` and each policy's `exempt`, with accounts hashed by `account`.
    pub(super) fn exemptions(
        &mut self,
        global: Option<&RawExempt>,
        policies: &BTreeMap<String, super::raw::RawPolicy>,
        account: Option<&Account>,
    ) -> Exemptions {
        let global = global.map_or_else(Exempt::default, |r| self.exempt("exempt", r, account));
        let by_policy = policies
            .iter()
            .filter_map(|(name, p)| {
                let raw = p.exempt.as_ref()?;
                Some((
                    name.clone(),
                    self.exempt(&format!("policies.{name}.exempt"), raw, account),
                ))
            })
            .collect();
        Exemptions { global, by_policy }
    }

    fn exempt(&mut self, at: &str, raw: &RawExempt, account: Option<&Account>) -> Exempt {
        let cidrs = raw
            .cidrs
            .iter()
            .filter_map(|c| self.cidr(&format!("{at}.cidrs"), c))
            .collect();
        let key = format!("{at}.accounts");
        if self.no_account(account) && !raw.accounts.is_empty() {
            self.fail(
                &key,
                "lists accounts but there is no [account] section to read them from",
            );
        }
        let accounts = raw
            .accounts
            .iter()
            .filter_map(|a| self.account_hash(&key, a, account))
            .collect();
        Exempt { cidrs, accounts }
    }

    /// An account as the file names it — raw (hashed here with `[account]`'s key, never
    /// kept raw) or `hash:` and 32 hex digits — as the keyed hash requests are matched on.
    pub(super) fn account_hash(
        &mut self,
        key: &str,
        a: &str,
        account: Option<&Account>,
    ) -> Option<String> {
        match a.strip_prefix("hash:") {
            Some(h) if h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Some(h.to_ascii_lowercase())
            }
            Some(_) => {
                self.fail(key, format!("`{a}`: a hash is `hash:` and 32 hex digits"));
                None
            }
            None if a.is_empty() => {
                self.fail(key, "an empty account matches no request");
                None
            }
            None => account.map(|acc| acc.hash(a.as_bytes())),
        }
    }
}
