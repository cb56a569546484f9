//! One script call as the store sends it: `EVALSHA` with its keys and arguments, written
//! into one command before anything is awaited, so the call owns what it sends.
//!
//! Why not `redis::ScriptInvocation`: it holds every key and argument in a `Vec<u8>` of its
//! own before copying them into the command, a dozen allocations a call, which were a fifth
//! of what a central check allocated (`benches/allocations.rs`). What it does besides,
//! loading a script the store does not know, `send` does the same way.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind};

use super::slot;

/// A script call, ready to send (and to send again after a dropped connection).
pub struct ScriptCall<'s> {
    script: &'s Script,
    /// What the call is for (`check`, `lease`, ...): its metrics label and first argument.
    pub(super) op: &'static str,
    cmd: Cmd,
    /// On a Redis Cluster, the slot of its keys (the caller groups them by slot): which
    /// master's breaker it goes through.
    pub(super) slot: Option<u16>,
    /// On a Redis Cluster, its first key: a ping through it reaches that master. Empty on a
    /// single server, which is pinged with `PING`.
    pub(super) route_key: String,
}

impl<'s> ScriptCall<'s> {
    pub(super) fn new<K: AsRef<str>, A: redis::ToRedisArgs>(
        cluster: bool,
        script: &'s Script,
        op: &'static str,
        keys: &[K],
        args: &[A],
    ) -> Self {
        let words = 4 + keys.len() + args.len();
        let key_bytes: usize = keys.iter().map(|k| k.as_ref().len()).sum();
        let mut cmd = Cmd::with_capacity(words, 64 + key_bytes + 16 * args.len());
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
        for k in keys {
            cmd.arg(k.as_ref());
        }
        cmd.arg(op);
        for a in args {
            cmd.arg(a);
        }
        let first = keys.first().map_or("", AsRef::as_ref);
        ScriptCall {
            script,
            op,
            cmd,
            slot: cluster.then(|| slot::slot(first.as_bytes())),
            route_key: if cluster {
                first.to_owned()
            } else {
                String::new()
            },
        }
    }

    /// Send it on `conn`; a store that does not know the script (restarted, flushed) is
    /// given it with `SCRIPT LOAD` and asked again, as `redis::Script` does.
    pub(super) async fn send<T, C>(&self, conn: &mut C) -> RedisResult<T>
    where
        T: FromRedisValue,
        C: ConnectionLike,
    {
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            reply => reply,
        }
    }
}

/// The connection was found dropped: the connection manager is reconnecting.
pub(super) fn reconnecting(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error()
}

/// The store itself answered with an error about this call (a Lua error on a foreign
/// value, an unknown error code, a reply of the wrong type): it is up, only this call
/// cannot be decided.
pub(super) fn answered(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ResponseError)
            | ErrorKind::Extension
            | ErrorKind::UnexpectedReturnType
    )
}
