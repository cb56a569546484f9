//! Policy keys as written: each part of `key = [...]` parsed into a [`KeyPart`], and the
//! parts that need a section (`account`, `jwt:CLAIM`) checked against it. Names are checked
//! here so the request path can compare them without re-parsing or second-guessing.

use http::HeaderName;

use super::Validator;
use crate::config::{Account, BodyField, KeyPart, Policy};

impl Validator {
    /// A policy keyed on `account` needs `[account]`; one keyed on `jwt:CLAIM` needs
    /// `[account] jwt` (the token it verifies is the only source of claims).
    pub(super) fn account_is_defined(&mut self, policies: &[Policy], account: Option<&Account>) {
        if self.account_failed {
            return;
        }
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

    /// `lowercase = [...]`: each a body part of the key, whose values are then folded.
    pub(super) fn lowercase(&mut self, at: &str, names: &[String], key: &mut [KeyPart]) {
        for (i, name) in names.iter().enumerate() {
            let field = key
                .iter_mut()
                .filter(|k| k.reads_body() && k.to_string() == *name)
                .find_map(|k| match k {
                    KeyPart::Form(f) | KeyPart::Json(f) => Some(f),
                    _ => None,
                });
            match field {
                Some(f) => f.lowercase = true,
                None => self.fail(
                    &format!("{at}[{i}]"),
                    format!(
                        "`{name}` is not a form:NAME or json:POINTER part of this policy's key"
                    ),
                ),
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
const KEY_PARTS: &str = "ip, account, route, method, path, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, form:NAME or json:POINTER";

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
    if !["header", "query", "cookie", "jwt", "form", "json"].contains(&kind) {
        return Err(unknown());
    }
    if kind == "json" {
        return json_pointer(name).map(|()| KeyPart::Json(field(name)));
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
        // A form body is read as a query string is: the same names are told apart.
        "query" | "form"
            if name
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"&;=+%#".contains(&b)) =>
        {
            Ok(match kind {
                "query" => KeyPart::Query(name.to_owned()),
                _ => KeyPart::Form(field(name)),
            })
        }
        "query" | "form" => Err(format!(
            "`{name}` is not a {} name: use visible ASCII without & ; = + % #",
            if kind == "query" {
                "query parameter"
            } else {
                "form field"
            }
        )),
        _ => Ok(KeyPart::Jwt(name.to_owned())),
    }
}

/// A JSON pointer as RFC 6901 writes one: `/` before each step, `~` only as `~0` or `~1`.
/// The whole document (`""`) is no key: a body is not a value.
fn json_pointer(pointer: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "`json:{pointer}`: {why} (RFC 6901, like json:/user/email)"
        ))
    };
    if !pointer.starts_with('/') {
        return bad("a JSON pointer starts with /");
    }
    let mut rest = pointer;
    while let Some(i) = rest.find('~') {
        if !matches!(rest.as_bytes().get(i + 1), Some(b'0' | b'1')) {
            return bad("`~` must be written ~0, and `/` inside a name ~1");
        }
        rest = &rest[i + 2..];
    }
    Ok(())
}

/// A body part's field, its values keyed as sent until `lowercase` says otherwise.
fn field(name: &str) -> BodyField {
    BodyField {
        name: name.to_owned(),
        lowercase: false,
    }
}
