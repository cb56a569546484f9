//! The limiter's entry points on the request path (and replay's): the facts of one request,
//! then its asks (`asks.rs`) and the walk through the sites (`check/`), or why it is
//! answered before any policy is asked (401, 400, no policy applies).

use std::future::Future;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;

use http::{HeaderMap, Method};

use super::Limiter;
use super::asks::Refusal;
use crate::admission::{Admission, Admit, Admitted, Answer, Decision};
use crate::check::{Check, Stop};
use crate::keys::Target;

impl Limiter {
    /// Decide a request of route `route` whose target is not known: policies keyed on
    /// `path` or `query:NAME` do not apply. See [`Limiter::check_request`].
    pub async fn check(
        &self,
        route: usize,
        route_name: &Arc<str>,
        client: IpAddr,
        method: &Method,
        headers: &HeaderMap,
    ) -> Admission {
        self.check_request(route, route_name, client, method, None, headers)
            .await
    }

    /// [`Limiter::check`] of a logged request: policies whose key the live gateway logged
    /// (`given`) are keyed so (`RequestFacts::given`), for `tollgate replay`.
    pub async fn check_given(
        &self,
        route: usize,
        route_name: &Arc<str>,
        client: IpAddr,
        method: &Method,
        headers: &HeaderMap,
        given: &[&str],
    ) -> Admission {
        let at = At {
            route,
            route_name,
            client,
            method,
        };
        self.decide(at, Target::default(), headers, given).await
    }

    /// Decide a request of route `route` (its index in the config) to `uri` (canonical).
    pub async fn check_request(
        &self,
        route: usize,
        route_name: &Arc<str>,
        client: IpAddr,
        method: &Method,
        uri: Option<&http::Uri>,
        headers: &HeaderMap,
    ) -> Admission {
        let at = At {
            route,
            route_name,
            client,
            method,
        };
        self.decide(at, uri.map(Target::of).unwrap_or_default(), headers, &[])
            .await
    }

    /// [`Limiter::check_request`] with the request's target and, for `form:` and `json:`
    /// parts, the body the proxy read for them; without a future when none is needed: most
    /// routes' policies are decided in this process (local and split sites, or no policy at all), and their
    /// admission is returned as it is. A request with a key at a site that waits on an
    /// answer (the store, a lease coordinator, an owner, gossip peers) gets that walk
    /// boxed, so a caller's own future never carries the walk's state (some 4 KiB, which a
    /// future nesting it would copy on every move whether or not it ever waits).
    pub fn check_now<'a>(
        &'a self,
        at: At<'a>,
        target: Target<'_>,
        headers: &HeaderMap,
    ) -> Checked<'a> {
        let (mut check, would_refuse) = match self.prepare(at, target, headers, &[]) {
            Prepared::Walk(check, would_refuse) => (check, would_refuse),
            Prepared::Answered(admission) => return Checked::Now(admission),
        };
        if check.waits() {
            return Checked::Later(Box::pin(async move {
                let walked = check.walk().await;
                finish(check, walked, would_refuse)
            }));
        }
        check.local();
        Checked::Now(finish(check, ControlFlow::Continue(()), would_refuse))
    }

    async fn decide(
        &self,
        at: At<'_>,
        target: Target<'_>,
        headers: &HeaderMap,
        given: &[&str],
    ) -> Admission {
        match self.prepare(at, target, headers, given) {
            Prepared::Walk(mut check, would_refuse) => {
                let walked = check.walk().await;
                finish(check, walked, would_refuse)
            }
            Prepared::Answered(admission) => admission,
        }
    }

    /// The request's facts and asks, ready to walk (with the shadow policies that would
    /// refuse it), or its admission when it is answered before any policy is asked.
    fn prepare<'a>(
        &'a self,
        at: At<'a>,
        target: Target<'_>,
        headers: &HeaderMap,
        given: &[&str],
    ) -> Prepared<'a> {
        let At {
            route,
            route_name,
            client,
            method,
        } = at;
        let limits = &self.routes[route];
        if !limits.require_account && limits.entries.is_empty() {
            return Prepared::Answered(Admission::default());
        }
        // Built once: a token is verified once per request, whatever its parts.
        let mut facts = self.keys.facts(client, route_name, method, target, headers);
        facts.give(given);
        // An account stated twice, or a token that does not verify, is none.
        if limits.require_account && !matches!(facts.account, Some(Ok(_))) {
            return refused(Answer::Unauthenticated);
        }
        let (asks, would_refuse) = match self.asks(limits, client, &facts) {
            Ok(a) if !a.asks.is_empty() => (a.asks, a.would_refuse),
            Ok(a) => {
                let (how, policy) = match a.exempted {
                    Some(policy) => (Admit::Exempt, Some(policy)),
                    None => (Admit::Allow, None),
                };
                let admitted = Answer::Admit(Admitted {
                    how,
                    ..Admitted::default()
                });
                let decision = Decision {
                    policy,
                    ..Decision::default()
                };
                let mut admission = Admission::new(admitted, decision);
                admission.would_refuse(a.would_refuse);
                return Prepared::Answered(admission);
            }
            // A key part stated ambiguously (400) or from a token that does not verify
            // (401): nothing asked.
            Err(Refusal::BadRequest(why)) => return refused(Answer::Ambiguous(why)),
            Err(Refusal::Unauthenticated) => return refused(Answer::Unauthenticated),
            // A `deny` policy's key part is missing: the access log names the policy.
            Err(Refusal::MissingCredential(m)) => {
                return missing(m.policy.clone(), Answer::MissingCredential(m));
            }
            Err(Refusal::Missing(m)) => return missing(m.policy.clone(), Answer::MissingKey(m)),
        };
        let check = Check {
            sites: &self.sites,
            route: limits,
            route_name,
            asks,
            held: Vec::new(),
            store_deadline: None,
        };
        Prepared::Walk(check, would_refuse)
    }
}

/// The shadow policy that would have refused a request, as the asks found it.
type WouldRefuse = Option<Arc<str>>;

/// A request before its walk.
enum Prepared<'a> {
    /// Its asks, to walk through their sites, and the shadow policy that would refuse it.
    Walk(Check<'a>, WouldRefuse),
    /// Answered before any policy is asked (no policy applies, 401, 400).
    Answered(Admission),
}

/// The admission of a walked check.
fn finish(mut check: Check<'_>, walked: ControlFlow<Stop>, would_refuse: WouldRefuse) -> Admission {
    match walked {
        ControlFlow::Break(Stop::Refused(refused)) => {
            check.give_back_all();
            *refused
        }
        _ => {
            let mut admission = check.end();
            admission.would_refuse(would_refuse);
            admission
        }
    }
}

fn refused(answer: Answer) -> Prepared<'static> {
    Prepared::Answered(Admission::refused(answer))
}

/// Refused for a key part `policy` needs: the access log names the policy.
fn missing(policy: Arc<str>, answer: Answer) -> Prepared<'static> {
    let decision = Decision {
        policy: Some(policy),
        ..Decision::default()
    };
    Prepared::Answered(Admission::new(answer, decision))
}

/// What [`Limiter::check_now`] found: the admission, or the walk that waits for it.
pub enum Checked<'a> {
    /// Decided without waiting on anything.
    Now(Admission),
    /// A policy's site answers later: await this for the admission.
    Later(Pin<Box<dyn Future<Output = Admission> + Send + 'a>>),
}

/// Which request of which route a check decides.
pub struct At<'a> {
    /// The route's index in the config.
    pub route: usize,
    pub route_name: &'a Arc<str>,
    pub client: IpAddr,
    pub method: &'a Method,
}
