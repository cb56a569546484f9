//! What the limit step hands back to the request path (the all-or-nothing spending rule is
//! `ask::keeps`).

use std::num::NonZeroU64;
use std::sync::Arc;

use super::algorithm::QuotaInfo;
use super::clock::Nanos;
use super::counted::Counted;
use super::keys::MissingKey;
use super::permit::Permits;

/// What one enforcing policy says about a request, for the response headers.
#[derive(Debug, Clone)]
pub struct PolicyReport {
    /// Policy name: the header item's name.
    pub name: Arc<str>,
    /// The client's quota (with headroom): `q` and `w`.
    pub quota: QuotaInfo,
    /// `r`: requests it would admit right now.
    pub remaining: u64,
    /// Nanoseconds until full again.
    pub reset_after: Nanos,
    /// `t` for allowed requests: nanoseconds until `remaining` grows by one (0 when full).
    pub next_after: Nanos,
    /// Set when this policy denied: nanoseconds until this request would be admitted.
    pub retry_after: Option<Nanos>,
    /// `pk`: the partition the quota is counted in, for account-keyed policies (the
    /// account's keyed hash, 16 bytes: a client holding several API keys can tell their
    /// quotas apart; the raw account never appears).
    pub partition: Option<[u8; 16]>,
}

/// The limit step's answer for one request: what the request path does ([`Answer`], one
/// variant per outcome) and what the access log is told ([`Decision`]: which policy and key
/// decided, and the outcome, which is the answer's: [`Answer::outcome`]).
#[derive(Debug, Default)]
pub struct Admission {
    /// What the access log says the limit step decided.
    pub decision: Decision,
    /// What the request path does with the request.
    pub answer: Answer,
}

impl Admission {
    /// The one way an admission is made: the access log's outcome is read off the answer,
    /// so the two cannot disagree.
    pub(crate) fn new(answer: Answer, mut decision: Decision) -> Self {
        decision.outcome = answer.outcome();
        Admission { decision, answer }
    }

    /// Refused before any policy was asked (401, 400): no policy's key is part of it.
    pub(crate) fn refused(answer: Answer) -> Self {
        Admission::new(answer, Decision::default())
    }

    /// Admitted: forwarded (after its delay). For callers that only count admissions; the
    /// request path `match`es [`Answer`] so that every outcome is answered.
    pub fn admitted(&self) -> bool {
        matches!(self.answer, Answer::Admit(_))
    }

    /// A shadow `on_missing_key = "deny"` policy would have refused the request: it decides
    /// unless a policy denied or would have already (a shadow denial outranks an admission,
    /// as in `check/report.rs`). It has no key: the deciding key so far joins `others`, so
    /// `tollgate replay` still keys that policy as logged.
    pub(crate) fn would_refuse(&mut self, policy: Option<Arc<str>>) {
        let Some(policy) = policy else { return };
        match &mut self.answer {
            Answer::Admit(admitted) if admitted.how != Admit::ShadowDeny => {
                admitted.how = Admit::ShadowDeny;
            }
            _ => return,
        }
        let mut others = std::mem::take(&mut self.decision.others);
        if let Some(key) = self.decision.key.take() {
            others.insert(0, key);
        }
        self.decision = Decision {
            policy: Some(policy),
            others,
            outcome: self.answer.outcome(),
            ..Decision::default()
        };
    }
}

/// One outcome of the limit step, with what answering it needs. An enum, not flags: the
/// request path answers it with one `match`, so an outcome added here cannot go unanswered.
#[derive(Debug)]
pub enum Answer {
    /// Forward the request (also: no policy applied, or every one exempts the client).
    Admit(Admitted),
    /// An enforcing policy denied: answer 429, do not forward. The wait is each denying
    /// policy's `retry_after` in the report (the 429's `Retry-After` is their longest).
    Deny {
        /// Enforcing policies that applied, in the route's order.
        report: Vec<PolicyReport>,
    },
    /// The store could not decide and the route fails closed: answer 503.
    Unavailable {
        /// The 503's `Retry-After`.
        retry_after: Nanos,
        /// The policies the store could not decide.
        policies: Vec<Arc<str>>,
    },
    /// The route requires an account and the request has none (or a token that does not
    /// verify): answer 401, nothing asked.
    Unauthenticated,
    /// A key part the route needs is stated ambiguously (an account header on two lines,
    /// or as a comma list), or a price wrongly: answer 400 with this reason; no policy was
    /// asked.
    Ambiguous(String),
    /// An enforcing `on_missing_key = "deny"` policy's key part is missing, and it is the
    /// account or a token's claim: the request is unauthenticated, answer 401 with this
    /// reason; no policy was asked.
    MissingCredential(MissingKey),
    /// An enforcing `on_missing_key = "deny"` policy's key part is missing (any other
    /// part): answer 400 with this reason; no policy was asked.
    MissingKey(MissingKey),
}

impl Answer {
    /// The access log's name for this answer. No wildcard arm: a new answer does not
    /// compile until the log can name it.
    pub fn outcome(&self) -> Outcome {
        match self {
            Answer::Admit(admitted) => match admitted.how {
                Admit::Allow => Outcome::Allow,
                Admit::Delay => Outcome::Delay,
                Admit::ShadowDeny => Outcome::ShadowDeny,
                Admit::Exempt => Outcome::Exempt,
            },
            Answer::Deny { .. } => Outcome::Deny,
            Answer::Unavailable { .. } => Outcome::Unavailable,
            Answer::Unauthenticated | Answer::MissingCredential(_) => Outcome::Unauthenticated,
            Answer::Ambiguous(_) => Outcome::Ambiguous,
            Answer::MissingKey(_) => Outcome::MissingKey,
        }
    }
}

