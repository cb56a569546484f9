//! Protocol upgrades (WebSocket and friends): once both sides agreed on `101 Switching
//! Protocols`, tollgate is a byte pipe between the two upgraded connections.

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::OwnedSemaphorePermit;
use tracing::debug;

/// Copy bytes both ways until either side closes; `_slot` (the upstream connection slot)
/// is held until then.
pub(super) async fn tunnel(
    client: OnUpgrade,
    upstream: OnUpgrade,
    _slot: Option<OwnedSemaphorePermit>,
) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(pair) => pair,
        Err(e) => {
            debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let mut client = TokioIo::new(client);
    let mut upstream = TokioIo::new(upstream);
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        debug!(error = %e, "upgraded connection ended with an error");
    }
}
