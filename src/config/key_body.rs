//! `[[routes]] max_key_body_bytes` and `on_large_key_body`: how much of a request body the
//! proxy reads for the route's `form:NAME` and `json:POINTER` key parts
//! (`proxy/key_body/`), and what a larger body means.

use serde::Deserialize;

use super::validate::Validator;

/// The default read: a login form or a JSON credential is far smaller.
pub const DEFAULT_MAX_KEY_BODY_BYTES: u64 = 64 << 10;
/// The most a route may buffer per request for its keys.
const MOST: u64 = 16 << 20;

/// `on_large_key_body`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnLargeKeyBody {
    /// 413: a body too large to key is refused (the default: no budget is skipped).
    #[default]
    Reject,
    /// The body's parts count as missing (the policy's `on_missing_key` decides), and the
    /// body is forwarded whole.
    Missing,
}

/// How a route whose policies key on its body reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyBodyRules {
    /// Bytes read before the limit step; a body that ends within them is parsed.
    pub max_bytes: u64,
    pub on_large: OnLargeKeyBody,
}

impl Validator {
    /// The rules of route `at`, `None` when no policy of it reads the body.
    pub(super) fn key_body(
        &mut self,
        at: &dyn Fn(&str) -> String,
        reads_body: bool,
        max_bytes: Option<u64>,
        on_large: OnLargeKeyBody,
    ) -> Option<KeyBodyRules> {
        let max_bytes = max_bytes.unwrap_or(DEFAULT_MAX_KEY_BODY_BYTES);
        if !(1..=MOST).contains(&max_bytes) {
            self.fail(
                &at("max_key_body_bytes"),
                format!("{max_bytes} is not in 1..={MOST} (16 MiB): the body is held in memory while the limit step reads it"),
            );
            return None;
        }
        reads_body.then_some(KeyBodyRules {
            max_bytes,
            on_large,
        })
    }
}
