//! What a request spends beyond the policy's fixed `cost`: `cost_header` (a cost an auth
//! layer in front states per request, bounded by `max_cost`) and `count` (only responses
//! with some statuses keep what their request spent: failed logins throttle, good ones
//! don't). Validated here; the limit step reads the cost, the proxy the status.

use std::num::NonZeroU32;

use http::HeaderName;
use serde::Deserialize;

use super::raw::{RawCost, RawPolicy};
use super::validate::Validator;
use super::{AlgorithmName, Site, Spend};

/// `count = { statuses = [...] }` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCount {
    pub statuses: Vec<u16>,
}

impl Validator {
    /// `cost_header`, `max_cost` and `count` of the policy at `at` (whose full state holds
    /// `capacity` cells: its burst, or its limit).
    pub(super) fn spend(
        &mut self,
        at: &dyn Fn(&str) -> String,
        p: &RawPolicy,
        capacity: Option<NonZeroU32>,
    ) -> Option<Spend> {
        let before = self.problem_count();
        let cost_header = match (&p.cost_header, p.max_cost) {
            (None, None) => None,
            (Some(_), None) => {
                self.fail(
                    &at("max_cost"),
                    "required with cost_header: a header must not set any cost",
                );
                None
            }
            (None, Some(_)) => {
                self.fail(&at("max_cost"), "bounds cost_header, which is not set");
                None
            }
            (Some(h), Some(max)) => {
                let name = HeaderName::from_bytes(h.as_bytes())
                    .map_err(|_| {
                        self.fail(
                            &at("cost_header"),
                            format!("`{h}` is not a valid header name"),
                        )
                    })
                    .ok();
                let max = self.nonzero_u32(&at("max_cost"), max);
                if let (Some(m), Some(cap)) = (max, capacity)
                    && m > cap
                {
                    self.fail(
                        &at("max_cost"),
                        format!("{m} is more than the policy holds ({cap}): such a request could never pass"),
                    );
                }
                name.zip(max)
            }
        };
        if p.cost_header.is_some() && p.algorithm == AlgorithmName::Concurrency {
            self.fail(
                &at("cost_header"),
                "concurrency counts requests in flight, one each",
            );
        }
        let count_statuses = p.count.as_ref().map(|c| {
            if c.statuses.is_empty() {
                self.fail(
                    &at("count.statuses"),
                    "is empty: no response would ever spend",
                );
            }
            for s in &c.statuses {
                if !(100..=599).contains(s) {
                    self.fail(
                        &at("count.statuses"),
                        format!("{s} is not an HTTP status (100 to 599)"),
                    );
                }
            }
            let mut statuses = c.statuses.clone();
            statuses.sort_unstable();
            statuses.dedup();
            statuses
        });
        if count_statuses.is_some() {
            self.resizable(&at("count"), p);
        }
        let response_cost = self.response_cost(at, p);
        let request_bytes = p.cost == RawCost::Named("request_bytes".into());
        if request_bytes {
            self.request_bytes(at, p);
        }
        (self.problem_count() == before).then_some(Spend {
            cost_header,
            count_statuses,
            response_cost,
            request_bytes,
        })
    }

    /// A spend resized when the head arrives (given back, or debited past what conforms):
    /// only gcra and token_bucket can, whose cells are alike whenever they were spent — a
    /// sliding window would give back from the current window a cell spent in the previous
    /// one, where it counts for less, and so erase newer spends — and not behind a
    /// node-local `local_first` state.
    fn resizable(&mut self, key: &str, p: &RawPolicy) {
        if !matches!(
            p.algorithm,
            AlgorithmName::Gcra | AlgorithmName::TokenBucket
        ) {
            self.fail(
                key,
                "only gcra and token_bucket can resize a spend after the response",
            );
        }
        if p.local_first {
            self.fail(
                key,
                "a local_first state in front cannot be resized after the response: drop local_first",
            );
        }
    }

    /// `cost = "request_bytes"`: a streamed body's bytes are debited when the response head
    /// arrives, so the sites must take debits; its price is its own, so no other pricing.
    fn request_bytes(&mut self, at: &dyn Fn(&str) -> String, p: &RawPolicy) {
        let key = at("cost");
        self.resizable(&key, p);
        if p.site == Site::Lease {
            self.fail(
                &key,
                "request_bytes cannot be leased: one body's bytes may exceed any batch",
            );
        }
        if p.cost_header.is_some() || p.response_cost_header.is_some() || p.count.is_some() {
            self.fail(
                &key,
                "request_bytes is the request's whole price: no cost_header, response_cost_header or count with it",
            );
        }
    }

    /// `response_cost_header`: the sites and algorithms that can take cells back and debit
    /// cells spent elsewhere.
    fn response_cost(&mut self, at: &dyn Fn(&str) -> String, p: &RawPolicy) -> Option<HeaderName> {
        let h = p.response_cost_header.as_ref()?;
        let key = at("response_cost_header");
        self.resizable(&key, p);
        HeaderName::from_bytes(h.as_bytes())
            .map_err(|_| self.fail(&key, format!("`{h}` is not a valid header name")))
            .ok()
    }
}
