//! `GET /dashboard`: one self-contained HTML page (`dashboard.html`: inline style and script,
//! nothing fetched from anywhere but this listener's JSON endpoints).
//!
//! The page is served without the admin token: it is the same static text for everyone and
//! holds no data; every number it shows comes from `/activity`, `/status`, `/limits/…/top`
//! and `/shadow`, which stay behind the token, and the page asks for the token when they
//! answer 401. Its Content-Security-Policy names its one script and one style by SHA-256
//! and allows requests to its own origin only, so nothing injected into the page (a key is
//! whatever a client sent) could run or call out, and no other site may frame it.

use std::sync::LazyLock;

use base64::Engine;
use bytes::Bytes;
use http::{HeaderValue, Method, Response, header};
use sha2::{Digest, Sha256};

use super::method_not_allowed;
use crate::body::{ResponseBody, full};

/// The page, readable in its own file.
const PAGE: &str = include_str!("dashboard.html");

/// The policy, with the hashes of the page's own script and style.
static CSP: LazyLock<HeaderValue> = LazyLock::new(|| {
    let policy = csp(PAGE);
    HeaderValue::from_str(&policy).expect("a CSP of ASCII text is a header value")
});

/// `default-src 'none'` and then only what the page itself is: its script and style (by
/// hash), `fetch` to its own origin, no base URL, no form target, no framing.
fn csp(page: &str) -> String {
    let hash = |open: &str, close: &str| {
        let body = element_text(page, open, close).unwrap_or_default();
        let digest = Sha256::digest(body.as_bytes());
        base64::engine::general_purpose::STANDARD.encode(digest)
    };
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
         connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'",
        hash("<script>", "</script>"),
        hash("<style>", "</style>"),
    )
}

/// The text between the first `open` tag and the `close` after it: what a CSP hash covers.
fn element_text<'a>(page: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = page.find(open)? + open.len();
    let len = page[start..].find(close)?;
    Some(&page[start..start + len])
}

/// Answer `/dashboard`: the page for `GET`, 405 otherwise.
pub fn page(method: &Method) -> Response<ResponseBody> {
    if method != Method::GET {
        return method_not_allowed("GET");
    }
    let mut resp = Response::new(full(Bytes::from_static(PAGE.as_bytes())));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CONTENT_SECURITY_POLICY, CSP.clone());
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_hashes_the_pages_one_script_and_one_style() {
        assert_eq!(PAGE.matches("<script").count(), 1, "one script element");
        assert_eq!(PAGE.matches("<style").count(), 1, "one style element");
        let script = element_text(PAGE, "<script>", "</script>").unwrap();
        assert!(script.contains("async function refresh()"));
        let digest = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script));
        let policy = csp(PAGE);
        assert!(
            policy.contains(&format!("script-src 'sha256-{digest}'")),
            "{policy}"
        );
        assert!(policy.starts_with("default-src 'none';"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
    }

    /// Nothing the page needs comes from elsewhere, and the token is kept nowhere but in
    /// a variable.
    #[test]
    fn the_page_is_self_contained_and_keeps_the_token_in_memory() {
        for outside in ["http://", "https://", "//cdn", "src=", "@import", "url("] {
            let outside_markup = PAGE.replace("http://www.w3.org/2000/svg", "");
            assert!(!outside_markup.contains(outside), "{outside} in the page");
        }
        for store in [
            "localStorage",
            "sessionStorage",
            "document.cookie",
            "indexedDB",
        ] {
            assert!(!PAGE.contains(store), "{store} in the page");
        }
        assert!(
            !PAGE.contains("innerHTML"),
            "data is written as text, never as markup"
        );
        assert!(
            !PAGE.contains(" style=\""),
            "a style attribute would need 'unsafe-inline'"
        );
    }
}
