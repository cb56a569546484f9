//! Protected header names, read as a CGI-style backend reads them. WSGI, Rack and PHP turn
//! `X-Forwarded-Host`, `X_Forwarded_Host` and `x-forwarded_host` into the one
//! `HTTP_X_FORWARDED_HOST`, so a protected name is protected in every spelling that folds to
//! it: [`spells`] is that one rule, and [`Protected`] applies it, in one pass over a
//! request's names, to every protected name — identity headers, forwarding claims and method
//! overrides — deciding which of them this peer may send upstream.

use http::header::{self, HeaderMap, HeaderName};

use crate::config::{Config, KeyPart};
use smallvec::SmallVec;

// The lists and the rule live in `config/header_names.rs`, where `check` reads them too
// (a `request_id_header` must be none of them).
pub use crate::config::header_names::{CLAIMS, OVERRIDES, OWN_CLAIMS, spells};

/// Whether `name` is a method override, in any spelling.
pub fn is_method_override(name: &str) -> bool {
    OVERRIDES.iter().any(|o| spells(name, o))
}

/// What a protected name is, which says who may send it upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Read by tollgate (`Host`, `Content-Length`, the account, a key part): its own
    /// spelling is forwarded; a twin is a value the limit never saw, dropped from everyone.
    Identity,
    /// An [`OWN_CLAIMS`] or [`CLAIMS`] name, or an identity header that is also a claim: its
    /// own spelling only from trusted proxies, a twin from no one (a trusted proxy writes the
    /// dashed name; one that overwrites it but passes a client's `X_Forwarded_Host` on
    /// would otherwise hand the backend a second, forged value).
    Claim,
    /// A method override: no spelling from anyone.
    Override,
}

impl Kind {
    /// One name protected twice (a key part that is also a claim) is held to both rules.
    fn merge(self, other: Kind) -> Kind {
        match (self, other) {
            (Kind::Override, _) | (_, Kind::Override) => Kind::Override,
            (a, b) if a == b => a,
            _ => Kind::Claim,
        }
    }

    /// Whether a header of this kind is removed: `exact` when spelled as protected,
    /// `trusted` when the peer is a trusted proxy.
    fn dropped(self, exact: bool, trusted: bool) -> bool {
        match self {
            Kind::Identity => !exact,
            Kind::Claim => !(exact && trusted),
            Kind::Override => true,
        }
    }
}

/// Every protected name of one gateway, bucketed by length: a request's name is compared
/// only with the few protected names exactly as long as it (most names meet none), not
/// with all thirty-odd of them, on a path every request takes.
#[derive(Debug)]
pub struct Protected {
    /// `by_len[n]`: the protected names `n` bytes long (lower case), with their kinds.
    by_len: Vec<Vec<(Box<str>, Kind)>>,
}

impl Protected {
    /// The protected names of a gateway whose identity headers are `identity` (what it
    /// reads: `Host`, `Content-Length`, the account header, key parts' headers).
    pub fn new(identity: &[HeaderName]) -> Self {
        let named = |names: &'static [&'static str], kind| names.iter().map(move |n| (*n, kind));
        let all = (identity.iter().map(|n| (n.as_str(), Kind::Identity)))
            .chain(named(&OWN_CLAIMS, Kind::Claim))
            .chain(named(&CLAIMS, Kind::Claim))
            .chain(named(&OVERRIDES, Kind::Override));
        let mut by_len: Vec<Vec<(Box<str>, Kind)>> = Vec::new();
        for (name, kind) in all {
            let name = name.to_ascii_lowercase();
            if by_len.len() <= name.len() {
                by_len.resize_with(name.len() + 1, Vec::new);
            }
            let bucket = &mut by_len[name.len()];
            match bucket.iter_mut().find(|(n, _)| **n == *name) {
                Some((_, k)) => *k = k.merge(kind),
                None => bucket.push((name.into(), kind)),
            }
        }
        Protected { by_len }
    }

    /// What `name` (lower case) is protected as, and whether it is one protected name's own
    /// spelling (a `x-tenant` key part beside a `x_tenant` one keeps both), if it is any.
    fn lookup(&self, name: &str) -> Option<(Kind, bool)> {
        let mut found: Option<(Kind, bool)> = None;
        for (protected, kind) in self.by_len.get(name.len())? {
            if spells(name, protected) {
                let exact = name == &**protected;
                found = Some(found.map_or((*kind, exact), |(k, e)| (k.merge(*kind), e || exact)));
            }
        }
        found
    }

    /// Remove from `headers` every protected name this peer (`trusted`: a trusted proxy) may
    /// not send upstream, in any spelling. One pass over the names, then a removal only for
    /// those found, and no allocation for the usual request that has none (blind `remove`s
    /// of ten claims cost ~3 000 instructions a request, hashing each name).
    pub fn strip(&self, headers: &mut HeaderMap, trusted: bool) {
        let mut doomed: SmallVec<[HeaderName; 2]> = SmallVec::new();
        for k in headers.keys() {
            let Some((kind, exact)) = self.lookup(k.as_str()) else {
                continue;
            };
            if kind.dropped(exact, trusted) {
                doomed.push(k.clone());
            }
        }
        for name in doomed {
            headers.remove(name);
        }
    }
}

