//! Every problem `type` the gateway sends (`src/respond`: the `kind` of each arm of
//! `GatewayError::answer` under `https://tollgate.dev/problems/`, the limit step's arms
//! made by the limiter's constructors in `layer/answer/mod.rs`, and the IANA types of 429
//! and 503) is listed on the proxy page (docs/src/proxy.md, "The answer").

use std::path::Path;

fn read(p: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(p)).unwrap()
}

/// The kinds of `fn answer`'s arms in src/respond/answer.rs: the first quoted string of
/// each `ErrorAnswer::plain(…)`.
fn kinds(source: &str) -> Vec<String> {
    let start = source
        .find("pub fn answer(&self)")
        .expect("GatewayError::answer");
    let body = &source[start..];
    let body = &body[..body.find("\n    }\n").expect("the end of answer")];
    body.split("ErrorAnswer::plain(")
        .skip(1)
        .filter_map(|call| call.split('"').nth(1))
        .map(str::to_string)
        .collect()
}

/// The kinds of the limiter's `ErrorAnswer` constructors (the limit step's refusals, which
/// `GatewayError::answer` calls): the first quoted string of each `Self::plain(…)`.
fn limit_kinds(source: &str) -> Vec<String> {
    source
        .split("Self::plain(")
        .skip(1)
        .filter_map(|call| call.split('"').nth(1))
        .map(str::to_string)
        .collect()
}

/// The limiter's answers to the limit step's refusals.
const LIMIT_ANSWERS: &str = "crates/tollgate-limit/src/layer/answer/mod.rs";

/// The `https://iana.org/…` constants of the limiter's `layer/answer/headers.rs`.
fn iana_types(source: &str) -> Vec<String> {
    source
        .split('"')
        .filter(|s| s.starts_with("https://iana.org/assignments/http-problem-types#"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_problem_type_is_listed_on_the_proxy_page() {
    let page = read("docs/src/proxy.md");
    let mut kinds = kinds(&read("src/respond/answer.rs"));
    kinds.extend(limit_kinds(&read(LIMIT_ANSWERS)));
    assert!(kinds.len() >= 10, "kinds found: {kinds:?}");
    let mut types: Vec<String> = kinds
        .iter()
        .filter(|k| *k != "rate_limited" && *k != "store_unavailable")
        .map(|k| format!("https://tollgate.dev/problems/{k}"))
        .collect();
    let iana = iana_types(&read("crates/tollgate-limit/src/layer/answer/headers.rs"));
    assert_eq!(iana.len(), 2, "{iana:?}");
    types.extend(iana);
    for t in types {
        assert!(
            page.contains(&format!("`{t}`")),
            "docs/src/proxy.md does not list the problem type {t}"
        );
    }
}
