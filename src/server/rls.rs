//! The rate limit service's listeners (`[rls] listen`, `[rls] json_listen`): bound with the
//! gateway's other sockets, served until shutdown beside them. The gRPC one is tonic's
//! (`rls/service/server.rs`, over TLS when `[rls] tls_cert` is set); the JSON one is driven
//! as the admin listener is (`admin.rs`'s `serve`: held to `header_timeout` and
//! `idle_timeout`, closed gracefully at shutdown) and answers with `RlsState::json`.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::activity::Timeouts;
use super::admin::serve;
use super::cuts::Cuts;
use super::{ServerError, bind, tls};
use crate::config::Rls;
use crate::rls::service::RlsState;
use crate::shutdown::Shutdown;

/// The service's sockets, bound and not yet serving.
#[derive(Default)]
pub(super) struct RlsListeners {
    /// `[rls] listen`, and its TLS (`[rls] tls_cert`).
    grpc: Option<(TcpListener, Option<TlsAcceptor>)>,
    /// `[rls] json_listen`.
    json: Option<TcpListener>,
}

impl RlsListeners {
    /// Bind what `rls` names (nothing without `[rls]`).
    pub(super) async fn bind(rls: Option<&Rls>) -> Result<RlsListeners, ServerError> {
        let Some(r) = rls else {
            return Ok(RlsListeners::default());
        };
        let acceptor = match &r.tls {
            Some((cert, key)) => Some(tls::acceptor(cert, key)?),
            None => None,
        };
        let grpc = Some((bind("rls.listen", r.listen).await?, acceptor));
        let json = match r.json_listen {
            Some(a) => Some(bind("rls.json_listen", a).await?),
            None => None,
        };
        Ok(RlsListeners { grpc, json })
    }

    /// The bound addresses: `[rls] listen`'s and `json_listen`'s.
    pub(super) fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let local = |l: &TcpListener| l.local_addr().expect("a bound listener has an address");
        (
            self.grpc.as_ref().map(|(l, _)| local(l)),
            self.json.as_ref().map(local),
        )
    }

    /// Serve both on `state` in `tasks`, each until `notify` says stop.
    pub(super) fn spawn(
        self,
        state: Arc<RlsState>,
        timeouts: Timeouts,
        cuts: Cuts,
        notify: &broadcast::Sender<()>,
        tasks: &mut JoinSet<()>,
    ) {
        if let Some(l) = self.json {
            let stop = Shutdown::new(notify.subscribe());
            let state = state.clone();
            let handler = move |req| {
                let state = state.clone();
                async move { state.json(req).await }
            };
            let names = ("rls json", "rls json accept failed");
            tasks.spawn(serve(l, names, handler, timeouts, cuts, stop));
        }
        if let Some((l, tls)) = self.grpc {
            let mut stop = Shutdown::new(notify.subscribe());
            tasks.spawn(async move {
                let stopped = async move { stop.recv().await };
                let served = crate::rls::service::serve(l, tls, state, stopped);
                if let Err(e) = served.await {
                    tracing::error!(error = %e, "the rate limit service stopped");
                }
            });
        }
    }
}
