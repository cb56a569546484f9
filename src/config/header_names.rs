//! Header names that already mean something to tollgate or to forwarding, in one place for
//! both readers: the proxy's protected names (`proxy/headers/names.rs` applies
//! [`OWN_CLAIMS`], [`CLAIMS`] and [`OVERRIDES`] to every request, through [`spells`]) and
//! `check`, which refuses a `[server] request_id_header` that is one of them
//! (`validate/operations.rs`): the id is written over whatever the client sent in that
//! header, so naming one of these would change the request, not label it.

/// The one rule: whether header `name` is `protected` as a CGI backend reads both, `_` and
/// `-` being one character and ASCII case ignored (`HeaderName` lower-cases already; config
/// names may be written with `_`). Every protected name is compared through this.
pub fn spells(name: &str, protected: &str) -> bool {
    let fold = |b: u8| {
        if b == b'_' {
            b'-'
        } else {
            b.to_ascii_lowercase()
        }
    };
    name.len() == protected.len()
        && (name.bytes().zip(protected.bytes())).all(|(a, b)| fold(a) == fold(b))
}

/// Claims tollgate reads or writes itself (the client's address: `client_ip.rs`; this hop's
/// `X-Forwarded-For`, `Forwarded`, `X-Forwarded-Proto`, `X-Real-IP`): kept, in their own
/// spelling, from trusted proxies only, so a backend that reads the left-most entry sees
/// what tollgate resolved, not what a client claimed (as Traefik does with untrusted
/// forwarded headers); a twin spelling is a second value tollgate never read, dropped from
/// everyone.
pub const OWN_CLAIMS: [&str; 4] = [
    "x-forwarded-for",
    "forwarded",
    "x-forwarded-proto",
    "x-real-ip",
];

/// Forwarding claims tollgate passes on: where a request came from (host, port, prefix,
/// scheme, path) or who sent it. Backends believe them: Spring, Rack and Symfony the
/// `X-Forwarded-Host/-Port/-Prefix/-Ssl/-Scheme`, IIS rewrite setups `X-Original-URL` and
/// `X-Rewrite-URL`, Rails `Client-IP`, npm `request-ip` and the common PHP snippet the
/// vendor client-IP ones (`X-Client-IP`, `True-Client-IP`, `CF-Connecting-IP`,
/// `Fastly-Client-IP`, `X-Cluster-Client-IP`, `X-Forwarded`, `Forwarded-For`), cache
/// poisoning finds `X-Host`, `X-Original-Host` and `X-Forwarded-Server` honoured; proxies
/// write `X-Original-Forwarded-For` (ingress-nginx) and `X-ProxyUser-Ip` (Google); gunicorn
/// rewrites the path from a `SCRIPT_NAME` header (`forwarder_headers`) and reads
/// `X-Forwarded-Protocol`, Tornado `X-Scheme`, nginx and Traefik setups `X-Original-URI` /
/// `X-Forwarded-Uri`, App Engine and Fly their client-IP headers, and Envoy, Spring and
/// nginx setups take a client certificate from `X-Forwarded-Client-Cert` / `SSL-Client-Cert`.
/// No client has a reason to send any of them, so they are kept only from a trusted proxy.
/// A list of names can never be complete: backends should read only the headers their proxy
/// writes (README, "Security model").
pub const CLAIMS: [&str; 37] = [
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-server",
    "x-forwarded-scheme",
    "x-forwarded-ssl",
    "x-forwarded",
    "forwarded-for",
    "x-original-url",
    "x-rewrite-url",
    "x-original-host",
    "x-host",
    "true-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-client-ip",
    "client-ip",
    "x-cluster-client-ip",
    "x-original-forwarded-for",
    "x-proxyuser-ip",
    "x-forwarded-protocol",
    "x-forwarded-uri",
    "x-forwarded-path",
    "x-original-uri",
    "x-scheme",
    "x-url-scheme",
    "front-end-https",
    "script-name",
    "x-script-name",
    "path-info",
    "fly-client-ip",
    "x-appengine-user-ip",
    "x-forwarded-client-cert",
    "x-client-cert",
    "ssl-client-cert",
    "x-ssl-client-cert",
    "x-envoy-external-address",
];

/// Method overrides (Rails, Laravel/Symfony, Express `method-override`, ASP.NET): dropped in
/// every spelling from everyone; `method_override = "route"` reads them first
/// (`proxy/method_override.rs`) and the method then is the override.
pub const OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-method-override",
    "x-http-method",
];

/// Names HTTP itself gives a meaning, or that tollgate writes on its answers, that a
/// `request_id_header` must not take (with why): the message framing and hop-by-hop
/// headers, credentials, the trace context, and the rate-limit answer headers. A name
/// starting with one of [`TAKEN_PREFIXES`] is taken too.
pub const TAKEN: [(&str, &str); 19] = [
    ("host", "the request's authority"),
    ("authorization", "the client's credentials"),
    ("proxy-authorization", "the client's credentials"),
    ("cookie", "the client's cookies"),
    ("transfer-encoding", "the body's framing"),
    ("connection", "a hop-by-hop header"),
    ("keep-alive", "a hop-by-hop header"),
    ("proxy-connection", "a hop-by-hop header"),
    ("te", "a hop-by-hop header"),
    ("trailer", "a hop-by-hop header"),
    ("upgrade", "a hop-by-hop header"),
    ("expect", "how the body is sent"),
    ("via", "the loop check tollgate writes"),
    ("traceparent", "the W3C trace context"),
    ("tracestate", "the W3C trace context"),
    ("retry-after", "a header tollgate writes on 429 and 503"),
    ("set-cookie", "a response header"),
    ("date", "a message header"),
    ("origin", "the browser's origin"),
];

