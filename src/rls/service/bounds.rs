//! A call's shape before anything is matched: what envoyproxy/ratelimit refuses (an empty
//! domain, no descriptors, a descriptor with no entries: `INVALID_ARGUMENT`) and what is
//! past `[rls]`'s bounds (`RESOURCE_EXHAUSTED` for counts, `INVALID_ARGUMENT` for a
//! length), each naming the bound. Never a panic, never an allocation the bounds did not
//! allow (the server's decoding limit comes from the same bounds).

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::Status;

use crate::rls::Bounds;

/// `Ok` when `req` may be answered.
pub(super) fn check(req: &RateLimitRequest, bounds: &Bounds) -> Result<(), Status> {
    if req.domain.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    let long = |what: &str, len: usize| {
        Status::invalid_argument(format!(
            "{what} is {len} bytes, more than [rls] max_value_bytes ({})",
            bounds.max_value_bytes
        ))
    };
    if req.domain.len() > bounds.max_value_bytes {
        return Err(long("the domain", req.domain.len()));
    }
    if req.descriptors.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    if req.descriptors.len() > bounds.max_descriptors {
        return Err(Status::resource_exhausted(format!(
            "{} descriptors, more than [rls] max_descriptors ({})",
            req.descriptors.len(),
            bounds.max_descriptors
        )));
    }
    for (i, d) in req.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return Err(Status::invalid_argument(format!(
                "descriptors[{i}]: a descriptor must have at least one entry"
            )));
        }
        if d.entries.len() > bounds.max_entries {
            return Err(Status::resource_exhausted(format!(
                "descriptors[{i}]: {} entries, more than [rls] max_entries ({})",
                d.entries.len(),
                bounds.max_entries
            )));
        }
        for (j, e) in d.entries.iter().enumerate() {
            if e.key.len() > bounds.max_value_bytes {
                return Err(long(
                    &format!("descriptors[{i}].entries[{j}].key"),
                    e.key.len(),
                ));
            }
            if e.value.len() > bounds.max_value_bytes {
                return Err(long(
                    &format!("descriptors[{i}].entries[{j}].value"),
                    e.value.len(),
                ));
            }
        }
        if d.is_negative_hits {
            return Err(Status::invalid_argument(format!(
                "descriptors[{i}]: is_negative_hits (giving hits back) is not supported"
            )));
        }
    }
    Ok(())
}
