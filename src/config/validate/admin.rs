//! The admin listener's keys: its bearer token, and the rule that a listener others can
//! reach must ask for one.
//!
//! The admin API resets keys, reloads the config and shows the routing table: an open one
//! on a routable address hands those to anyone on the network. Binding it to every
//! interface is the ordinary thing to do in a container or a pod (their loopback is
//! unreachable from outside), so the safe default is enforced by `check`, not left to a
//! comment: a non-loopback `admin_listen` needs `admin_token_env`. `/healthz` and
//! `/readyz` stay open either way, so balancer and kubelet probes need no token.

use std::net::SocketAddr;

use super::super::AdminToken;
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
