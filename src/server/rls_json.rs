//! The rate limit service's JSON listener (`[rls] json_listen`): accepts and drives each
//! connection as the admin listener does (`admin.rs`'s `serve`: held to `header_timeout`
//! and `idle_timeout`, closed gracefully at shutdown) and answers with `RlsState::json`
//! (`rls/service/json.rs`).

use std::sync::Arc;

use tokio::net::TcpListener;

use super::activity::Timeouts;
use super::admin::serve;
use super::cuts::Cuts;
use crate::rls::service::RlsState;
use crate::shutdown::Shutdown;

/// Serve `POST /json` until shutdown.
pub(crate) async fn run(
    listener: TcpListener,
    state: Arc<RlsState>,
    timeouts: Timeouts,
    cuts: Cuts,
    shutdown: Shutdown,
) {
    let handler = move |req| {
        let state = state.clone();
        async move { state.json(req).await }
    };
    let names = ("rls json", "rls json accept failed");
    serve(listener, names, handler, timeouts, cuts, shutdown).await;
}
