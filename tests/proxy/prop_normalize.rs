//! The path canonicalizer (`tollgate::normalize`), the first step of every request: a
//! table of spellings (every bypass seen against a strict `/api/login` route, each rule of
//! the module doc in both modes) and property tests over an alphabet rich in the bytes that
//! matter (`/ . % 2 e E f F 5 c C ; \`, non-ASCII).
//!
//! Why properties as well as a table: the router, the limit keys and the upstream all see
//! the output, so it must be a fixed point (normalizing it again changes nothing) and every
//! equivalent spelling must land on it, not only the spellings someone thought of.

use std::borrow::Cow;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tollgate::config::{EscapedSlashes, PathParameters, PathRules};
use tollgate::normalize::{PathError, PathError::*, normalize_path};

/// The defaults: `%2F`/`%5C`/`\` and `;` refused.
const S: PathRules = PathRules {
    escaped_slashes: EscapedSlashes::Reject,
    path_parameters: PathParameters::Reject,
};
/// Both kept.
const K: PathRules = PathRules {
    escaped_slashes: EscapedSlashes::Keep,
    path_parameters: PathParameters::Keep,
};
/// Only escaped slashes kept.
const KS: PathRules = PathRules {
    escaped_slashes: EscapedSlashes::Keep,
    ..S
};
/// Only `;` kept.
const KP: PathRules = PathRules {
    path_parameters: PathParameters::Keep,
    ..S
};

#[rustfmt::skip]
const CASES: &[(&str, PathRules, Result<&str, PathError>)] = &[
    // Every attacker spelling of /api/login.
    ("/api/login", S, Ok("/api/login")),
    ("//api/login", S, Ok("/api/login")),
    ("/api//login", S, Ok("/api/login")),
    ("/api/./login", S, Ok("/api/login")),
    ("/x/../api/login", S, Ok("/api/login")),
    ("/api/%6Cogin", S, Ok("/api/login")),
    ("/%61pi/login", S, Ok("/api/login")),
    ("/api/%2e/login", S, Ok("/api/login")),
    ("/api%2Flogin", S, Err(EscapedSlash)),
    ("/api;/login", S, Err(PathParameter)),
    ("/api\\login", S, Err(EscapedSlash)),
    ("/api/%6c%6F%67%69%6E", S, Ok("/api/login")),
    ("/x/../%2e%2e/./api//login", S, Ok("/api/login")),
    ("///api///login", S, Ok("/api/login")),
    ("/API/login", S, Ok("/API/login")),
    // Escaped slashes and backslashes, both modes.
    ("/api%2flogin", K, Ok("/api%2Flogin")),
    ("/api%2Flogin", KS, Ok("/api%2Flogin")),
    ("/api%5clogin", S, Err(EscapedSlash)),
    ("/api%5Clogin", KS, Ok("/api%5Clogin")),
    ("/api\\login", K, Ok("/api%5Clogin")),
    ("/a/%2F/b", S, Err(EscapedSlash)),
    ("/a%2F..%2Fb", KS, Ok("/a%2F..%2Fb")),
    ("/a/%2F/../b", K, Ok("/a/b")),
    ("/a;b%2Fc", KP, Err(EscapedSlash)),
    ("/a;b%2Fc", KS, Err(PathParameter)),
    // Path parameters, both modes.
    ("/api;/login", K, Ok("/api;/login")),
    ("/api;jsessionid=1/login", KP, Ok("/api;jsessionid=1/login")),
    ("/api/login;", S, Err(PathParameter)),
    ("/a/..;/b", S, Err(PathParameter)),
    ("/a/..;/b", KP, Ok("/a/..;/b")),
    ("/a%3b", S, Ok("/a%3B")),
    ("/a%3B", K, Ok("/a%3B")),
    // Dots, encoded in every way; `..` past the root.
    ("/%2e%2e/api/login", S, Ok("/api/login")),
    ("/%2E%2e/api", S, Ok("/api")),
    ("/.%2E/api", S, Ok("/api")),
    ("/%2e./api", S, Ok("/api")),
    ("/api/%2E", S, Ok("/api/")),
    ("/api/login/%2e%2e", S, Ok("/api/")),
    ("/.", S, Ok("/")),
    ("/..", S, Ok("/")),
    ("/../../api/login", S, Ok("/api/login")),
    ("/a/b/../../..", S, Ok("/")),
    ("/a/b/..", S, Ok("/a/")),
    ("/a/.", S, Ok("/a/")),
    ("/a/./", S, Ok("/a/")),
    ("/a/b/../c/./d", S, Ok("/a/c/d")),
    ("/api/...", S, Ok("/api/...")),
    ("/api/%2e%2e%2e", S, Ok("/api/...")),
    ("/api/.login", S, Ok("/api/.login")),
    ("/api/login..", S, Ok("/api/login..")),
    ("/.well-known/x", S, Ok("/.well-known/x")),
    // Slashes: merged, trailing kept.
    ("/", S, Ok("/")),
    ("///", S, Ok("/")),
    ("/api/", S, Ok("/api/")),
    ("/api/login//", S, Ok("/api/login/")),
    // Percent-encoding: unreserved decoded, the rest uppercase, once only.
    ("/%41%5A%61%7A%30%39%2D%2E%5F%7E", S, Ok("/AZaz09-._~")),
    ("/%7e", S, Ok("/~")),
    ("/a%3a", S, Ok("/a%3A")),
    ("/a%3A", S, Ok("/a%3A")),
    ("/a%25", S, Ok("/a%25")),
    ("/a/%252e%252e/b", S, Ok("/a/%252e%252e/b")),
    ("/a%2525", S, Ok("/a%2525")),
    ("/api/login%3fx", S, Ok("/api/login%3Fx")),
    ("/%c3%a9", S, Ok("/%C3%A9")),
    // Bad percent and control bytes, whatever the rules.
    ("/a%", S, Err(BadPercent)),
    ("/a%2", K, Err(BadPercent)),
    ("/a%2/b", S, Err(BadPercent)),
    ("/a%zz", S, Err(BadPercent)),
    ("/a%g1", S, Err(BadPercent)),
    ("/a%00", S, Err(ControlByte)),
    ("/a%1f", S, Err(ControlByte)),
    ("/a%7F", S, Err(ControlByte)),
    ("/a%0A", K, Err(ControlByte)),
    ("/a\0", S, Err(ControlByte)),
    ("/a\tb", K, Err(ControlByte)),
    ("/a%00;", S, Err(ControlByte)),
    // Raw characters outside the path grammar are encoded; reserved ones kept raw.
    ("/caf\u{e9}", S, Ok("/caf%C3%A9")),
    ("/\u{65e5}", K, Ok("/%E6%97%A5")),
    ("/a b", S, Ok("/a%20b")),
    ("/a\"<>{}|^`", S, Ok("/a%22%3C%3E%7B%7D%7C%5E%60")),
    ("/a?b#c", S, Ok("/a%3Fb%23c")),
    ("/a!$&'()*+,=:@b", S, Ok("/a!$&'()*+,=:@b")),
    ("/a%21%40", S, Ok("/a%21%40")),
    // Not origin form (the query is never passed in; `?` above is data).
    ("*", S, Err(NotOrigin)),
    ("", S, Err(NotOrigin)),
    ("api/login", S, Err(NotOrigin)),
    ("http://h/api", K, Err(NotOrigin)),
];

