//! Policy keys as written: each part of `key = [...]` parsed into a [`KeyPart`], and the
//! parts that need a section (`account`, `jwt:CLAIM`) checked against it. Names are checked
//! here so the request path can compare them without re-parsing or second-guessing.

use http::HeaderName;

use super::Validator;
use crate::config::{Account, KeyPart, Policy};

impl Validator {
    /// A policy keyed on `account` needs `[account]`; one keyed on `jwt:CLAIM` needs
    /// `[account] jwt` (the token it verifies is the only source of claims).
    pub(super) fn account_is_defined(&mut self, policies: &[Policy], account: Option<&Account>) {
        let has_jwt = account.is_some_and(|a| a.jwt.is_some());
        for p in policies {
            if account.is_none() && p.key.contains(&KeyPart::Account) {
                self.fail(
                    &format!("policies.{}.key", p.name),
                    "uses `account` but there is no [account] section",
                );
            }
            for (i, part) in p.key.iter().enumerate() {
                if let KeyPart::Jwt(claim) = part
                    && !has_jwt
                {
                    self.fail(
                        &format!("policies.{}.key[{i}]", p.name),
                        format!("uses `jwt:{claim}` but [account] has no jwt (no verified token to read claims from)"),
                    );
                }
            }
        }
    }

    pub(super) fn key_parts(&mut self, key: &str, parts: &[String]) -> Vec<KeyPart> {
        if parts.is_empty() {
            self.fail(key, format!("needs at least one part ({KEY_PARTS})"));
        }
        parts
            .iter()
            .enumerate()
            .filter_map(|(i, part)| {
                key_part(part)
                    .map_err(|why| self.fail(&format!("{key}[{i}]"), why))
                    .ok()
            })
            .collect()
    }
}

/// Every key part, as messages list them.
const KEY_PARTS: &str =
    "ip, account, route, method, path, header:NAME, query:NAME, cookie:NAME or jwt:CLAIM";

/// One key part as written, or what is wrong with it.
fn key_part(part: &str) -> Result<KeyPart, String> {
    let unknown = || format!("unknown key part `{part}`: use {KEY_PARTS}");
    match part {
        "ip" => return Ok(KeyPart::Ip),
        "account" => return Ok(KeyPart::Account),
        "route" => return Ok(KeyPart::Route),
        "method" => return Ok(KeyPart::Method),
        "path" => return Ok(KeyPart::Path),
        _ => {}
    }
    let (kind, name) = part.split_once(':').ok_or_else(unknown)?;
    if !["header", "query", "cookie", "jwt"].contains(&kind) {
        return Err(unknown());
    }
    if name.is_empty() {
        let what = if kind == "jwt" { "CLAIM" } else { "NAME" };
        return Err(format!("`{part}` names nothing: write {kind}:{what}"));
    }
    let token = name
        .bytes()
        .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b));
    match kind {
        "header" => HeaderName::from_bytes(name.as_bytes())
            .map(KeyPart::Header)
            .map_err(|_| format!("`{name}` is not a header name")),
        // Cookie names are RFC 6265 tokens: anything else could not be told from the
        // `;`, `,` and `=` the Cookie header is split on.
        "cookie" if token => Ok(KeyPart::Cookie(name.to_owned())),
        "cookie" => Err(format!(
            "`{name}` is not a cookie name: use letters, digits and !#$%&'*+-.^_`|~"
        )),
        // Matched against decoded names: a name with the query's own syntax in it
        // (`&`, `;`, `=`, `+`, `%`, `#`) or a space could never be told apart.
        "query"
            if name
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"&;=+%#".contains(&b)) =>
        {
            Ok(KeyPart::Query(name.to_owned()))
        }
        "query" => Err(format!(
            "`{name}` is not a query parameter name: use visible ASCII without & ; = + % #"
        )),
        _ => Ok(KeyPart::Jwt(name.to_owned())),
    }
}
