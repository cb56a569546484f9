//! Shutdown's first step: the drain delay between `/readyz` turning 503 and the listeners
//! closing (`Server::try_run` waits on it before it stops them).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tracing::info;

/// `[server] drain_delay`: `/readyz` already answers 503 and every listener still accepts
/// and serves, so a balancer that probes readiness stops sending here before the listeners
/// close and a new connection would be refused. `hurry` ends it early.
pub(super) async fn drain_delay(
    delay: Duration,
    hurry: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
) {
    if delay.is_zero() {
        return;
    }
    let delay_ms = delay.as_millis() as u64;
    info!(
        delay_ms,
        "draining: /readyz answers 503; the listeners close after the delay"
    );
    let hurry = async {
        match hurry {
            Some(h) => h.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = hurry => info!("asked to stop again: the drain delay ends now"),
    }
}
