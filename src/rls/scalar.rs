//! A scalar's type as go-yaml v2 resolves it (YAML 1.1), which is how envoyproxy/ratelimit
//! reads its files: `yes`, `on` and `y` are booleans, `0x1F` and `1_000` integers, `~` null.
//! saphyr hands us the text as written (the loader's `early_parse` off); this gives it the
//! type ratelimit's key check (`validateYamlKeys`) and its struct decoding see. Written by
//! hand because no Rust YAML crate resolves the 1.1 schema.

use saphyr_parser::{ScalarStyle, Tag};

/// What a scalar is, as go-yaml v2 decodes it into `interface{}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    Null,
    Bool(bool),
    /// Fits Go's 64-bit `int`.
    Int(i64),
    /// Past `i64::MAX` (go-yaml's `uint64`), or a float: neither passes ratelimit's key
    /// check, which takes only string, int, bool and nil leaves.
    Unaccepted,
    Str,
}

/// The type of `text`, written with `style` and an explicit `tag` if any.
pub(crate) fn resolve(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Scalar {
    if let Some(tag) = tag {
        let core = tag.is_yaml_core_schema() || tag.handle == "!!";
        return match (core, tag.suffix.as_str()) {
            (true, "str") | (true, "binary") | (true, "timestamp") | (false, _) => Scalar::Str,
            (true, "null") => Scalar::Null,
            _ => plain(text),
        };
    }
    match style {
        ScalarStyle::Plain => plain(text),
        _ => Scalar::Str,
    }
}

/// go-yaml v2's `resolve` for an untagged plain scalar.
fn plain(text: &str) -> Scalar {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false);
        }
        ".nan" | ".NaN" | ".NAN" | ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF"
        | "-.inf" | "-.Inf" | "-.INF" => return Scalar::Unaccepted,
        _ => {}
    }
    match text.as_bytes()[0] {
        b'.' => {
            if text.parse::<f64>().is_ok() {
                Scalar::Unaccepted
            } else {
                Scalar::Str
            }
        }
        b'0'..=b'9' | b'+' | b'-' => number(text),
        _ => Scalar::Str,
    }
}

/// A scalar starting with a digit or a sign: a timestamp (a string for `interface{}`), an
/// integer in Go's `ParseInt(s, 0, 64)` syntax with `_` removed, a float, or a string.
fn number(text: &str) -> Scalar {
    if looks_like_timestamp(text) {
        return Scalar::Str;
    }
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, digits) = match plain.as_bytes().first() {
        Some(b'-') => (true, &plain[1..]),
        Some(b'+') => (false, &plain[1..]),
        _ => (false, plain.as_str()),
    };
    if let Some(magnitude) = go_uint(digits) {
        let signed = if negative {
            0i128 - i128::from(magnitude)
        } else {
            i128::from(magnitude)
        };
        match i64::try_from(signed) {
            Ok(v) => return Scalar::Int(v),
            // go-yaml: ParseUint takes a positive past int64 (a `uint64`).
            Err(_) if !negative => return Scalar::Unaccepted,
            // Neither parse takes it: the float pattern decides, as below.
            Err(_) => {}
        }
    }
    if is_yaml_float(&plain) {
        return Scalar::Unaccepted;
    }
    Scalar::Str
}

/// Go's `ParseUint(s, 0, 64)` on a sign-less string: `0x`, `0o`, `0b` prefixes, a leading
/// `0` for octal, decimal otherwise.
fn go_uint(s: &str) -> Option<u64> {
    let (radix, digits) = if let Some(d) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (16, d)
    } else if let Some(d) = s.strip_prefix("0o").or_else(|| s.strip_prefix("0O")) {
        (8, d)
    } else if let Some(d) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        (2, d)
    } else if s.len() > 1 && s.starts_with('0') {
        (8, &s[1..])
    } else {
        (10, s)
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// go-yaml v2's `yamlStyleFloat`: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// `2001-12-14`, optionally followed by a time: go-yaml v2 keeps these as strings in
/// `interface{}` and in string fields alike, so only the shape matters here.
fn looks_like_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Scalar {
        resolve(s, ScalarStyle::Plain, None)
    }

    #[test]
    fn yaml_1_1_booleans_nulls_and_numbers_resolve_as_go_yaml_v2() {
        assert_eq!(p("yes"), Scalar::Bool(true));
        assert_eq!(p("Off"), Scalar::Bool(false));
        assert_eq!(p("y"), Scalar::Bool(true));
        assert_eq!(p("~"), Scalar::Null);
        assert_eq!(p("0x1F"), Scalar::Int(31));
        assert_eq!(p("1_000"), Scalar::Int(1000));
        assert_eq!(p("010"), Scalar::Int(8));
        assert_eq!(p("-5"), Scalar::Int(-5));
        assert_eq!(p("0.25"), Scalar::Unaccepted);
        assert_eq!(p("1e3"), Scalar::Unaccepted);
        assert_eq!(p(".5"), Scalar::Unaccepted);
        assert_eq!(p("18446744073709551615"), Scalar::Unaccepted);
        assert_eq!(p("50.0.0.5"), Scalar::Str);
        assert_eq!(p("2024-01-01"), Scalar::Str);
        assert_eq!(p("1.2.3"), Scalar::Str);
        // Not octal, so go-yaml falls to its float pattern.
        assert_eq!(p("09"), Scalar::Unaccepted);
        assert_eq!(p("value*"), Scalar::Str);
        assert_eq!(resolve("yes", ScalarStyle::DoubleQuoted, None), Scalar::Str);
        assert_eq!(resolve("1.5", ScalarStyle::SingleQuoted, None), Scalar::Str);
    }
}
