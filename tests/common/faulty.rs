//! A fault-injecting TCP proxy for failure tests: it sits between the gateway and Redis and,
//! on command, delays, swallows, resets or refuses traffic, on existing and new connections.
#![allow(dead_code)]

use std::future::poll_fn;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::watch;

/// What the proxy does to traffic. A change applies at once to existing connections too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward bytes both ways untouched.
    Pass,
    /// Hold every chunk this long before forwarding it, in each direction: a slow link or a
    /// slow Redis, so a request/reply round trip takes at least twice this.
    Delay(Duration),
    /// Forward nothing either way (not even a close), and accept new connections without
    /// dialling upstream: a frozen network, so clients see timeouts rather than errors.
    /// Held traffic flows again when the mode goes back to Pass or Delay.
    Blackhole,
    /// Close every connection, existing and new, with a TCP RST: a crashed peer.
    Reset,
    /// Stop listening, so connects are refused, and reset existing connections: Redis is down.
    Refuse,
}

/// The proxy. Dropping it closes the listener and every connection.
pub struct FaultyProxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Fault>,
    /// `None` while refusing. Held here rather than in the accept task so that `set` closes
    /// and reopens it before returning: a connect right after `set(Refuse)` is refused.
    listener: Arc<Mutex<Option<TcpListener>>>,
    runtime: Handle,
}

impl FaultyProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let mode = watch::channel(Fault::Pass).0;
        let listener = Arc::new(Mutex::new(Some(listener)));
        tokio::spawn(accept_loop(listener.clone(), mode.subscribe(), upstream));
        FaultyProxy {
            addr,
            mode,
            listener,
            runtime: Handle::current(),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Switches the fault. The listener is closed or reopened before this returns; every
    /// connection applies the new mode to its next chunk, and a cut at once.
    pub fn set(&self, fault: Fault) {
        let mut slot = lock(&self.listener);
        if fault == Fault::Refuse {
            if let Some(listener) = slot.take() {
                stop_listening(listener);
            }
        } else if slot.is_none() {
            let _runtime = self.runtime.enter();
            let std = std::net::TcpListener::bind(self.addr)
                .unwrap_or_else(|e| panic!("proxy cannot listen on {} again: {e}", self.addr));
            std.set_nonblocking(true).unwrap();
            *slot = Some(TcpListener::from_std(std).unwrap());
        }
        drop(slot);
        // After the listener swap, so the accept task wakes to the new listener.
        self.mode.send_replace(fault);
    }
}

impl Drop for FaultyProxy {
    fn drop(&mut self) {
        // The connection tasks end (with a reset) when they see the mode sender dropped.
        if let Some(listener) = lock(&self.listener).take() {
            stop_listening(listener);
        }
    }
}

/// Closing the fd is not enough: a process that another test is spawning right now may hold
/// a copy of it until its exec, and keep the port listening. Shutdown acts on the socket.
fn stop_listening(listener: TcpListener) {
    if let Ok(fd) = listener.as_fd().try_clone_to_owned() {
        let _ = std::net::TcpStream::from(fd).shutdown(Shutdown::Both);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn accept_loop(
    listener: Arc<Mutex<Option<TcpListener>>>,
    mut mode: watch::Receiver<Fault>,
    upstream: SocketAddr,
) {
    loop {
        let accept = poll_fn(|cx| match lock(&listener).as_ref() {
            Some(l) => l.poll_accept(cx).map(Some),
            // Refusing: the mode change that reopens the listener wakes us.
            None => Poll::Pending,
        });
        let accepted = tokio::select! {
            accepted = accept => accepted,
            changed = mode.changed() => match changed {
                Ok(()) => None,
                Err(_) => return,
            },
        };
        if let Some(Ok((client, _))) = accepted {
            tokio::spawn(connection(client, upstream, mode.clone()));
        }
    }
}

/// One client connection: a connection accepted during a blackhole waits undialled.
async fn connection(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Fault>) {
    if passable(&mut mode).await.is_none() {
        return reset(client);
    }
    match TcpStream::connect(upstream).await {
        Ok(server) => pump(client, server, mode).await,
        Err(_) => reset(client),
    }
}

/// Forwards chunks both ways, each (and the final close) only when the mode lets it through.
async fn pump(mut client: TcpStream, mut server: TcpStream, mut mode: watch::Receiver<Fault>) {
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    loop {
        let (n, to_server) = tokio::select! {
            r = client.read(&mut up) => (r.unwrap_or(0), true),
            r = server.read(&mut down) => (r.unwrap_or(0), false),
            changed = mode.changed() => {
                if changed.is_err() || cuts(*mode.borrow_and_update()) {
                    return reset(client);
                }
                continue;
            }
        };
        let Some(delay) = passable(&mut mode).await else {
            return reset(client);
        };
        if !delay.is_zero() && !sleep_unless_cut(delay, &mut mode).await {
            return reset(client);
        }
        let (dst, chunk) = if to_server {
            (&mut server, &up[..n])
        } else {
            (&mut client, &down[..n])
        };
        // A close (n == 0) or a failed write ends both sides.
        if n == 0 || dst.write_all(chunk).await.is_err() {
            return;
        }
    }
}

fn cuts(fault: Fault) -> bool {
    matches!(fault, Fault::Reset | Fault::Refuse)
}

/// Waits out a blackhole; then the delay to add, or `None` if the connection must be cut.
async fn passable(mode: &mut watch::Receiver<Fault>) -> Option<Duration> {
    match *mode.wait_for(|m| *m != Fault::Blackhole).await.ok()? {
        Fault::Pass => Some(Duration::ZERO),
        Fault::Delay(d) => Some(d),
        _ => None,
    }
}

/// Sleeps `delay`, but returns false early if the mode turns to cutting connections.
async fn sleep_unless_cut(delay: Duration, mode: &mut watch::Receiver<Fault>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => true,
        _ = mode.wait_for(|m| cuts(*m)) => false,
    }
}

/// Closes with SO_LINGER 0, so the peer sees a reset rather than a clean close.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
}
