//! `policies.NAME.show_values`, a part of the validation pass (`validate/mod.rs`): which of
//! a policy's key parts the admin views show in clear.
//!
//! Values a client sends enter keys as a keyed hash, so that neither the store nor a log
//! holds them; an operator reading `/limits/{policy}/top` then sees `f:8e33af…` where
//! the backend logged `alice`. `show_values` trades that back for the views only (the
//! stored key is unchanged, `limit/keys/shown.rs`), and only where the value is no
//! credential:
//! - `true`: every `form:`, `json:`, `query:` and `header:` part of the key; a key with a
//!   credential header (`authorization`, `proxy-authorization`, `cookie`, the `[account]`
//!   header) is refused, so that a blanket `true` never shows one — list the parts instead;
//! - a list: exactly those parts, each a part of the key; `account` (and a credential
//!   header) only when listed by name; `cookie:` and `jwt:` parts never (sessions and
//!   token claims);
//! - `false` or `[]` (the default): none.

use std::collections::BTreeMap;

use super::Validator;
use crate::config::raw::{RawPolicy, RawShowValues};
use crate::config::{Account, KeyPart, Policy};

/// Headers that carry credentials whatever the config says.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

impl Validator {
    /// The parts of `key` whose values are shown, as `show_values` (at `at`) says.
    pub(super) fn show_values(
        &mut self,
        at: &str,
        raw: &RawShowValues,
        key: &[KeyPart],
    ) -> Vec<KeyPart> {
        match raw {
            RawShowValues::All(false) => Vec::new(),
            RawShowValues::All(true) => self.show_all(at, key),
            RawShowValues::Parts(parts) => parts
                .iter()
                .enumerate()
                .filter_map(|(i, written)| self.show_part(&format!("{at}[{i}]"), written, key))
                .collect(),
        }
    }

    fn show_all(&mut self, at: &str, key: &[KeyPart]) -> Vec<KeyPart> {
        let shown: Vec<KeyPart> = key.iter().filter(|p| shown_by_true(p)).cloned().collect();
        if let Some(h) = shown.iter().find(|p| credential(p, None)) {
            self.fail(
                at,
                format!(
                    "`true` would show `{h}`, a credential: list the parts to show instead (show_values = [\"...\"]), naming `{h}` only if its values are no secret"
                ),
            );
        } else if shown.is_empty() {
            self.fail(
                at,
                "the key has no form:, json:, query: or header: part to show (an account is shown only when listed: show_values = [\"account\"])",
            );
        }
        shown
    }

    fn show_part(&mut self, at: &str, written: &str, key: &[KeyPart]) -> Option<KeyPart> {
        let Some(part) = key.iter().find(|p| names(p, written)) else {
            self.fail(
                at,
                format!("`{written}` is not a part of this policy's key"),
            );
            return None;
        };
        match part {
            KeyPart::Cookie(_) | KeyPart::Jwt(_) => {
                self.fail(
                    at,
                    format!(
                        "`{written}`: cookie and token claim values are credentials and are never shown (form:, json:, query:, header: and account values may be)"
                    ),
                );
                None
            }
            KeyPart::Ip | KeyPart::Route | KeyPart::Method | KeyPart::Path => {
                self.fail(
                    at,
                    format!("`{written}` is not hashed: it is shown as it is already"),
                );
                None
            }
            _ => Some(part.clone()),
        }
    }

    /// A policy whose `show_values = true` would show the `[account]` header (a
    /// `header:` part naming it): refused as any credential header is (`show_all`), once
    /// the account section is known.
    pub(super) fn shown_account_header(
        &mut self,
        raw: &BTreeMap<String, RawPolicy>,
        policies: &[Policy],
        account: Option<&Account>,
    ) {
        let Some(account) = account else {
            return;
        };
        for p in policies {
            let blanket = raw
                .get(&p.name)
                .is_some_and(|r| r.show_values == RawShowValues::All(true));
            if let Some(h) = p
                .show_values
                .iter()
                .find(|part| blanket && credential(part, Some(&account.header)))
            {
                self.fail(
                    &format!("policies.{}.show_values", p.name),
                    format!(
                        "`true` would show `{h}`, the [account] header (a credential): list the parts to show instead, naming `{h}` only if its values are no secret"
                    ),
                );
            }
        }
    }
}

/// The parts `show_values = true` shows.
fn shown_by_true(part: &KeyPart) -> bool {
    matches!(
        part,
        KeyPart::Form(_) | KeyPart::Json(_) | KeyPart::Query(_) | KeyPart::Header(_)
    )
}

