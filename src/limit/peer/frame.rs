//! Frames on a peer connection: a message is a `u32` big-endian length, then that many
//! bytes; a reply's bytes start with a status byte ([`OK`] then the sealed reply, or why the
//! message was refused). One message is in flight per connection at a time (the client
//! sends one per peer and waits for its reply), so replies need no ids: the next frame read
//! answers the last one written.
//!
//! Written by hand rather than with a codec crate: it is two integers and a copy, and the
//! reader must take its bytes from the server's read budget before allocating them, which a
//! generic decoder would not let it do.

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The reply carries a sealed reply.
pub const OK: u8 = 0;
/// Refused: forged, stale, replayed or misdirected (the client's `Status(401)`).
pub const REFUSED: u8 = 1;
/// Not a message of this format (`Status(400)`).
pub const MALFORMED: u8 = 2;
/// The handler answered wrongly (`Status(500)`).
pub const FAILED: u8 = 3;

/// The HTTP-like status a reply's status byte stands for (what `PeerError::Status` and
/// the tests name).
pub fn status_code(status: u8) -> u16 {
    match status {
        OK => 200,
        REFUSED => 401,
        MALFORMED => 400,
        _ => 500,
    }
}

/// Write one frame: `status` (replies only) then `body`, in one write.
pub async fn write<W: AsyncWrite + Unpin>(
    w: &mut W,
    status: Option<u8>,
    body: &[u8],
) -> std::io::Result<()> {
    let len = body.len() + usize::from(status.is_some());
    let len = u32::try_from(len).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let mut out = BytesMut::with_capacity(4 + len as usize);
    out.put_u32(len);
    if let Some(s) = status {
        out.put_u8(s);
    }
    out.put_slice(body);
    w.write_all(&out).await
}

/// Read one frame's length.
pub async fn read_len<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<usize> {
    Ok(r.read_u32().await? as usize)
}

/// Read a frame body of `len` bytes (its length already read).
pub async fn read_body<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> std::io::Result<Bytes> {
    let mut buf = BytesMut::zeroed(len);
    r.read_exact(&mut buf).await?;
    Ok(buf.freeze())
}