impl Default for Answer {
    /// Admitted by no policy: nothing to report, hold or settle.
    fn default() -> Self {
        Answer::Admit(Admitted::default())
    }
}

/// What an admitted request carries to the forwarder and through its response.
#[derive(Debug, Default)]
pub struct Admitted {
    /// Enforcing policies that applied, in the route's order: the RateLimit headers.
    pub report: Vec<PolicyReport>,
    /// Leaky bucket: hold the request this long before forwarding. Never zero (nothing to
    /// hold), which keeps the `Option` in the eight bytes of the number: an admission is
    /// returned by value on every request (`Checked::Now`).
    pub delay: Option<NonZeroU64>,
    /// Concurrency cells to give back when the response ends.
    pub permits: Permits,
    /// `count` policies' spends, settled by the response head's status.
    pub counted: Counted,
    /// How it was admitted, for the access log ([`Answer::outcome`]).
    pub how: Admit,
}

/// How a request was admitted, as the access log tells it apart. Not `delay`: a shadow
/// leaky bucket's wait is logged as a delay though nothing waits.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// No policy denied or delayed (also: no policy applied).
    #[default]
    Allow,
    /// A leaky bucket asked for a wait.
    Delay,
    /// A shadow policy would have denied it.
    ShadowDeny,
    /// Every policy that would apply exempts this client.
    Exempt,
}

/// The limit step's decision as the access log tells it: which outcome, by which policy,
/// for which key. One per request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The answer's outcome ([`Answer::outcome`]), set once, by [`Admission::new`].
    pub(crate) outcome: Outcome,
    /// The deciding policy: the first enforcing policy that denied, else the first that
    /// would have denied in shadow, else the one that delayed longest, else the first that
    /// applied (`None` when none applied).
    pub policy: Option<Arc<str>>,
    /// Where that policy decides (`local`, `central`, `lease`, …: as `GET /routes` names it).
    pub site: Option<&'static str>,
    /// Its key as the limiter keyed it (accounts and other values as keyed hashes, IPv6 as
    /// its network): never a raw secret.
    pub key: Option<String>,
    /// When denied: nanoseconds until the request would be admitted.
    pub retry_after: Option<Nanos>,
    /// The keys of the other policies that decided, in the route's order: with `key`,
    /// what `tollgate replay` keys a logged request by (`RequestFacts::given`).
    pub others: Vec<String>,
}

impl Decision {
    /// The outcome, as the access log's `decision` names it.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }
}

/// The outcomes of the limit step, as the access log's `decision` names them: read off an
/// [`Answer`] ([`Answer::outcome`]), never decided on their own.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted (also: no policy applied).
    #[default]
    Allow,
    Deny,
    /// Admitted, but a shadow policy would have denied it.
    ShadowDeny,
    /// Admitted after a leaky bucket's wait.
    Delay,
    /// Every policy that would apply exempts this client.
    Exempt,
    /// The store could not decide and the route fails closed (503).
    Unavailable,
    /// 401: no account, or a token that does not verify, or a missing account or claim.
    Unauthenticated,
    /// 400: a key part stated ambiguously.
    Ambiguous,
    /// 400: a key part an `on_missing_key = "deny"` policy needs is missing (a missing
    /// account or claim is `Unauthenticated`).
    MissingKey,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::ShadowDeny => "shadow_deny",
            Outcome::Delay => "delay",
            Outcome::Exempt => "exempt",
            Outcome::Unavailable => "unavailable",
            Outcome::Unauthenticated => "unauthenticated",
            Outcome::Ambiguous => "ambiguous",
            Outcome::MissingKey => "missing_key",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(how: Admit) -> Answer {
        Answer::Admit(Admitted {
            how,
            ..Admitted::default()
        })
    }

    /// A shadow `deny` policy's would-be refusal outranks an admission (the admitting
    /// policy's key stays in `others`, for replay) and never an enforcing or shadow denial.
    #[test]
    fn a_would_be_refusal_decides_unless_a_policy_denied() {
        let allowed = Decision {
            policy: Some("per_ip".into()),
            site: Some("local"),
            key: Some("per_ip:ip:192.0.2.7".into()),
            others: vec!["global:api".into()],
            ..Decision::default()
        };
        let mut a = Admission::new(admitted(Admit::Allow), allowed.clone());
        a.would_refuse(Some("login_per_account".into()));
        assert_eq!(
            a.decision,
            Decision {
                policy: Some("login_per_account".into()),
                others: vec!["per_ip:ip:192.0.2.7".into(), "global:api".into()],
                outcome: Outcome::ShadowDeny,
                ..Decision::default()
            }
        );
        assert_eq!(a.answer.outcome(), Outcome::ShadowDeny);
        let mut a = Admission::new(admitted(Admit::Allow), allowed.clone());
        a.would_refuse(None);
        assert_eq!(
            a.decision,
            Admission::new(admitted(Admit::Allow), allowed.clone()).decision
        );
        let deny = || Answer::Deny { report: Vec::new() };
        for (answer, outcome) in [
            (deny(), Outcome::Deny),
            (admitted(Admit::ShadowDeny), Outcome::ShadowDeny),
        ] {
            let mut a = Admission::new(answer, allowed.clone());
            let denied = a.decision.clone();
            assert_eq!(denied.outcome(), outcome);
            a.would_refuse(Some("login_per_account".into()));
            assert_eq!(a.decision, denied);
        }
    }
}
