//! Concurrency permits: a spent concurrency cell is given back when its request ends.
//!
//! The permits ride inside the response body (see `proxy/body.rs`), so they drop — and
//! release — when the body has been sent or when the client goes away mid-response.

use std::sync::Arc;

use super::local::{CheckItem, LocalStore};

/// The in-flight cells of one request; released on drop.
#[derive(Default)]
pub struct Permits {
    /// The store holding the cells and the items that spent them.
    held: Option<(Arc<LocalStore>, Vec<CheckItem>)>,
}

impl Permits {
    pub fn new(store: Arc<LocalStore>, items: Vec<CheckItem>) -> Self {
        if items.is_empty() {
            return Permits::default();
        }
        Permits {
            held: Some((store, items)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_none()
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if let Some((store, items)) = self.held.take() {
            for item in &items {
                store.release(item);
            }
        }
    }
}

impl std::fmt::Debug for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.held.as_ref().map_or(0, |(_, items)| items.len());
        write!(f, "Permits({n})")
    }
}
