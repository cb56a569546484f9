//! The rate limit service's JSON listener (`[rls] json_listen`): accepts and drives each
//! connection as the admin listener does (held to `header_timeout` and `idle_timeout`,
//! closed gracefully at shutdown) and answers with `RlsState::json` (`rls/service/json.rs`).

use std::sync::Arc;
use std::time::Instant;

use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::debug;

use super::activity::{Activity, Timeouts};
use super::conn::{Ended, drive};
use super::cuts::Cuts;
use super::listener::AcceptErrors;
use super::stall::StreamExec;
use crate::rls::service::RlsState;
use crate::shutdown::Shutdown;

/// Serve `POST /json` until shutdown.
pub(crate) async fn run(
    listener: TcpListener,
    state: Arc<RlsState>,
    timeouts: Timeouts,
    cuts: Cuts,
    mut shutdown: Shutdown,
) {
    let http = Arc::new(auto::Builder::new(StreamExec {
        timeout: timeouts.body,
        cuts: cuts.clone(),
    }));
    let (stop, _) = watch::channel(false);
    let mut errors = AcceptErrors::new("rls json accept failed");
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    if let Some(wait) = errors.failed(e) {
                        tokio::select! {
                            () = tokio::time::sleep(wait) => {}
                            () = shutdown.recv() => break,
                        }
                    }
                    continue;
                }
            },
            () = shutdown.recv() => break,
        };
        errors.succeeded();
        let activity = Activity::new(Instant::now());
        let (state, http, mut stop) = (state.clone(), http.clone(), stop.subscribe());
        let cuts = cuts.clone();
        tokio::spawn(async move {
            let handler = move |req| {
                let state = state.clone();
                async move { state.json(req).await }
            };
            let ended = drive(stream, &http, activity, &timeouts, handler, &mut stop).await;
            if let Ended::TimedOut(cut) = ended {
                cuts.count(cut);
            }
            debug!(target: "tollgate::rls", %peer, ?ended, "rls json connection ended");
        });
    }
    let _ = stop.send(true);
}
