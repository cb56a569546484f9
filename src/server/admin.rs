//! The admin listener: accepts on `admin_listen` and answers with [`crate::admin::handle`].
//! Connections are held to the public listeners' `header_timeout` and `idle_timeout` (a
//! silent socket must not pin a file descriptor here either) and are closed gracefully at
//! shutdown; nothing waits for them. [`serve`] is that loop for any such side listener (the
//! rate limit service's JSON listener, `rls_json.rs`, too).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::debug;

use super::activity::{Activity, Timeouts};
use super::conn::{Ended, drive};
use super::cuts::Cuts;
use super::listener::AcceptErrors;
use super::stall::StreamExec;
use crate::admin::{self, State};
use crate::body::ResponseBody;
use crate::shutdown::Shutdown;

/// Serve the admin endpoints until shutdown.
pub(crate) async fn run(
    listener: TcpListener,
    state: State,
    timeouts: Timeouts,
    cuts: Cuts,
    shutdown: Shutdown,
) {
    let handler = move |req| {
        let state = state.clone();
        async move { admin::handle(&state, req).await }
    };
    serve(
        listener,
        ("admin", "admin accept failed"),
        handler,
        timeouts,
        cuts,
        shutdown,
    )
    .await;
}

/// Accept on `listener` and answer each request with `handler` until shutdown, each
/// connection held to `timeouts` (a timed-out one counted in `cuts`) and told to close
/// at shutdown. `names`: the listener in its logs, and its failed accepts' message.
pub(crate) async fn serve<H, Fut>(
    listener: TcpListener,
    names: (&'static str, &'static str),
    handler: H,
    timeouts: Timeouts,
    cuts: Cuts,
    mut shutdown: Shutdown,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<ResponseBody>> + Send + 'static,
{
    let http = Arc::new(auto::Builder::new(StreamExec {
        timeout: timeouts.body,
        cuts: cuts.clone(),
    }));
    let (stop, _) = watch::channel(false);
    let (what, accept_failed) = names;
    let mut errors = AcceptErrors::new(accept_failed);
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
        let (handler, http, mut stop) = (handler.clone(), http.clone(), stop.subscribe());
        let cuts = cuts.clone();
        tokio::spawn(async move {
            let ended = drive(stream, &http, activity, &timeouts, handler, &mut stop).await;
            if let Ended::TimedOut(cut) = ended {
                cuts.count(cut);
            }
            debug!(listener = what, %peer, ?ended, "side listener's connection ended");
        });
    }
    let _ = stop.send(true);
}
