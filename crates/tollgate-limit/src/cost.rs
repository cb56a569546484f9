//! Step 1, for priced policies: what this request spends — its policy's fixed `cost`, the
//! value a trusted header in front states (`cost_header`, an auth layer that knows the
//! call's price), or its body's bytes (`cost = "request_bytes"`).

use http::{HeaderMap, header};

use super::policy::PolicyRuntime;

/// What one request spends on one policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Price {
    /// Cells spent at the check.
    pub cost: u32,
    /// No request of the policy could cost less: a denial of this one says nothing a
    /// cheaper one could pass, so the deny cache may remember it.
    pub cheapest: bool,
    /// `request_bytes` with a streamed body (no `Content-Length`): admitted at 1, and the
    /// bytes it has sent are debited when the response head arrives.
    pub streamed: bool,
}

/// The price of this request on `policy`. A `cost_header` value that is not a whole number
/// from 1 to `max_cost`, or is stated twice, is the client's error (400): taking a default
/// instead would let it choose its price; so is a `Content-Length` stated twice.
pub(super) fn request_cost(policy: &PolicyRuntime, headers: &HeaderMap) -> Result<Price, String> {
    let fixed = policy.cost.get();
    let spend = &policy.spec.spend;
    if spend.request_bytes {
        return body_bytes(headers);
    }
    let Some((name, max)) = &spend.cost_header else {
        return Ok(price(fixed, true));
    };
    let bad = || format!("the `{name}` header must be one whole number from 1 to {max}");
    let Some(v) = single(headers, name).map_err(|()| bad())? else {
        return Ok(price(fixed, fixed == 1));
    };
    let cost = v
        .parse()
        .ok()
        .filter(|c| (1..=max.get()).contains(c))
        .ok_or_else(bad)?;
    Ok(price(cost, cost == 1))
}

fn price(cost: u32, cheapest: bool) -> Price {
    Price {
        cost,
        cheapest,
        streamed: false,
    }
}

/// `request_bytes`: the declared length (at least 1: a bodiless request still asks, so a
/// key in debt denies it; beyond `u32::MAX` no state could ever pay it), or 1 for now and
/// the streamed bytes at the head.
fn body_bytes(headers: &HeaderMap) -> Result<Price, String> {
    let bad = || "the `content-length` header must be stated once".to_string();
    match single(headers, &header::CONTENT_LENGTH).map_err(|()| bad())? {
        Some(n) => {
            let n: u64 = n.parse().map_err(|_| bad())?;
            Ok(price(u32::try_from(n.max(1)).unwrap_or(u32::MAX), false))
        }
        // Chunked on HTTP/1, any body on HTTP/2 without the header, or no body at all
        // (then nothing more is sent, and nothing more is debited).
        None => Ok(Price {
            cost: 1,
            cheapest: false,
            streamed: true,
        }),
    }
}

/// The one value of header `name`, trimmed; `Err` when it is stated twice or is not text.
fn single<'h>(headers: &'h HeaderMap, name: &http::HeaderName) -> Result<Option<&'h str>, ()> {
    let mut all = headers.get_all(name).into_iter();
    let Some(v) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(());
    }
    v.to_str().map(|s| Some(s.trim())).map_err(drop)
}
