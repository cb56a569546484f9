//! Canonical paths: the first thing done to a request, before routing (work in progress).

use std::borrow::Cow;

use crate::config::PathRules;

/// Why a path cannot be made canonical; the request gets 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is not in origin form")]
    NotOrigin,
}

/// The canonical form of `path` (no query), or why it is refused.
pub fn normalize_path(path: &str, _rules: PathRules) -> Result<Cow<'_, str>, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotOrigin);
    }
    Ok(Cow::Borrowed(path))
}
