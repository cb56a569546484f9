//! Before any admin route: whether a request may be answered at all, whatever its token.
//! The admin listener is usually on loopback without a token, and a browser on the same
//! machine can reach loopback for any page it opens. Two ways in are closed here:
//!
//! - **DNS rebinding**: a page at `attacker.example` rebinds its name to `127.0.0.1` and
//!   reads `/config` as its own origin. Its requests carry `Host: attacker.example`, so a
//!   `Host` the listener does not know is refused (421 Misdirected Request). Known are: an
//!   IP address that is the listener's own (a loopback address, the bound one, or any when
//!   it is bound to `0.0.0.0`/`::` — every address of the machine is then its own), the name
//!   `localhost`, and `[server] admin_hosts`. The port is not compared for the built-in
//!   names: a rebinding page carries its own *name* on any port, while an SSH tunnel or a
//!   `kubectl port-forward` changes only the port. An `admin_hosts` entry with a port
//!   matches that port only. `/healthz` and `/readyz` are not held to it: they are open
//!   without the token too, hold nothing, and balancers probe them under names of their own.
//! - **Cross-site requests**: a page anywhere can send a form `POST` (or a `fetch` with
//!   `mode: "no-cors"`) to `http://127.0.0.1:9901/reload`; it cannot read the answer but the
//!   reload happens. A state-changing request (any method but `GET`, `HEAD`, `OPTIONS`,
//!   `TRACE`) whose `Sec-Fetch-Site` is not `same-origin` or `none`, or whose `Origin` is
//!   not this listener's own (the request's `Host` over `http` or `https`), is refused
//!   (403). A request with neither header is no browser's (curl, `tollgate reload`,
//!   scripts) and passes; the dashboard's own requests are same-origin.
//!
//! Both checks apply with `admin_token_env` set too: a token already stops a cross-site
//! form (it cannot carry `Authorization`), but the checks cost nothing and hold when the
//! token leaks into a browser (the dashboard keeps it in the page).

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use http::uri::Authority;
use http::{HeaderMap, Method, Request, StatusCode, header};

use crate::body::ResponseBody;
use crate::config::AdminHost;

use super::limits::problem;

/// Which `Host`s the admin listener answers to.
#[derive(Debug, Clone)]
pub struct Gate {
    /// The address the listener is bound to (with port 0 configured: the real port).
    bound: SocketAddr,
    /// `[server] admin_hosts`.
    hosts: Vec<AdminHost>,
}

impl Gate {
    pub fn new(bound: SocketAddr, hosts: Vec<AdminHost>) -> Self {
        Gate { bound, hosts }
    }

    /// `None` when `req` may go on to its route; else the refusal (421 or 403).
    pub(super) fn refuse<B>(&self, req: &Request<B>) -> Option<http::Response<ResponseBody>> {
        let path = req.uri().path();
        if matches!(path, "/healthz" | "/readyz") {
            return None;
        }
        let host = match request_host(req) {
            Ok(host) => host,
            Err(shown) => return Some(misdirected(&shown)),
        };
        if let Some(host) = &host
            && !self.knows(host)
        {
            return Some(misdirected(host.as_str()));
        }
        if changes_state(req.method()) {
            return cross_site(req.headers(), host.as_ref()).map(|why| {
                problem(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "{why}: the admin API takes a {} only from its own pages or from \
                         clients that send no Origin (curl, tollgate reload)",
                        req.method()
                    ),
                )
            });
        }
        None
    }

    /// Whether `host` names this listener.
    fn knows(&self, host: &Authority) -> bool {
        // A port that is no port (`127.0.0.1:80.attacker.example`, `localhost:`) names
        // nothing this listener is: no browser sends one, and no address is read from it.
        // (`http` reads such a port as none: anything after the host must be a port.)
        let suffixed = host.as_str().len() > host.host().len();
        if suffixed && host.port_u16().is_none_or(|p| p == 0) {
            return false;
        }
        let name = host.host();
        if name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        if let Some(ip) = ip_of(name) {
            let ip = ip.to_canonical();
            let bound = self.bound.ip().to_canonical();
            if ip.is_loopback() || ip == bound || bound.is_unspecified() {
                return true;
            }
        }
        self.hosts.iter().any(|h| {
            h.host.eq_ignore_ascii_case(name) && h.port.is_none_or(|p| host.port_u16() == Some(p))
        })
    }
}

/// An IP address as a `Host` writes it (an IPv6 one in brackets).
fn ip_of(host: &str) -> Option<IpAddr> {
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6),
        None => host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4),
    }
}

/// The host the request names: the URI's authority (HTTP/2's `:authority`, an HTTP/1.1
/// absolute-form target) and every `Host` line must agree. `Ok(None)` when it names none
/// (HTTP/1.0 without `Host`: no browser sends that). `Err` with what was sent when it is
/// not one host.
fn request_host<B>(req: &Request<B>) -> Result<Option<Authority>, String> {
    let mut found: Option<Authority> = req.uri().authority().cloned();
    for value in req.headers().get_all(header::HOST) {
        let shown = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let parsed = value
            .to_str()
            .ok()
            .and_then(|v| Authority::from_str(v).ok())
            .filter(|a| !a.as_str().contains('@'))
            .ok_or_else(|| shown.clone())?;
        match &found {
            Some(f) if !f.as_str().eq_ignore_ascii_case(parsed.as_str()) => return Err(shown),
            _ => found = Some(parsed),
        }
    }
    Ok(found)
}