#[test]
fn table() {
    assert!(CASES.len() >= 60, "{} cases", CASES.len());
    for &(input, rules, want) in CASES {
        let got = normalize_path(input, rules);
        assert_eq!(
            got.as_deref().map_err(|e| *e),
            want,
            "{input:?} under {rules:?}"
        );
        if let Ok(out) = got {
            let again = normalize_path(&out, rules);
            assert!(
                matches!(again, Ok(Cow::Borrowed(o)) if o == out),
                "{out:?} not stable"
            );
        }
    }
}

#[test]
fn borrowed_exactly_when_unchanged() {
    for p in ["/api/v1/users/12345/orders", "/", "/a/", "/a%3A", "/a!:@b"] {
        assert!(matches!(normalize_path(p, S), Ok(Cow::Borrowed(_))), "{p}");
    }
    for p in ["//a", "/a/.", "/%61", "/a%3a", "/a b"] {
        assert!(matches!(normalize_path(p, S), Ok(Cow::Owned(_))), "{p}");
    }
}

#[test]
fn display_is_a_short_client_facing_reason() {
    let all = [
        NotOrigin,
        BadPercent,
        ControlByte,
        EscapedSlash,
        PathParameter,
    ];
    let texts: Vec<String> = all.iter().map(ToString::to_string).collect();
    assert_eq!(
        texts,
        [
            "the path does not start with /",
            "the path contains a % not followed by two hex digits",
            "the path contains a control character",
            "the path contains an encoded slash (%2F) or backslash",
            "the path contains a ; (path parameter)",
        ]
    );
}

/// Every combination of the two choices.
const ALL_RULES: [PathRules; 4] = [S, K, KS, KP];

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/prop_normalize.txt",
        ))),
        ..ProptestConfig::default()
    }
}

/// Raw pieces heavy in what makes a path ambiguous: separators, dots, `%` and the hex
/// digits of `%2e` / `%2f` / `%5c` in both cases, `;`, `\`, and non-ASCII.
const NOISY: &[&str] = &[
    "/", "/", "/", ".", ".", "%", "2", "e", "E", "f", "F", "5", "c", "C", ";", "\\", "a", "b",
    "%2", "%2e", "%2E", "%2f", "%5C", "%3b", "%25", "é", "日", " ", "?", "0", "7", "~", ":",
];

/// Pieces that never make a path refused under any rules, so every generated path has a
/// canonical form to compare against.
const CLEAN: &[&str] = &[
    "/", "/", "//", "/./", "/../", "a", "Z", "0", "-", ".", "..", "_", "~", "!", "$", "'", "=",
    ":", "@", "é", " ", "{", "%3a", "%41", "%2e", "%2E", "%c3%a9", "%7E", "%25",
];

