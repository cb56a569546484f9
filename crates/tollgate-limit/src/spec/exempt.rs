//! Clients no policy (or one policy) ever denies: health checkers, an internal network, a
//! partner's account. The limit step skips a request's exempt policies and counts them as
//! `outcome="exempt"`. Accounts are held as their keyed hash, as keys hold them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

/// Clients exempt from one policy (the global list merged with the policy's own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exempt {
    pub cidrs: Vec<IpNet>,
    /// Keyed hashes of account values (32 hex digits), as `Account::hash` makes them.
    pub accounts: Vec<String>,
}

impl Exempt {
    pub fn is_empty(&self) -> bool {
        self.cidrs.is_empty() && self.accounts.is_empty()
    }

    /// Whether a client at `ip` with the hashed `account` is exempt.
    pub fn covers(&self, ip: IpAddr, account: Option<&str>) -> bool {
        self.cidrs.iter().any(|n| n.contains(&ip))
            || account.is_some_and(|a| self.accounts.iter().any(|x| x == a))
    }

    fn merged(&self, other: &Exempt) -> Exempt {
        let mut out = self.clone();
        out.cidrs.extend(other.cidrs.iter().copied());
        out.accounts.extend(other.accounts.iter().cloned());
        out
    }
}

/// Every exemption of the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exemptions {
    /// `[exempt]`: from every policy.
    pub global: Exempt,
    /// `[policies.NAME.exempt]`: from that policy only.
    pub by_policy: BTreeMap<String, Exempt>,
}

impl Exemptions {
    /// Who is exempt from policy `name`.
    pub fn for_policy(&self, name: &str) -> Exempt {
        match self.by_policy.get(name) {
            Some(own) => self.global.merged(own),
            None => self.global.clone(),
        }
    }
}
