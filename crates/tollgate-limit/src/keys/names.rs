//! Query parameter and cookie names as backends read them (`parts.rs` asks
//! [`same_name`]): a renamed parameter that a backend still reads as the configured name
//! must share its key, or renaming it would walk around the policy. Each reader turns a sent
//! name into a path (`user[email]` is `user`, then `email`); the sent name is the configured
//! one when a reader's path starts with the configured path (a longer one is an array or
//! hash under it: PHP and Rails hand the app `api_key[]` as `api_key`).

use std::borrow::Cow;

/// Whether a name as sent (decoded) is the configured `name` to some backend: ASCII case
/// aside (ASP.NET), as PHP reads it ([`php`]: ` `, `.` and an unclosed `[` are `_`), as
/// Rack 2 does ([`rack`]: brackets in front and extra `]` dropped), as Express's `qs` does
/// ([`qs`]) or as Spring's binder does ([`spring`]). Before any reader: a NUL ends the name
/// (PHP reads C strings), `%uXXXX` is decoded (classic ASP.NET) and Unicode whitespace
/// around it dropped ([`trim_space`]: Werkzeug, Django, JS `trim`).
pub(super) fn same_name(sent: &[u8], name: &str) -> bool {
    let sent = sent.split(|&b| b == 0).next().unwrap_or(sent);
    let sent = percent_u(sent);
    let sent = trim_space(&sent);
    let want = qs(name.as_bytes());
    let starts = |read: Vec<&[u8]>| {
        read.len() >= want.len() && want.iter().zip(&read).all(|(w, r)| folded_eq(w, r))
    };
    starts(php(sent)) || starts(rack(sent)) || starts(qs(sent)) || starts(spring(sent))
}

/// Equal as PHP compares a name it has folded: ` `, `.` and `[` as `_`, ASCII case aside.
fn folded_eq(a: &[u8], b: &[u8]) -> bool {
    let fold = |b: &u8| match b {
        b' ' | b'.' | b'[' => b'_',
        b => b.to_ascii_lowercase(),
    };
    a.len() == b.len() && a.iter().map(fold).eq(b.iter().map(fold))
}

/// The `[…]` groups from the start of `rest`, as long as they follow each other.
fn groups<'a>(mut rest: &'a [u8], path: &mut Vec<&'a [u8]>) {
    while let Some(inner) = rest.strip_prefix(b"[") {
        let Some(end) = inner.iter().position(|&b| b == b']') else {
            return;
        };
        path.push(&inner[..end]);
        rest = &inner[end + 1..];
    }
}

/// PHP's path: leading spaces dropped; the base up to a `[` that a `]` closes (an unclosed
/// `[` stays in the base, read as `_`), then its `[…]` groups; what follows a `]` other
/// than `[` is dropped (`user[email]x` is `user`, `email`).
fn php(sent: &[u8]) -> Vec<&[u8]> {
    let sent = sent.trim_ascii_start();
    match sent.iter().position(|&b| b == b'[') {
        Some(i) if sent[i..].contains(&b']') => {
            let mut path = vec![&sent[..i]];
            groups(&sent[i..], &mut path);
            path
        }
        _ => vec![sent],
    }
}

/// Rack 2's path: `\A[\[\]]*([^\[\]]+)\]*` read again on what is left, so brackets in
/// front and extra `]`s drop out (`]user[email]`, `user]][email]` are `user`, `email`).
fn rack(mut sent: &[u8]) -> Vec<&[u8]> {
    let bracket = |b: &u8| matches!(b, b'[' | b']');
    let mut path = Vec::new();
    loop {
        let start = sent.iter().position(|b| !bracket(b)).unwrap_or(sent.len());
        let rest = &sent[start..];
        let end = rest.iter().position(bracket).unwrap_or(rest.len());
        if end == 0 {
            return path;
        }
        path.push(&rest[..end]);
        let after = &rest[end..];
        sent = &after[after.iter().position(|&b| b != b']').unwrap_or(after.len())..];
    }
}