/// Methods that change something: all but the safe ones (RFC 9110 §9.2.1).
fn changes_state(method: &Method) -> bool {
    !method.is_safe()
}

/// Why a state-changing request comes from another site, if it does.
fn cross_site(headers: &HeaderMap, host: Option<&Authority>) -> Option<String> {
    let mut sites = headers.get_all("sec-fetch-site").iter();
    if let (Some(_), Some(_)) = (sites.next(), sites.next()) {
        return Some("a request with Sec-Fetch-Site twice is refused".into());
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.as_bytes();
        if !(site.eq_ignore_ascii_case(b"same-origin") || site.eq_ignore_ascii_case(b"none")) {
            return Some(format!(
                "a request with Sec-Fetch-Site `{}` is refused",
                String::from_utf8_lossy(site)
            ));
        }
    }
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let origin = origins.next()?;
    let shown = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    let refused = || Some(format!("a request from Origin `{shown}` is refused"));
    if origins.next().is_some() {
        return refused();
    }
    let Some(host) = host else {
        return refused();
    };
    match origin
        .to_str()
        .ok()
        .and_then(|o| o.parse::<http::Uri>().ok())
    {
        Some(o) if same_origin(&o, host) => None,
        _ => refused(),
    }
}

/// Whether `origin` (`scheme://host[:port]`) is the listener's own as `host` names it:
/// the same host and the same port, a missing port being the origin scheme's default.
fn same_origin(origin: &http::Uri, host: &Authority) -> bool {
    let default = match origin.scheme_str() {
        Some("http") => 80,
        Some("https") => 443,
        _ => return false,
    };
    let bare = origin.path_and_query().is_none_or(|p| p.as_str() == "/");
    let Some(o) = origin.authority().filter(|_| bare) else {
        return false;
    };
    o.host().eq_ignore_ascii_case(host.host())
        && o.port_u16().unwrap_or(default) == host.port_u16().unwrap_or(default)
}

/// 421: this listener is not the `Host` the request was meant for.
fn misdirected(host: &str) -> http::Response<ResponseBody> {
    problem(
        StatusCode::MISDIRECTED_REQUEST,
        &format!(
            "the admin listener does not answer to Host `{host}`: it answers to its own \
             address, localhost, and the names in [server] admin_hosts"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(bound: &str, hosts: &[(&str, Option<u16>)]) -> Gate {
        let hosts = hosts
            .iter()
            .map(|(h, p)| AdminHost {
                host: (*h).to_string(),
                port: *p,
            })
            .collect();
        Gate::new(bound.parse().unwrap(), hosts)
    }

    fn knows(g: &Gate, host: &str) -> bool {
        g.knows(&Authority::from_str(host).unwrap())
    }

    #[test]
    fn own_addresses_and_localhost_on_any_port_and_listed_names() {
        let g = gate(
            "127.0.0.1:9901",
            &[("admin.internal", Some(9901)), ("ops", None)],
        );
        for ok in [
            "127.0.0.1:9901",
            "127.0.0.1",
            "LOCALHOST:19901",
            "[::1]:9901",
            "127.0.0.2:9901",
            "admin.internal:9901",
            "Admin.Internal:9901",
            "ops:1",
        ] {
            assert!(knows(&g, ok), "{ok}");
        }
        for refused in [
            "attacker.example:9901",
            "admin.internal:9902",
            "admin.internal",
            "10.0.0.5:9901",
            "localhost.attacker.example",
            "127.0.0.1.nip.io:9901",
            // Issue 46's attacker: a port that is no port.
            "127.0.0.1:9901.attacker.example",
            "localhost:abc",
            "localhost:99999",
            "localhost:",
        ] {
            assert!(
                Authority::from_str(refused).is_err() || !knows(&g, refused),
                "{refused}"
            );
        }
        let any = gate("0.0.0.0:9901", &[]);
        assert!(knows(&any, "10.0.0.5:9901"));
        assert!(!knows(&any, "attacker.example:9901"));
    }

    #[test]
    fn sec_fetch_site_twice_is_refused() {
        let mut h = HeaderMap::new();
        h.append("sec-fetch-site", "same-origin".parse().unwrap());
        assert_eq!(cross_site(&h, None), None);
        h.append("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(cross_site(&h, None).is_some());
    }

    #[test]
    fn the_origin_must_be_the_hosts_own() {
        let host = Authority::from_static("127.0.0.1:9901");
        let o = |s: &str| s.parse::<http::Uri>().unwrap();
        assert!(same_origin(&o("http://127.0.0.1:9901"), &host));
        assert!(same_origin(&o("HTTP://127.0.0.1:9901"), &host));
        assert!(!same_origin(&o("http://127.0.0.1:9902"), &host));
        assert!(!same_origin(&o("http://attacker.example"), &host));
        assert!(!same_origin(&o("http://127.0.0.1:9901/x"), &host));
        let bare = Authority::from_static("admin.internal");
        assert!(same_origin(&o("https://admin.internal"), &bare));
        assert!(same_origin(&o("http://admin.internal:80"), &bare));
        assert!(!same_origin(&o("http://admin.internal:3000"), &bare));
    }
}
