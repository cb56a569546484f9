//! Route matching: the first decision about a request, before limits or forwarding.
//!
//! Routes are sorted once at start by specificity (a route with a `host` first, then the
//! longest `path_prefix`, then the order written), so matching is a scan that stops at the
//! first hit and no request pays for sorting.

use std::sync::Arc;

use http::Method;

use crate::config::{Config, Route};

/// A route ready for the request path, shared by every request it matches.
#[derive(Debug)]
pub struct RouteEntry {
    /// The validated route.
    pub route: Route,
    /// The name as a cheap-to-clone label for metrics and logs.
    pub name: Arc<str>,
    /// Position in the config's route list: how the limiter finds this route's policies.
    pub index: usize,
}

/// All routes, most specific first.
#[derive(Debug)]
pub struct Router {
    /// Sorted by specificity; see the module doc.
    routes: Vec<Arc<RouteEntry>>,
}

impl Router {
    pub fn new(config: &Config) -> Self {
        Router {
            routes: config
                .match_order()
                .into_iter()
                .map(|index| {
                    let r = &config.routes[index];
                    Arc::new(RouteEntry {
                        index,
                        name: Arc::from(r.name.as_str()),
                        route: r.clone(),
                    })
                })
                .collect(),
        }
    }

    /// The most specific route for a canonical request (host without port, canonical
    /// path), or `None` (the caller answers 404).
    pub fn find(
        &self,
        host: Option<&str>,
        path: &str,
        method: &Method,
    ) -> Option<&Arc<RouteEntry>> {
        self.routes.iter().find(|e| {
            let r = &e.route;
            r.host
                .as_deref()
                .is_none_or(|h| host.is_some_and(|rh| rh.eq_ignore_ascii_case(h)))
                && prefix_matches(r, path)
                && method_matches(&r.methods, method)
        })
    }
}

fn prefix_matches(r: &Route, path: &str) -> bool {
    let prefix = r.path_prefix.as_bytes();
    let path = path.as_bytes();
    if r.case_insensitive {
        path.len() >= prefix.len() && path[..prefix.len()].eq_ignore_ascii_case(prefix)
    } else {
        path.starts_with(prefix)
    }
}

fn method_matches(methods: &[Method], m: &Method) -> bool {
    methods.is_empty() || methods.contains(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_str, validate};
    use std::path::Path;

    fn router(routes: &str) -> Router {
        let text = format!(
            "[server]\nlisten=\"127.0.0.1:0\"\n[upstreams.a]\nurls=[\"http://127.0.0.1:1\"]\n{routes}"
        );
        let raw = parse_str(&text, Path::new("t.toml")).unwrap();
        Router::new(&validate(raw, Path::new("t.toml")).unwrap())
    }

    fn hit(r: &Router, method: &str, host: &str, path: &str) -> Option<String> {
        let host = host.split(':').next();
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        r.find(host, path, &method).map(|e| e.route.name.clone())
    }

    #[test]
    fn most_specific_wins() {
        let r = router(
            r#"
[[routes]]
name = "root"
upstream = "a"
[[routes]]
name = "api"
match = { path_prefix = "/api" }
upstream = "a"
[[routes]]
name = "api-host"
match = { path_prefix = "/", host = "Api.Example.com" }
upstream = "a"
[[routes]]
name = "login-post"
match = { path_prefix = "/api/login", methods = ["post"] }
upstream = "a"
"#,
        );
        assert_eq!(hit(&r, "GET", "x", "/api/v1").as_deref(), Some("api"));
        assert_eq!(hit(&r, "GET", "x", "/other").as_deref(), Some("root"));
        assert_eq!(
            hit(&r, "GET", "api.example.com:8080", "/api").as_deref(),
            Some("api-host")
        );
        assert_eq!(
            hit(&r, "POST", "x", "/api/login").as_deref(),
            Some("login-post")
        );
        assert_eq!(hit(&r, "GET", "x", "/api/login").as_deref(), Some("api"));
    }

    #[test]
    fn case_insensitive_prefix() {
        let r = router(
            "[[routes]]\nname=\"login\"\nmatch={path_prefix=\"/api/login\", case_insensitive=true}\nupstream=\"a\"\n[[routes]]\nname=\"rest\"\nupstream=\"a\"\n",
        );
        assert_eq!(hit(&r, "GET", "x", "/API/Login").as_deref(), Some("login"));
        assert_eq!(hit(&r, "GET", "x", "/api/logi").as_deref(), Some("rest"));
    }

    #[test]
    fn no_match_is_none() {
        let r = router("[[routes]]\nname=\"api\"\nmatch={path_prefix=\"/api\"}\nupstream=\"a\"\n");
        assert_eq!(hit(&r, "GET", "x", "/"), None);
    }

    #[test]
    fn ties_go_to_the_earlier_route() {
        let r = router(
            "[[routes]]\nname=\"first\"\nupstream=\"a\"\n[[routes]]\nname=\"second\"\nupstream=\"a\"\n",
        );
        assert_eq!(hit(&r, "GET", "x", "/").as_deref(), Some("first"));
    }
}