/// Express `qs`'s path (and how a configured name is read): the parent up to the first
/// closed group (`[` then no bracket until `]`), then every closed group, whatever lies
/// between them; an empty parent is dropped, so `[user]x[email]` is `user`, `email`.
fn qs(sent: &[u8]) -> Vec<&[u8]> {
    let mut closed = Vec::new();
    let mut i = 0;
    while let Some(open) = sent[i..].iter().position(|&b| b == b'[').map(|o| i + o) {
        let inner = &sent[open + 1..];
        match inner.iter().position(|&b| b == b'[' || b == b']') {
            Some(end) if inner[end] == b']' => {
                closed.push((open, &inner[..end]));
                i = open + end + 2;
            }
            Some(end) => i = open + 1 + end,
            None => break,
        }
    }
    let parent = &sent[..closed.first().map_or(sent.len(), |(open, _)| *open)];
    let mut path: Vec<&[u8]> = Vec::with_capacity(closed.len() + 1);
    if !parent.is_empty() || closed.is_empty() {
        path.push(parent);
    }
    path.extend(closed.into_iter().map(|(_, inner)| inner));
    path
}

/// Spring's binder: one leading `!` (a field default) dropped, then PHP's path with a map
/// key's quotes dropped (`user['email']` and `user["email"]` are `user`, `email`).
fn spring(sent: &[u8]) -> Vec<&[u8]> {
    let sent = sent.strip_prefix(b"!").unwrap_or(sent);
    php(sent).into_iter().map(unquote).collect()
}

/// A group without one pair of matching quotes around it.
fn unquote(g: &[u8]) -> &[u8] {
    match g {
        [q @ (b'\'' | b'"'), inner @ .., end] if end == q => inner,
        _ => g,
    }
}

/// `%uXXXX` decoded to UTF-8 (classic ASP.NET's `HttpUtility.UrlDecode` reads it in names:
/// `api_k%u0065y` is `api_key`). Borrowed when there is none.
fn percent_u(s: &[u8]) -> Cow<'_, [u8]> {
    if !s.windows(2).any(|w| w == b"%u" || w == b"%U") {
        return Cow::Borrowed(s);
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let code = s
            .get(i + 2..i + 6)
            .filter(|_| matches!(&s[i..i + 2], b"%u" | b"%U"))
            .and_then(|h| u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())
            .and_then(char::from_u32);
        match code {
            Some(c) => {
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                i += 6;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// Whitespace around a name dropped as Python's `str.strip()` and JS's `trim()` drop it,
/// read as latin-1 (Werkzeug: `0x85`, `0xA0`) or as UTF-8 (Django: U+0085, U+00A0, U+1680,
/// U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, and U+FEFF for JS).
fn trim_space(mut s: &[u8]) -> &[u8] {
    const UTF8: [&[u8]; 20] = [
        b"\xC2\x85",
        b"\xC2\xA0",
        b"\xE1\x9A\x80",
        b"\xE2\x80\x80",
        b"\xE2\x80\x81",
        b"\xE2\x80\x82",
        b"\xE2\x80\x83",
        b"\xE2\x80\x84",
        b"\xE2\x80\x85",
        b"\xE2\x80\x86",
        b"\xE2\x80\x87",
        b"\xE2\x80\x88",
        b"\xE2\x80\x89",
        b"\xE2\x80\x8A",
        b"\xE2\x80\xA8",
        b"\xE2\x80\xA9",
        b"\xE2\x80\xAF",
        b"\xE2\x81\x9F",
        b"\xE3\x80\x80",
        b"\xEF\xBB\xBF",
    ];
    let single = |b: u8| b.is_ascii_whitespace() || matches!(b, 0x0B | 0x85 | 0xA0);
    loop {
        let before = s.len();
        if let Some(sp) = UTF8.iter().find(|sp| s.starts_with(sp)) {
            s = &s[sp.len()..];
        } else if let Some((_, rest)) = s.split_first().filter(|(b, _)| single(**b)) {
            s = rest;
        }
        if let Some(sp) = UTF8.iter().find(|sp| s.ends_with(sp)) {
            s = &s[..s.len() - sp.len()];
        } else if let Some((_, rest)) = s.split_last().filter(|(b, _)| single(**b)) {
            s = rest;
        }
        if s.len() == before {
            return s;
        }
    }
}