/// Headers that carry identity (who the client is, which account, what the gateway keyed
/// on, how long the body is): a client naming one in `Connection` must not make the gateway
/// drop it, or the upstream would see a different request than the one limited.
pub fn of_config(config: &Config, traced: bool) -> Vec<HeaderName> {
    let mut names = vec![
        header::HOST,
        header::FORWARDED,
        header::CONTENT_LENGTH,
        HeaderName::from_static("x-forwarded-for"),
        HeaderName::from_static("x-forwarded-proto"),
        HeaderName::from_static("x-real-ip"),
    ];
    names.push(config.server.request_id_header.clone());
    if traced {
        // The context this gateway wrote for its upstream span (`trace.rs`).
        names.push(HeaderName::from_static("traceparent"));
        names.push(HeaderName::from_static("tracestate"));
    }
    names.extend(config.account.as_ref().map(|a| a.header.clone()));
    for policy in &config.policies {
        for part in &policy.key {
            let name = match part {
                KeyPart::Header(name) => name.clone(),
                KeyPart::Cookie(_) => header::COOKIE,
                _ => continue,
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    /// `Protected` of a gateway keyed on `x-api-key` (and what every gateway reads).
    fn protected() -> Protected {
        Protected::new(&[
            header::HOST,
            header::CONTENT_LENGTH,
            HeaderName::from_static("x-api-key"),
        ])
    }

    /// The names left of `names` (each sent once) after `strip` from a `trusted` peer or not.
    fn left(p: &Protected, names: &[&str], trusted: bool) -> Vec<String> {
        let mut h = HeaderMap::new();
        for n in names {
            h.insert(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                "v".parse().unwrap(),
            );
        }
        p.strip(&mut h, trusted);
        let mut kept: Vec<String> = h.keys().map(|k| k.to_string()).collect();
        kept.sort();
        kept
    }

    /// `name`'s spellings as CGI reads them alike: all dashes, all underscores, and mixes.
    fn spellings(name: &str) -> Vec<String> {
        let mut out = vec![name.to_owned(), name.replace('-', "_")];
        for (i, _) in name.match_indices('-') {
            let mut mixed = name.to_owned().into_bytes();
            mixed[i] = b'_';
            out.push(String::from_utf8(mixed).unwrap());
            out.push(name.replace('-', "_")[..=i].to_owned() + &name[i + 1..]);
        }
        out.dedup();
        out
    }

    #[test]
    fn the_rule_folds_underscores_and_case() {
        assert!(spells("x_forwarded_host", "x-forwarded-host"));
        assert!(spells("x-forwarded_host", "x-forwarded-host"));
        assert!(spells("X_Forwarded-Host", "x-forwarded-host"));
        assert!(spells("x-tenant", "x_tenant"));
        assert!(!spells("x-forwarded-hosts", "x-forwarded-host"));
        assert!(!spells("x.forwarded.host", "x-forwarded-host"));
        assert!(!spells("xxforwarded-host", "x-forwarded-host"));
    }

    #[test]
    fn every_spelling_of_a_claim_is_dropped_from_untrusted_and_twins_from_trusted() {
        let p = protected();
        for claim in CLAIMS {
            for name in spellings(claim) {
                assert_eq!(left(&p, &[&name, "x-keep"], false), ["x-keep"], "{name}");
                let mut want = vec!["x-keep".to_string()];
                if name == claim {
                    want.insert(0, name.clone());
                    want.sort();
                }
                assert_eq!(left(&p, &[&name, "x-keep"], true), want, "{name}");
            }
        }
    }

    #[test]
    fn own_claims_keep_only_their_own_spelling_and_only_from_trusted() {
        let p = protected();
        for claim in OWN_CLAIMS {
            for name in spellings(claim) {
                assert_eq!(left(&p, &[&name], false), Vec::<String>::new(), "{name}");
                let want = if name == claim {
                    vec![name.clone()]
                } else {
                    vec![]
                };
                assert_eq!(left(&p, &[&name], true), want, "{name}");
            }
        }
    }

    #[test]
    fn method_overrides_are_dropped_from_everyone() {
        let p = protected();
        for o in OVERRIDES {
            for name in spellings(o) {
                assert!(is_method_override(&name), "{name}");
                for trusted in [false, true] {
                    assert_eq!(left(&p, &[&name, "host"], trusted), ["host"], "{name}");
                }
            }
        }
        assert!(!is_method_override("x-http-method-overrides"));
    }

    #[test]
    fn identity_twins_are_dropped_and_the_identity_kept() {
        let p = protected();
        for trusted in [false, true] {
            let sent = [
                "x-api-key",
                "x_api_key",
                "x-api_key",
                "content_length",
                "x_other",
            ];
            let want = ["x-api-key", "x_other"];
            assert_eq!(left(&p, &sent, trusted), want);
        }
        // A key part spelled with `_` protects its dashed twin's reading, and both spellings
        // named in the config keep their own.
        let p = Protected::new(&[HeaderName::from_static("x_tenant")]);
        assert_eq!(left(&p, &["x-tenant", "x_tenant"], false), ["x_tenant"]);
        let both = [
            HeaderName::from_static("x_t"),
            HeaderName::from_static("x-t"),
        ];
        let p = Protected::new(&both);
        assert_eq!(left(&p, &["x-t", "x_t"], false), ["x-t", "x_t"]);
    }

    #[test]
    fn an_identity_that_is_also_a_claim_is_held_to_both() {
        let p = Protected::new(&[HeaderName::from_static("x-forwarded-host")]);
        assert_eq!(left(&p, &["x-forwarded-host"], false), Vec::<String>::new());
        assert_eq!(left(&p, &["x-forwarded-host"], true), ["x-forwarded-host"]);
        assert_eq!(left(&p, &["x_forwarded_host"], true), Vec::<String>::new());
    }
}
