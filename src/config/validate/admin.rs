//! The admin listener's keys: its bearer token, and the rule that a listener others can
//! reach must ask for one.
//!
//! The admin API resets keys, reloads the config and shows the routing table: an open one
//! on a routable address hands those to anyone on the network. Binding it to every
//! interface is the ordinary thing to do in a container or a pod (their loopback is
//! unreachable from outside), so the safe default is enforced by `check`, not left to a
//! comment: a non-loopback `admin_listen` needs `admin_token_env`. `/healthz` and
//! `/readyz` stay open either way, so balancer and kubelet probes need no token.
//!
//! `admin_hosts` names the `Host`s the listener answers besides its own addresses and
//! `localhost` (`admin/gate.rs` refuses the rest: DNS rebinding), so each entry must be
//! one host a `Host` header can carry, with an optional port.

use std::net::SocketAddr;
use std::str::FromStr;

use http::uri::Authority;

use super::super::{AdminHost, AdminToken};
use super::Validator;

impl Validator {
    /// `admin_token_env`: the token in that variable (at least 16 bytes), `Some(None)` when
    /// unset, `None` when broken.
    pub(super) fn admin_token(&mut self, var: Option<&str>) -> Option<Option<AdminToken>> {
        let Some(var) = var else {
            return Some(None);
        };
        match std::env::var(var) {
            Ok(v) if v.len() >= 16 && v.bytes().all(|b| b.is_ascii_graphic()) => {
                Some(Some(AdminToken::new(v)))
            }
            Ok(_) => {
                self.fail(
                    "server.admin_token_env",
                    format!("environment variable `{var}` must hold at least 16 printable characters and no spaces"),
                );
                None
            }
            Err(_) => {
                self.fail(
                    "server.admin_token_env",
                    format!("environment variable `{var}` is not set"),
                );
                None
            }
        }
    }

    /// `admin_hosts`: each `name` or `name:port` (an IPv6 address in brackets), lower-cased.
    pub(super) fn admin_hosts(&mut self, hosts: &[String]) -> Option<Vec<AdminHost>> {
        let mut out = Vec::with_capacity(hosts.len());
        let mut good = true;
        for (i, written) in hosts.iter().enumerate() {
            // `Authority` is the grammar of a `Host` header, but also takes `user@`, which
            // no `Host` carries, an empty or non-numeric port (`name:`, `name:x`), and a
            // path after the authority.
            let parsed = Authority::from_str(written)
                .ok()
                .filter(|a| a.as_str() == written && !a.host().is_empty())
                .filter(|_| !written.contains('@'))
                .filter(|a| match &written[a.host().len()..] {
                    "" => true,
                    rest => {
                        rest.strip_prefix(':').is_some_and(|p| {
                            !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
                        }) && a.port_u16().is_some()
                    }
                });
            let Some(a) = parsed else {
                self.fail(
                    &format!("server.admin_hosts[{i}]"),
                    format!(
                        "`{written}` is not a host name like \"admin.internal\" or \"admin.internal:9901\""
                    ),
                );
                good = false;
                continue;
            };
            if a.port_u16() == Some(0) {
                self.fail(
                    &format!("server.admin_hosts[{i}]"),
                    format!("`{written}`: port 0 is no port a client can ask on"),
                );
                good = false;
                continue;
            }
            out.push(AdminHost {
                host: a.host().to_ascii_lowercase(),
                port: a.port_u16(),
            });
        }
        good.then_some(out)
    }