/// Fields HTTP and browsers already read or write, beyond [`TAKEN`]: the id written over
/// one of them would change the request or the answer (a UUID for `X-Frame-Options`
/// drops a backend's clickjacking guard, for `If-None-Match` breaks its caching, for
/// `WWW-Authenticate` tollgate's own 401), found writing over them in issue 46's trial.
/// From the IANA HTTP field name registry's fields in use, and the security headers
/// browsers obey.
pub const FIELDS: [&str; 58] = [
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-patch",
    "accept-post",
    "accept-ranges",
    "age",
    "allow",
    "alt-svc",
    "alt-used",
    "authentication-info",
    "cache-control",
    "cache-status",
    "cdn-cache-control",
    "clear-site-data",
    "cross-origin-embedder-policy",
    "cross-origin-opener-policy",
    "cross-origin-resource-policy",
    "dnt",
    "early-data",
    "etag",
    "expires",
    "from",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "nel",
    "permissions-policy",
    "pragma",
    "prefer",
    "preference-applied",
    "priority",
    "proxy-authenticate",
    "proxy-authentication-info",
    "range",
    "referer",
    "referrer-policy",
    "refresh",
    "report-to",
    "reporting-endpoints",
    "server",
    "server-timing",
    "strict-transport-security",
    "timing-allow-origin",
    "upgrade-insecure-requests",
    "user-agent",
    "vary",
    "warning",
    "www-authenticate",
    "x-content-type-options",
    "x-dns-prefetch-control",
    "x-frame-options",
    "x-permitted-cross-domain-policies",
    "x-powered-by",
    "x-requested-with",
    "x-xss-protection",
];

/// Trace contexts of other tracers, and credentials or identities a backend or a proxy in
/// front reads (oauth2-proxy's, Apache's `Remote-User`, CSRF tokens, API keys): an id
/// written over one would break a trace or name someone.
pub const CONVENTIONS: [(&str, &str); 19] = [
    ("baggage", "a trace context header"),
    ("b3", "a trace context header"),
    ("uber-trace-id", "a trace context header"),
    ("x-amzn-trace-id", "a trace context header"),
    ("x-cloud-trace-context", "a trace context header"),
    ("x-datadog-trace-id", "a trace context header"),
    ("x-datadog-parent-id", "a trace context header"),
    ("sentry-trace", "a trace context header"),
    ("x-api-key", "a credential header"),
    ("x-auth-token", "a credential header"),
    ("x-access-token", "a credential header"),
    ("x-csrf-token", "a credential header"),
    ("x-xsrf-token", "a credential header"),
    ("remote-user", "an identity header"),
    ("x-remote-user", "an identity header"),
    ("x-user", "an identity header"),
    ("x-email", "an identity header"),
    ("x-ms-client-principal", "an identity header"),
    ("x-amz-security-token", "a credential header"),
];

/// Prefixes of taken names: the body's `content-*` headers, the `RateLimit*` and
/// `X-RateLimit-*` headers tollgate writes, the browser's `sec-*` fetch metadata, and
/// families whose every member means something: CORS, conditional requests, gRPC's and
/// Envoy's own headers, B3 traces, forwarding and auth proxies' identity headers.
pub const TAKEN_PREFIXES: [(&str, &str); 11] = [
    ("content-", "a header of the body"),
    ("ratelimit", "a header tollgate writes on its answers"),
    ("x-ratelimit", "a header tollgate writes on its answers"),
    ("sec-", "a browser's fetch metadata"),
    ("access-control-", "a CORS header"),
    ("if-", "a conditional request header"),
    ("grpc-", "gRPC's own metadata"),
    ("x-envoy-", "a header Envoy reads or writes"),
    ("x-b3-", "a trace context header"),
    ("x-forwarded-", "a forwarding claim backends believe"),
    ("x-auth-request-", "an identity header"),
];

/// Why `name` (any case, `_` or `-`) already means something to HTTP, to forwarding or to
/// tollgate's answers, if it does: the one answer `check` gives for every config name that
/// must not overlap these.
pub fn taken(name: &str) -> Option<&'static str> {
    let prefixed = |prefix: &str| name.get(..prefix.len()).is_some_and(|n| spells(n, prefix));
    if let Some((_, why)) = TAKEN.iter().find(|(n, _)| spells(name, n)) {
        return Some(why);
    }
    if FIELDS.iter().any(|n| spells(name, n)) {
        return Some("a header HTTP or browsers give a meaning");
    }
    if let Some((_, why)) = CONVENTIONS.iter().find(|(n, _)| spells(name, n)) {
        return Some(why);
    }
    if OWN_CLAIMS.iter().any(|n| spells(name, n)) {
        return Some("a forwarding header tollgate writes");
    }
    if CLAIMS.iter().any(|n| spells(name, n)) {
        return Some("a forwarding claim backends believe");
    }
    if OVERRIDES.iter().any(|n| spells(name, n)) {
        return Some("a method override");
    }
    if let Some((_, why)) = TAKEN_PREFIXES.iter().find(|(p, _)| prefixed(p)) {
        return Some(why);
    }
    None
}