/// A header part that carries credentials (`account_header` too, when given).
fn credential(part: &KeyPart, account_header: Option<&http::HeaderName>) -> bool {
    match part {
        KeyPart::Header(h) => {
            CREDENTIAL_HEADERS.contains(&h.as_str()) || account_header.is_some_and(|a| a == h)
        }
        _ => false,
    }
}

/// Whether `written` (as `key = [...]` writes a part) names `part`; header names in any
/// case.
fn names(part: &KeyPart, written: &str) -> bool {
    match part {
        KeyPart::Header(_) => part.to_string().eq_ignore_ascii_case(written),
        _ => part.to_string() == written,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{KeyPart, load::parse_str, validate};

    /// A login policy keyed on `key` with `show` as its `show_values` (and `[account]`
    /// read from `x-api-key` when `account`): its shown parts, or the problems.
    fn shown(key: &str, show: &str, account: bool) -> Result<Vec<String>, Vec<String>> {
        let account = match account {
            true => "[account]\nheader = \"x-api-key\"\n",
            false => "",
        };
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{account}\
             [upstreams.app]\nurls = [\"http://127.0.0.1:9\"]\n\
             [policies.login]\nkey = {key}\nalgorithm = \"gcra\"\nlimit = 5\nperiod = \"15m\"\n\
             on_missing_key = \"skip\"\nshow_values = {show}\n\
             [[routes]]\nname = \"login\"\nmatch = {{ path_prefix = \"/login\" }}\n\
             upstream = \"app\"\npolicies = [\"login\"]\n"
        );
        let origin = Path::new("show.toml");
        let config = parse_str(&text, origin).and_then(|raw| validate(raw, origin));
        match config {
            Ok(c) => Ok(c.policies[0]
                .show_values
                .iter()
                .map(KeyPart::to_string)
                .collect()),
            Err(e) => Err(e
                .problems()
                .into_iter()
                .map(|p| format!("{}: {}", p.key, p.message))
                .collect()),
        }
    }

    #[test]
    fn true_shows_the_sent_values_that_are_no_credentials() {
        let key = r#"["ip", "form:username", "json:/user", "query:q", "header:x-tenant"]"#;
        assert_eq!(
            shown(key, "true", false).unwrap(),
            ["form:username", "json:/user", "query:q", "header:x-tenant"]
        );
        assert_eq!(shown(key, "false", false).unwrap(), Vec::<String>::new());
        assert_eq!(shown(key, "[]", false).unwrap(), Vec::<String>::new());
        assert_eq!(
            shown(r#"["account", "form:username"]"#, "true", true).unwrap(),
            ["form:username"],
            "the account only when listed"
        );
        assert_eq!(
            shown(
                r#"["account", "form:username"]"#,
                r#"["account", "form:username"]"#,
                true
            )
            .unwrap(),
            ["account", "form:username"]
        );
        assert_eq!(
            shown(r#"["header:X-Tenant"]"#, r#"["header:x-TENANT"]"#, false).unwrap(),
            ["header:x-tenant"],
            "header names in any case"
        );
    }

    #[test]
    fn wrong_uses_are_named() {
        for (key, show, account, says) in [
            (
                r#"["ip"]"#,
                "true",
                false,
                "no form:, json:, query: or header: part",
            ),
            (r#"["account"]"#, "true", true, "only when listed"),
            (
                r#"["header:authorization"]"#,
                "true",
                false,
                "`header:authorization`, a credential",
            ),
            (
                r#"["form:u", "header:x-api-key"]"#,
                "true",
                true,
                "the [account] header",
            ),
            (
                r#"["cookie:sid"]"#,
                r#"["cookie:sid"]"#,
                false,
                "never shown",
            ),
            (
                r#"["account", "jwt:sub"]"#,
                r#"["jwt:sub"]"#,
                false,
                "never shown",
            ),
            (
                r#"["ip", "form:u"]"#,
                r#"["ip"]"#,
                false,
                "shown as it is already",
            ),
            (
                r#"["form:u"]"#,
                r#"["form:user"]"#,
                false,
                "not a part of this policy's key",
            ),
            (r#"["form:u"]"#, r#""yes""#, false, "show_values"),
        ] {
            let problems = shown(key, show, account).unwrap_err();
            assert!(
                problems
                    .iter()
                    .any(|p| p.starts_with("policies.login.show_values") && p.contains(says)),
                "{key} / {show}: {problems:?}"
            );
        }
    }
}