fn path_from(pieces: &'static [&'static str], rooted: f64) -> impl Strategy<Value = String> {
    let parts = prop::collection::vec(prop::sample::select(pieces), 0..24);
    (prop::bool::weighted(rooted), parts).prop_map(|(rooted, parts)| {
        let mut path = String::from(if rooted { "/" } else { "" });
        path.extend(parts);
        path
    })
}

/// The output's promises, checked from the outside.
fn check_canonical(out: &str, rules: PathRules) -> Result<(), TestCaseError> {
    prop_assert!(out.starts_with('/'), "{out:?} not rooted");
    prop_assert!(out.is_ascii(), "{out:?} not ASCII");
    prop_assert!(!out.contains("//"), "{out:?} has //");
    let dots = out.split('/').skip(1).any(|s| s == "." || s == "..");
    prop_assert!(!dots, "{out:?} has a dot segment");
    prop_assert!(!out.contains('\\'), "{out:?} has a raw backslash");
    if rules.path_parameters == PathParameters::Reject {
        prop_assert!(!out.contains(';'), "{out:?} has a ;");
    }
    let bytes = out.as_bytes();
    for (i, _) in out.match_indices('%') {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        let value = hex.filter(|h| h.bytes().all(|d| matches!(d, b'0'..=b'9' | b'A'..=b'F')));
        let value = value.and_then(|h| u8::from_str_radix(h, 16).ok());
        prop_assert!(value.is_some(), "{out:?}: % at {i} is not %XX uppercase");
        let v = value.unwrap_or(0);
        prop_assert!(
            !(v.is_ascii_alphanumeric() || b"-._~".contains(&v)),
            "{out:?} %{v:02X}"
        );
        if rules.escaped_slashes == EscapedSlashes::Reject {
            prop_assert!(v != b'/' && v != b'\\', "{out:?} keeps an escaped slash");
        }
    }
    Ok(())
}

/// One equivalent rewrite of `path` (any spelling, canonical or not): a `/` becomes `/./`,
/// `//` or `/zz/../`, or an unreserved character outside a `%XX` is percent-encoded.
fn respell(path: &str, edit: usize, at: prop::sample::Index, lower: bool) -> String {
    let bytes = path.as_bytes();
    let mut encodable = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => i += 2,
            b if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => encodable.push(i),
            _ => {}
        }
        i += 1;
    }
    if edit == 3 && !encodable.is_empty() {
        let i = *at.get(&encodable);
        let enc = format!("%{:02X}", bytes[i]);
        let enc = if lower { enc.to_ascii_lowercase() } else { enc };
        return format!("{}{enc}{}", &path[..i], &path[i + 1..]);
    }
    let slashes: Vec<usize> = path.match_indices('/').map(|(i, _)| i).collect();
    let i = *at.get(&slashes);
    let with = ["/./", "//", "/zz/../"][edit % 3];
    format!("{}{with}{}", &path[..i], &path[i + 1..])
}

proptest! {
    #![proptest_config(config())]

    /// Whenever a path is accepted, the output keeps every promise of the module doc and
    /// is a fixed point; the defaults accept a subset of what `Keep` accepts, identically.
    #[test]
    fn output_is_canonical_and_a_fixed_point(path in path_from(NOISY, 0.9)) {
        for rules in ALL_RULES {
            if let Ok(out) = normalize_path(&path, rules) {
                check_canonical(&out, rules)?;
                let again = normalize_path(&out, rules);
                prop_assert!(
                    matches!(&again, Ok(Cow::Borrowed(o)) if *o == out),
                    "{path:?} -> {out:?} -> {again:?} under {rules:?}"
                );
            }
        }
        if let Ok(strict) = normalize_path(&path, S) {
            for rules in ALL_RULES {
                prop_assert_eq!(normalize_path(&path, rules), Ok(strict.clone()));
            }
        }
    }

    /// Inserting `/./` or `/zz/../`, doubling a slash, or percent-encoding an unreserved
    /// character (up to four such edits on top of each other) never changes the result.
    #[test]
    fn equivalent_spellings_agree(
        path in path_from(CLEAN, 1.0),
        edits in prop::collection::vec((0..4usize, any::<prop::sample::Index>(), any::<bool>()), 1..5),
    ) {
        for rules in [S, K] {
            let canonical = normalize_path(&path, rules);
            prop_assert!(canonical.is_ok(), "{path:?}: {canonical:?}");
            let canonical = canonical.unwrap_or_default();
            let mut spelling = canonical.to_string();
            for &(edit, at, lower) in &edits {
                spelling = respell(&spelling, edit, at, lower);
                let respelled = normalize_path(&spelling, rules);
                prop_assert_eq!(
                    respelled.as_deref(),
                    Ok(canonical.as_ref()),
                    "{:?} respelled as {:?}", canonical, spelling
                );
            }
        }
    }
}
