//! `GET /limits/{policy}/top?window=1m|15m&n=20[&value=V]` and `GET /shadow[?value=V]`:
//! who this node is denying, live (the limiter's summaries, `limit/top/`), as JSON. `value`
//! looks one sent value up (a username, an API key): the keys holding it, found by its
//! keyed hash (or in clear where the policy has `show_values`).

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
    let Query { window, n, value } = match parse(req.uri().query().unwrap_or("")) {
        Ok(q) => q,
        Err(e) => return problem(StatusCode::BAD_REQUEST, &e),
    };
    let view = match &value {
        Some(v) => limiter.top_keys_of(policy, window, n, v),
        None => limiter.top_keys(policy, window, n),
    };
    match view {
        Ok(view) => json(&view),
        Err(e @ TopError::NoPolicy(_)) => problem(StatusCode::NOT_FOUND, &e.to_string()),
    }
}

/// `GET /shadow`.
pub fn shadow<B>(limiter: &Limiter, req: &Request<B>) -> Response<ResponseBody> {
    if req.method() != Method::GET {
        return method_not_allowed("GET");
    }
    let mut value = None;
    for (name, v) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        match &*name {
            "value" if value.is_none() && !v.is_empty() => value = Some(v.into_owned()),
            "value" => return problem(StatusCode::BAD_REQUEST, VALUE),
            other => {
                let e = format!("unknown parameter `{other}` (value)");
                return problem(StatusCode::BAD_REQUEST, &e);
            }
        }
    }
    match value {
        Some(v) => json(&limiter.shadow_summary_of(&v)),
        None => json(&limiter.shadow_summary()),
    }
}

/// What a wrong `value` is told.
const VALUE: &str = "value: give one value to look up, once, not empty";

/// A `/limits/{policy}/top` query.
#[derive(Debug, PartialEq)]
struct Query {
    window: Window,
    n: usize,
    value: Option<String>,
}

/// `window` (default `1m`), `n` (default 20, 1 to 1000) and `value` (once, not empty);
/// anything else names the parameter that is wrong.
fn parse(query: &str) -> Result<Query, String> {
    let (mut window, mut n, mut looked_up) = (Window::OneMinute, DEFAULT_N, None);
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
            "value" if looked_up.is_none() && !value.is_empty() => {
                looked_up = Some(value.into_owned());
            }
            "value" => return Err(VALUE.into()),
            other => return Err(format!("unknown parameter `{other}` (window, n, value)")),
        }
    }
    Ok(Query {
        window,
        n,
        value: looked_up,
    })
}

#[cfg(test)]
mod tests {
    use super::{Query, parse};
    use crate::limit::top::Window;

    #[test]
    fn bad_parameters_are_named() {
        let q = |window, n, value: Option<&str>| Query {
            window,
            n,
            value: value.map(Into::into),
        };
        assert_eq!(parse("").unwrap(), q(Window::OneMinute, 20, None));
        assert_eq!(
            parse("window=15m&n=3&value=al%20ice").unwrap(),
            q(Window::FifteenMinutes, 3, Some("al ice"))
        );
        for (q, named) in [
            ("value=", "value"),
            ("value=a&value=b", "value"),
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
