//! `GET /limits/{policy}/top?window=1m|15m&n=20` and `GET /shadow`: who this node is
//! denying, live (the limiter's summaries, `limit/top/`), as JSON.

use http::{Method, Request, Response, StatusCode};

use super::limits::{json, problem};
use super::method_not_allowed;
use crate::body::ResponseBody;
use crate::limit::Limiter;
use crate::limit::top::{TopError, Window};

/// The most keys one answer lists.
const MAX_N: usize = 1000;

/// Keys listed when `n` is not given.
const DEFAULT_N: usize = 20;

/// `/limits/{policy}/top`; `policy` is the path between.
pub fn answer<B>(limiter: &Limiter, policy: &str, req: &Request<B>) -> Response<ResponseBody> {
    if req.method() != Method::GET {
        return method_not_allowed("GET");
    }
    let (window, n) = match parse(req.uri().query().unwrap_or("")) {
        Ok(q) => q,
        Err(e) => return problem(StatusCode::BAD_REQUEST, &e),
    };
    match limiter.top_keys(policy, window, n) {
        Ok(view) => json(&view),
        Err(e @ TopError::NoPolicy(_)) => problem(StatusCode::NOT_FOUND, &e.to_string()),
    }
}

/// `GET /shadow`.
pub fn shadow<B>(limiter: &Limiter, req: &Request<B>) -> Response<ResponseBody> {
    if req.method() != Method::GET {
        return method_not_allowed("GET");
    }
    json(&limiter.shadow_summary())
}

/// `window` (default `1m`) and `n` (default 20, 1 to 1000); anything else names the
/// parameter that is wrong.
fn parse(query: &str) -> Result<(Window, usize), String> {
    let (mut window, mut n) = (Window::OneMinute, DEFAULT_N);
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*name {
            "window" => {
                window = Window::parse(&value)
                    .ok_or_else(|| format!("window: `{value}` is not a window (1m or 15m)"))?;
            }
            "n" => {
                n = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_N).contains(n))
                    .ok_or_else(|| format!("n: `{value}` is not a number from 1 to {MAX_N}"))?;
            }
            other => return Err(format!("unknown parameter `{other}` (window, n)")),
        }
    }
    Ok((window, n))
}

#[cfg(test)]
mod tests {
    use super::parse;
    use crate::limit::top::Window;

    #[test]
    fn bad_parameters_are_named() {
        assert_eq!(parse("").unwrap(), (Window::OneMinute, 20));
        assert_eq!(
            parse("window=15m&n=3").unwrap(),
            (Window::FifteenMinutes, 3)
        );
        for (q, named) in [
            ("window=5m", "window"),
            ("n=0", "n"),
            ("n=1001", "n"),
            ("n=x", "n"),
            ("top=3", "`top`"),
        ] {
            let e = parse(q).unwrap_err();
            assert!(e.starts_with(named) || e.contains(named), "{q}: {e}");
        }
    }
}
