//! Frames on a peer connection: a message is a `u32` big-endian length, then that many
//! bytes; a reply's bytes start with a status byte ([`OK`] then the sealed reply, or why the
//! message was refused). One message is in flight per connection at a time (the client
//! sends one per peer and waits for its reply), so replies need no ids: the next frame read
//! answers the last one written.
//!
//! Written by hand rather than with a codec crate: it is two integers and a copy, and the
//! reader must take its bytes from the server's read budget before allocating them, which a
//! generic decoder would not let it do.

use bytes::{Buf, BufMut, BytesMut};
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

/// Read a frame body of `len` bytes (its length already read): the gateway's tests of the
/// transport read whole frames with it.
#[cfg(feature = "test-util")]
pub async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
) -> std::io::Result<bytes::Bytes> {
    let mut buf = BytesMut::zeroed(len);
    r.read_exact(&mut buf).await?;
    Ok(buf.freeze())
}

/// Read one reply frame whole (the client's side): its bytes, status first, in a buffer
/// with `room` bytes of capacity to spare after them (a reply's MAC check appends the
/// request's MAC there, `wire::open_reply`). Each read takes what has arrived, so a short
/// reply, all in one segment, costs one read rather than one for its length and one for its
/// bytes. `InvalidData` when it is empty or longer than `max`, or when bytes follow it (a
/// peer answers a message with one frame).
pub async fn read_reply<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
    room: usize,
) -> std::io::Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(256);
    let mut whole = None;
    loop {
        if whole.is_none() && buf.len() >= 4 {
            let len = buf.get_u32() as usize;
            if len == 0 || len > max {
                return Err(std::io::ErrorKind::InvalidData.into());
            }
            buf.reserve((len + room).saturating_sub(buf.len()));
            whole = Some(len);
        }
        match whole {
            Some(len) if buf.len() == len => return Ok(buf),
            Some(len) if buf.len() > len => return Err(std::io::ErrorKind::InvalidData.into()),
            _ => {}
        }
        if r.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[tokio::test]
    async fn a_reply_is_read_whole_with_room_and_nothing_may_follow_it() {
        let one = frame(b"\x00reply");
        let got = read_reply(&mut &one[..], 64, 32)
            .await
            .expect("a whole reply");
        assert_eq!(&got[..], b"\x00reply");
        assert!(
            got.capacity() - got.len() >= 32,
            "room for the request's MAC"
        );
        let kind = |r: std::io::Result<BytesMut>| r.expect_err("refused").kind();
        let two = [one.clone(), one.clone()].concat();
        assert_eq!(
            kind(read_reply(&mut &two[..], 64, 0).await),
            ErrorKind::InvalidData
        );
        let long = frame(&[0; 65]);
        assert_eq!(
            kind(read_reply(&mut &long[..], 64, 0).await),
            ErrorKind::InvalidData
        );
        let empty = frame(b"");
        assert_eq!(
            kind(read_reply(&mut &empty[..], 64, 0).await),
            ErrorKind::InvalidData
        );
        let cut = &one[..one.len() - 1];
        assert_eq!(
            kind(read_reply(&mut &cut[..], 64, 0).await),
            ErrorKind::UnexpectedEof
        );
    }
}
