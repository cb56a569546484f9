//! TLS on `[rls] listen` (`tls_cert`, `tls_key`, the gateway's own keys): each accepted
//! socket's handshake runs on its own task, within a bound, and the finished streams feed
//! tonic's server. Written here rather than with tonic's `tls` features: the gateway's
//! rustls acceptor (`server/tls.rs`) is the one TLS setup of the process, and tonic only
//! needs a stream of connections that say who they came from ([`Connected`]).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;

/// A handshake not done by then is dropped: a silent client must not hold a task.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// One accepted TLS connection.
pub(super) struct TlsIo {
    stream: TlsStream<TcpStream>,
    peer: SocketAddr,
}

impl Connected for TlsIo {
    type ConnectInfo = SocketAddr;

    fn connect_info(&self) -> SocketAddr {
        self.peer
    }
}

impl AsyncRead for TlsIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The connections of `listener` after their handshakes; accepting stops when the
/// stream is dropped (the server stopped).
pub(super) fn incoming(
    listener: TcpListener,
    acceptor: TlsAcceptor,
) -> impl Stream<Item = Result<TlsIo, io::Error>> {
    let (tx, mut rx) = mpsc::channel::<TlsIo>(64);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "rls accept failed");
                        continue;
                    }
                },
                () = tx.closed() => return,
            };
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => drop(tx.send(TlsIo { stream, peer }).await),
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "rls TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "rls TLS handshake timed out"),
                }
            });
        }
    });
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|io| io.map(Ok)))
}
