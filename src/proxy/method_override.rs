//! Step 2 of the request path, continued: the method. Rails, Laravel, Express and ASP.NET run
//! the method an `X-HTTP-Method-Override` (or `X-Method-Override`, `X-HTTP-Method`) names,
//! so `GET /login` with an override of `POST` would be routed and limited as a GET and run
//! as the login POST. By default (`[server] method_override = "drop"`) no spelling of them
//! is forwarded (`headers::names`), so the request line's method is the one run. With
//! `"route"` the named method becomes the request's method here, before routing: it is the
//! one routed, limited, logged and forwarded, as the method itself — so a backend that
//! ignores the header, or honours it only on POST, runs the same method tollgate limited.

use http::header::{HeaderMap, HeaderValue};
use http::{Method, Request};

use super::headers::names::is_method_override;
use crate::config::MethodOverride;
use crate::respond::GatewayError;

/// In `route` mode, make the override (if any) the request's method, or refuse it: one
/// value, in upper case, naming a method an override may name. `drop` costs nothing here.
pub(super) fn apply<B>(req: &mut Request<B>, mode: MethodOverride) -> Result<(), GatewayError> {
    if let Some(query) = req.uri().query()
        && overrides_in_query(query)
    {
        return Err(bad(
            "a method override in the query string (`_method`) is not accepted",
        ));
    }
    if mode == MethodOverride::Drop {
        return Ok(());
    }
    if let Some(value) = override_value(req.headers())? {
        *req.method_mut() = overriding(value)?;
    }
    Ok(())
}

/// Whether the query names a `_method` (in any case, encoded or not): Express's
/// `method-override('_method')`, Symfony/Laravel's `getMethod()` and Spring's
/// `HiddenHttpMethodFilter` run the method it names, and a query cannot be half dropped
/// without changing the request, so it is refused in both modes. (A `_method` form field
/// is a body and is not read.)
fn overrides_in_query(query: &str) -> bool {
    form_urlencoded::parse(query.as_bytes())
        .any(|(name, _)| name.trim().eq_ignore_ascii_case("_method"))
}

/// The one value the request's override headers state, over every spelling of the three
/// names and every field line; `None` without any, 400 when two lines differ (which one
/// the backend reads is its own business, so neither may be routed).
fn override_value(headers: &HeaderMap) -> Result<Option<&HeaderValue>, GatewayError> {
    let mut found: Option<&HeaderValue> = None;
    for name in headers.keys().filter(|k| is_method_override(k.as_str())) {
        for value in headers.get_all(name) {
            if found.is_some_and(|f| f != value) {
                return Err(bad("method override headers name different methods"));
            }
            found = Some(value);
        }
    }
    Ok(found)
}

/// The method `value` names. Only methods a backend runs with the response a client's
/// connection expects: `HEAD` would send a GET's client a HEAD's empty body (the framing
/// its connection expects is the request line's), `CONNECT` and `TRACE` are never routed,
/// and a lower-case or made-up method is refused as on the request line (`canonical.rs`).
fn overriding(value: &HeaderValue) -> Result<Method, GatewayError> {
    Ok(match value.as_bytes() {
        b"GET" => Method::GET,
        b"POST" => Method::POST,
        b"PUT" => Method::PUT,
        b"PATCH" => Method::PATCH,
        b"DELETE" => Method::DELETE,
        b"OPTIONS" => Method::OPTIONS,
        _ => {
            return Err(bad(
                "a method override must name one upper-case method: GET, POST, PUT, PATCH, \
                 DELETE or OPTIONS",
            ));
        }
    })
}

fn bad(reason: &str) -> GatewayError {
    GatewayError::BadRequest(reason.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GET /` with `headers`, made canonical in `mode`: its method, or the refusal.
    fn method(mode: MethodOverride, headers: &[(&str, &str)]) -> Result<Method, String> {
        let mut req = Request::get("/").body(()).unwrap();
        for (n, v) in headers {
            let name = http::HeaderName::from_bytes(n.as_bytes()).unwrap();
            req.headers_mut().append(name, v.parse().unwrap());
        }
        apply(&mut req, mode).map_err(|e| e.to_string())?;
        Ok(req.method().clone())
    }

    #[test]
    fn route_mode_routes_the_override_in_any_spelling() {
        for name in [
            "x-http-method-override",
            "X_HTTP_Method_Override",
            "x-method_override",
        ] {
            let got = method(MethodOverride::Route, &[(name, "POST")]);
            assert_eq!(got, Ok(Method::POST), "{name}");
        }
        let same = [("x-http-method", "DELETE"), ("x_method_override", "DELETE")];
        assert_eq!(method(MethodOverride::Route, &same), Ok(Method::DELETE));
        assert_eq!(method(MethodOverride::Route, &[]), Ok(Method::GET));
        let drop = method(MethodOverride::Drop, &[("x-http-method-override", "POST")]);
        assert_eq!(drop, Ok(Method::GET));
    }

    #[test]
    fn route_mode_refuses_what_is_not_one_known_upper_case_method() {
        let refused: [&[(&str, &str)]; 6] = [
            &[("x-http-method-override", "post")],
            &[("x-http-method-override", "POST, PUT")],
            &[("x-http-method-override", "HEAD")],
            &[("x-http-method-override", "BREW")],
            &[
                ("x-http-method-override", "POST"),
                ("x-http-method-override", "PUT"),
            ],
            &[("x-http-method-override", "POST"), ("x_http_method", "PUT")],
        ];
        for headers in refused {
            let got = method(MethodOverride::Route, headers);
            assert!(
                got.is_err_and(|e| e.contains("method override")),
                "{headers:?}"
            );
        }
    }

    #[test]
    fn a_method_override_in_the_query_is_refused_in_both_modes() {
        for mode in [MethodOverride::Drop, MethodOverride::Route] {
            for q in [
                "_method=DELETE",
                "a=1&_METHOD=delete",
                "%5Fmethod=PUT",
                "+_method=PUT",
            ] {
                let mut req = Request::post(format!("/item?{q}")).body(()).unwrap();
                assert!(apply(&mut req, mode).is_err(), "{q}");
            }
            let mut req = Request::post("/item?method=DELETE&x_method=1")
                .body(())
                .unwrap();
            assert!(apply(&mut req, mode).is_ok());
        }
    }
}
