//! The validation pass for the keys an operator runs the gateway by rather than limits
//! with: the request-id header (a name of its own: none that HTTP, forwarding or this
//! config already gives a meaning, `config/header_names.rs`), the access log's file, and
//! the drain delay after SIGTERM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::HeaderName;

use super::Validator;
use crate::config::header_names;
use crate::config::load::relative_to;
use crate::config::raw::RawServer;
use crate::config::{Account, KeyPart, Policy, TierSource, Tiers};

/// The longest `drain_delay`: a balancer notices a failing readiness probe within seconds,
/// and a delay past the orchestrator's kill deadline would only lose the drain itself.
const LONGEST_DRAIN_DELAY: Duration = Duration::from_secs(5 * 60);

/// The key `request_id_header`'s problems are reported under.
const KEY: &str = "server.request_id_header";

/// The server's operations values, before they join `Server`.
pub(super) struct ServerOperations {
    pub request_id_header: HeaderName,
    pub access_log: Option<PathBuf>,
    pub drain_delay: Duration,
}

impl Validator {
    pub(super) fn server_operations(
        &mut self,
        s: &RawServer,
        origin: &Path,
    ) -> Option<ServerOperations> {
        let request_id_header = self.request_id_header(&s.request_id_header);
        let access_log = s
            .access_log
            .as_deref()
            .map(|f| self.log_file("server.access_log", origin, f));
        let drain_delay = self.drain_delay(&s.drain_delay);
        Some(ServerOperations {
            request_id_header: request_id_header?,
            access_log: access_log.map_or(Some(None), |f| f.map(Some))?,
            drain_delay: drain_delay?,
        })
    }

    /// A header name; what it may not mean is checked once the rest of the config is known
    /// ([`Self::request_id_header_own`]), so a name this config reads is named as such.
    fn request_id_header(&mut self, name: &str) -> Option<HeaderName> {
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            self.fail(KEY, format!("`{name}` is not a header name"));
            return None;
        };
        Some(header)
    }

    /// The request id replaces whatever a client sent in `request_id_header`, on the way to
    /// the upstream: a header this config reads (the account, a key part, a cost, a tier)
    /// would reach the backend holding a UUID instead of the client's value, and a response
    /// header it reads would be overwritten on the way back. Compared as CGI backends read
    /// names (`_` and `-` alike).
    /// `(written, header)`: the name as the file spells it (what the message quotes) and
    /// parsed.
    pub(super) fn request_id_header_own(
        &mut self,
        (written, header): (&str, &HeaderName),
        account: Option<&Account>,
        policies: &[Policy],
        tiers: &Tiers,
    ) {
        let mut uses: Vec<(HeaderName, String)> = Vec::new();
        if let Some(a) = account {
            uses.push((a.header.clone(), "the [account] header".into()));
        }
        let variants: Vec<&Policy> = policies.iter().chain(tiers.variants()).collect();
        for p in &variants {
            for part in &p.key {
                if let KeyPart::Header(h) = part {
                    let what = format!("a key part of policy `{}` (header:{h})", p.name);
                    uses.push((h.clone(), what));
                }
            }
            if let Some((h, _)) = &p.spend.cost_header {
                uses.push((h.clone(), format!("the cost_header of policy `{}`", p.name)));
            }
            if let Some(h) = &p.spend.response_cost {
                let what = format!("the response_cost_header of policy `{}`", p.name);
                uses.push((h.clone(), what));
            }
        }
        for (policy, t) in &tiers.by_policy {
            if let Some(TierSource::Header(h)) = &t.source {
                let what = format!("the header policy `{policy}`'s tiers are chosen by");
                uses.push((h.clone(), what));
            }
        }
        if let Some((_, what)) = uses
            .iter()
            .find(|(h, _)| header_names::spells(header.as_str(), h.as_str()))
        {
            self.fail(
                KEY,
                format!(
                    "`{header}` already means something to this config ({what}): the id would replace the client's value on the way to the upstream; pick a header of its own, like \"x-request-id\""
                ),
            );
        } else if let Some(why) = header_names::taken(header.as_str()) {
            self.fail(
                KEY,
                format!("`{written}` already means something to HTTP or to forwarding ({why}): pick a header of its own, like \"x-request-id\""),
            );
        }
    }
}

impl Validator {
    /// A file the gateway will append to: its folder must exist (the file need not).
    /// `check` does not open it (that would create it); `serve` does, and says so if it
    /// cannot.
    fn log_file(&mut self, key: &str, origin: &Path, file: &str) -> Option<PathBuf> {
        if file.is_empty() {
            self.fail(key, "must name a file (leave it out to log to stderr)");
            return None;
        }
        let path = relative_to(origin, file);
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if path.is_dir() {
            self.fail(key, format!("`{}` is a folder, not a file", path.display()));
            return None;
        }
        if !folder.is_dir() {
            self.fail(
                key,
                format!("the folder of `{}` does not exist", path.display()),
            );
            return None;
        }
        Some(path)
    }