    /// An admin listener off loopback (127.0.0.0/8, `::1`, or either as an IPv4-mapped
    /// address) without `admin_token_env` is refused. Whether the variable holds a good
    /// token is [`Self::admin_token`]'s to say: a named but unset variable is one problem,
    /// not two.
    pub(super) fn admin_exposure(&mut self, addr: SocketAddr, has_token_env: bool) {
        if has_token_env || addr.ip().to_canonical().is_loopback() {
            return;
        }
        self.fail(
            "server.admin_listen",
            format!(
                "`{addr}` is not a loopback address: set server.admin_token_env so the admin \
                 API (key resets, reload, the config) needs a bearer token (/healthz and \
                 /readyz stay open for probes)"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::ConfigError;
    use crate::config::raw::RawConfig;
    use crate::config::validate::validate;

    fn problems(admin: &str, token_env: Option<&str>) -> Vec<String> {
        let env = token_env.map_or(String::new(), |v| format!("admin_token_env = \"{v}\"\n"));
        let text =
            format!("[server]\nlisten = \"127.0.0.1:8080\"\nadmin_listen = \"{admin}\"\n{env}");
        let raw: RawConfig = toml::from_str(&text).unwrap();
        match validate(raw, Path::new("t.toml")) {
            Ok(_) => vec![],
            Err(ConfigError::Invalid { problems, .. }) => problems
                .into_iter()
                .map(|p| format!("{}: {}", p.key, p.message))
                .collect(),
            Err(e) => panic!("{e}"),
        }
    }

    /// `check`'s problems with `admin_hosts = [hosts]`, or the validated entries.
    fn hosts(hosts: &str) -> Result<Vec<(String, Option<u16>)>, Vec<String>> {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\nadmin_listen = \"127.0.0.1:9901\"\nadmin_hosts = [{hosts}]\n"
        );
        let raw: RawConfig = toml::from_str(&text).unwrap();
        match validate(raw, Path::new("t.toml")) {
            Ok(c) => Ok(c
                .server
                .admin_hosts
                .into_iter()
                .map(|h| (h.host, h.port))
                .collect()),
            Err(ConfigError::Invalid { problems, .. }) => Err(problems
                .into_iter()
                .map(|p| format!("{}: {}", p.key, p.message))
                .collect()),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn admin_hosts_are_host_names_with_an_optional_port() {
        assert_eq!(
            hosts(r#""Admin.Internal:9901", "ops", "[::1]:9", "10.0.0.5""#).unwrap(),
            [
                ("admin.internal".to_string(), Some(9901)),
                ("ops".to_string(), None),
                ("[::1]".to_string(), Some(9)),
                ("10.0.0.5".to_string(), None),
            ]
        );
        for bad in [
            "",
            "a b",
            "user@admin",
            "admin:",
            "admin:x",
            "admin:99999",
            "http://admin",
            "admin/x",
        ] {
            let p = hosts(&format!("\"ok\", \"{bad}\"")).expect_err(bad);
            assert_eq!(
                p,
                [format!(
                    "server.admin_hosts[1]: `{bad}` is not a host name like \"admin.internal\" or \"admin.internal:9901\""
                )],
                "{bad}"
            );
        }
        assert_eq!(
            hosts(r#""admin:0""#).unwrap_err(),
            ["server.admin_hosts[0]: `admin:0`: port 0 is no port a client can ask on"]
        );
    }

    #[test]
    fn loopback_admin_listeners_need_no_token() {
        for addr in [
            "127.0.0.1:9901",
            "127.3.2.1:9901",
            "[::1]:9901",
            "[::ffff:127.0.0.1]:9901",
        ] {
            let p = problems(addr, None);
            assert!(
                !p.iter().any(|p| p.starts_with("server.admin_listen")),
                "{addr}: {p:?}"
            );
        }
    }

    #[test]
    fn other_admin_listeners_need_admin_token_env() {
        for addr in [
            "0.0.0.0:9901",
            "[::]:9901",
            "10.0.0.5:9901",
            "[::ffff:10.0.0.5]:9901",
        ] {
            let p = problems(addr, None);
            assert!(
                p.iter().any(|p| p.starts_with("server.admin_listen: `")
                    && p.contains("is not a loopback address: set server.admin_token_env")),
                "{addr}: {p:?}"
            );
        }
        // Named (here unset): the one problem is the variable's.
        let p = problems("0.0.0.0:9901", Some("TOLLGATE_TEST_NEVER_SET_ADMIN_TOKEN"));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("server.admin_token_env: "), "{p:?}");
    }
}
