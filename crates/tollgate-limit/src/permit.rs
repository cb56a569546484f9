//! Concurrency permits: a spent concurrency cell is given back when its request ends.
//!
//! The permits ride inside the response body (see `body.rs`), so they drop — and
//! release — when the body has been sent or when the client goes away mid-response.
//! Central cells are released by a store call spawned from the drop.

use std::sync::Arc;

use super::site::central::{CentralItem, CentralSite};
use super::site::local::{CheckItem, LocalStore};

/// The in-flight cells of one request; released on drop.
#[derive(Default)]
pub struct Permits {
    /// Local cells: the store holding them and the items that spent them.
    local: Option<(Arc<LocalStore>, Vec<CheckItem>)>,
    /// Central cells.
    central: Option<(Arc<CentralSite>, Vec<CentralItem>)>,
}

impl Permits {
    pub fn new(store: Arc<LocalStore>, items: Vec<CheckItem>) -> Self {
        let mut p = Permits::default();
        if !items.is_empty() {
            p.local = Some((store, items));
        }
        p
    }

    /// Also release these central cells at the end.
    pub fn with_central(mut self, site: Arc<CentralSite>, items: Vec<CentralItem>) -> Self {
        if !items.is_empty() {
            self.central = Some((site, items));
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.local.is_none() && self.central.is_none()
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if let Some((store, items)) = self.local.take() {
            for item in &items {
                store.release(item);
            }
        }
        if let Some((site, items)) = self.central.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            // Outside a runtime (process exit) the slots simply expire in the store.
            rt.spawn(async move { site.release(&items).await });
        }
    }
}

impl std::fmt::Debug for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.local.as_ref().map_or(0, |(_, i)| i.len())
            + self.central.as_ref().map_or(0, |(_, i)| i.len());
        write!(f, "Permits({n})")
    }
}