    /// Zero is allowed (and the default): the listeners close at once, as before the key.
    fn drain_delay(&mut self, s: &str) -> Option<Duration> {
        const KEY: &str = "server.drain_delay";
        if matches!(humantime::parse_duration(s), Ok(d) if d.is_zero()) {
            return Some(Duration::ZERO);
        }
        let d = self.duration(KEY, s)?;
        if d > LONGEST_DRAIN_DELAY {
            self.fail(KEY, "must be at most 5 minutes (\"5m\")");
            return None;
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::ConfigError;
    use crate::config::raw::RawConfig;
    use crate::config::validate::validate;

    /// The `server.request_id_header` problems of a config with `request_id_header = name`
    /// and `rest` (an account on `x-api-key` and a policy using every header a policy can).
    fn problems(name: &str) -> Vec<String> {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\nrequest_id_header = \"{name}\"\n\
             [account]\nheader = \"x-api-key\"\n\
             [policies.p]\nkey = [\"header:x-tenant\"]\nalgorithm = \"gcra\"\nlimit = 100\n\
             period = \"1s\"\ncost_header = \"x-cost\"\nmax_cost = 5\n\
             response_cost_header = \"x-call-cost\"\ntier_header = \"x-plan\"\n\
             tiers = {{ free = {{ limit = 10 }} }}\n"
        );
        let raw: RawConfig = toml::from_str(&text).unwrap();
        match validate(raw, Path::new("t.toml")) {
            Ok(_) => vec![],
            Err(ConfigError::Invalid { problems, .. }) => problems
                .into_iter()
                .map(|p| format!("{}: {}", p.key, p.message))
                .collect(),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_name_that_http_or_forwarding_gives_a_meaning_is_refused() {
        for (name, why) in [
            ("authorization", "the client's credentials"),
            ("Cookie", "the client's cookies"),
            ("host", "the request's authority"),
            ("content-type", "a header of the body"),
            ("content_length", "a header of the body"),
            ("transfer-encoding", "the body's framing"),
            ("connection", "a hop-by-hop header"),
            ("te", "a hop-by-hop header"),
            ("forwarded", "a forwarding header tollgate writes"),
            ("x-forwarded-for", "a forwarding header tollgate writes"),
            ("x-real-ip", "a forwarding header tollgate writes"),
            ("x-forwarded-host", "a forwarding claim backends believe"),
            ("X_Forwarded_Host", "a forwarding claim backends believe"),
            ("true-client-ip", "a forwarding claim backends believe"),
            ("cf-connecting-ip", "a forwarding claim backends believe"),
            ("x-http-method-override", "a method override"),
            ("traceparent", "the W3C trace context"),
            ("tracestate", "the W3C trace context"),
            ("via", "the loop check tollgate writes"),
            ("ratelimit", "a header tollgate writes on its answers"),
            (
                "ratelimit-policy",
                "a header tollgate writes on its answers",
            ),
            (
                "x-ratelimit-remaining",
                "a header tollgate writes on its answers",
            ),
            ("retry-after", "a header tollgate writes on 429 and 503"),
            // Issue 46's attacker: names `check` took whose meaning the id overwrote.
            (
                "x-frame-options",
                "a header HTTP or browsers give a meaning",
            ),
            (
                "www-authenticate",
                "a header HTTP or browsers give a meaning",
            ),
            ("access-control-allow-origin", "a CORS header"),
            ("if-none-match", "a conditional request header"),
            ("range", "a header HTTP or browsers give a meaning"),
            ("baggage", "a trace context header"),
            ("x-b3-traceid", "a trace context header"),
            ("x-amzn-trace-id", "a trace context header"),
            ("grpc-timeout", "gRPC's own metadata"),
            ("x-forwarded-user", "a forwarding claim backends believe"),
            ("x-remote-user", "an identity header"),
        ] {
            assert_eq!(
                problems(name),
                [format!(
                    "server.request_id_header: `{name}` already means something to HTTP or to forwarding ({why}): pick a header of its own, like \"x-request-id\""
                )],
                "{name}"
            );
        }
    }

    #[test]
    fn a_name_this_config_reads_is_refused_in_any_spelling() {
        for (name, what) in [
            ("x-api-key", "the [account] header"),
            ("X_API_KEY", "the [account] header"),
            ("x-tenant", "a key part of policy `p` (header:x-tenant)"),
            ("x-cost", "the cost_header of policy `p`"),
            ("x-call-cost", "the response_cost_header of policy `p`"),
            ("x-plan", "the header policy `p`'s tiers are chosen by"),
        ] {
            let shown = name.to_ascii_lowercase();
            assert_eq!(
                problems(name),
                [format!(
                    "server.request_id_header: `{shown}` already means something to this config ({what}): the id would replace the client's value on the way to the upstream; pick a header of its own, like \"x-request-id\""
                )],
                "{name}"
            );
        }
    }

    #[test]
    fn a_header_of_its_own_passes() {
        for name in [
            "x-request-id",
            "x-trace-id",
            "x-correlation-id",
            "request-id",
        ] {
            assert_eq!(problems(name), Vec::<String>::new(), "{name}");
        }
    }
}
