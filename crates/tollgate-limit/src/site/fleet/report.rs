//! A gossip report: one policy's spends since the last push, as a push carries them (one
//! report per policy, not one item per key: a busy node reports hundreds of keys per
//! interval, and a per-key item cost an allocation, an item header and an answer each on
//! both sides).
//!
//! ```text
//! report:  name_len u16, policy name, spec u64 (`codec::fingerprint`), then per key:
//!          headroom, cells, shared, suffix_len (LEB128 varints), suffix
//! ```
//!
//! Keys are front-coded: an entry gives how many leading bytes its key shares with the key
//! before it (a policy's keys share its name and the key recipe's prefix, often much of an
//! address), then the rest. Every byte of a push is hashed by the MAC at both ends and read
//! by every peer: an entry of an IPv4 key went from about 35 bytes to about 11.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Builds one policy's gossip report.
pub struct ReportWriter {
    buf: BytesMut,
    spec: u64,
    /// The key of the last entry: the next one is written as what it shares with it.
    last: Vec<u8>,
}

impl ReportWriter {
    pub fn new(policy: &str, spec: u64) -> Self {
        let name = &policy.as_bytes()[..policy.len().min(usize::from(u16::MAX))];
        let mut buf = BytesMut::with_capacity(2 + name.len() + 8 + 64 * 12);
        buf.put_u16(name.len() as u16);
        buf.put_slice(name);
        buf.put_u64(spec);
        ReportWriter {
            buf,
            spec,
            last: Vec::new(),
        }
    }

    /// The fingerprint this report carries.
    pub fn spec(&self) -> u64 {
        self.spec
    }

    /// `cells` of `key` (UTF-8) spent; a count above `u32::MAX` takes several entries.
    pub fn push(&mut self, headroom: u32, mut cells: u64, key: &[u8]) {
        while cells > 0 {
            let now = cells.min(u64::from(u32::MAX));
            cells -= now;
            let shared = shared_prefix(&self.last, key);
            let suffix = &key[shared..];
            // The four numbers go in one copy (this runs once per key per push).
            let mut head = [0u8; 4 * MAX_VARINT];
            let mut n = 0;
            for v in [u64::from(headroom), now, shared as u64, suffix.len() as u64] {
                n += put_varint(&mut head[n..], v);
            }
            self.buf.extend_from_slice(&head[..n]);
            self.buf.extend_from_slice(suffix);
            self.last.truncate(shared);
            self.last.extend_from_slice(suffix);
        }
    }

    /// Bytes so far (pushes split reports well below the transport's message limit).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}

/// How many leading bytes `a` and `b` share, eight at a time (it runs once per key per
/// push, and keys share a dozen bytes and more).
fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while let (Some(x), Some(y)) = (a.get(i..i + 8), b.get(i..i + 8)) {
        let x = u64::from_le_bytes(x.try_into().unwrap_or_default());
        let y = u64::from_le_bytes(y.try_into().unwrap_or_default());
        if x != y {
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// LEB128: seven bits a byte, low first, the high bit set on all but the last. Written
/// here rather than taken from a crate: two short loops, and the reader must bound what
/// it accepts (at most [`MAX_VARINT`] bytes, no value past `u64`) in its own way.
/// Writes `v` at the start of `out` and says how many bytes it took.
#[inline]
fn put_varint(out: &mut [u8], mut v: u64) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        out[n] = v as u8 | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    n + 1
}

/// The longest varint: a `u64` in sevens.
const MAX_VARINT: usize = 10;

fn get_varint(rest: &mut &[u8]) -> Result<u64, ()> {
    let mut v = 0u64;
    for (i, &byte) in rest.iter().enumerate().take(MAX_VARINT) {
        if i == 9 && byte > 1 {
            return Err(()); // past u64
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *rest = &rest[i + 1..];
            return Ok(v);
        }
    }
    Err(())
}

/// A received gossip report: its policy, and its entries to read one by one.
pub struct Report {
    pub policy: Bytes,
    pub spec: u64,
    entries: Bytes,
}

/// One entry of a [`Report`].
#[derive(Debug, PartialEq, Eq)]
pub struct Spent<'a> {
    pub headroom: u32,
    pub cells: u32,
    pub key: &'a str,
}

impl Report {
    /// `None` when the header is not shaped as a report's.
    pub fn decode(mut b: Bytes) -> Option<Report> {
        if b.remaining() < 2 {
            return None;
        }
        let n = usize::from(b.get_u16());
        if b.remaining() < n + 8 {
            return None;
        }
        let policy = b.split_to(n);
        let spec = b.get_u64();
        Some(Report {
            policy,
            spec,
            entries: b,
        })
    }

    /// The entries in order (see [`Entries::next_entry`]).
    pub fn entries(&self) -> Entries<'_> {
        Entries {
            rest: &self.entries,
            key: Vec::new(),
        }
    }
}

/// A report's entries: each key is rebuilt in one buffer from what it shares with the
/// one before, so an entry borrows the walk (not an `Iterator`).
pub struct Entries<'a> {
    rest: &'a [u8],
    key: Vec<u8>,
}

impl Entries<'_> {
    /// The next entry; a malformed one ends the walk with `Err(())` (the ones before it
    /// stand: each is a spend the sender made).
    pub fn next_entry(&mut self) -> Option<Result<Spent<'_>, ()>> {
        if self.rest.is_empty() {
            return None;
        }
        let entry = match self.read() {
            Ok((headroom, cells)) => std::str::from_utf8(&self.key)
                .map(|key| Spent {
                    headroom,
                    cells,
                    key,
                })
                .map_err(drop),
            Err(()) => Err(()),
        };
        if entry.is_err() {
            self.rest = &[];
        }
        Some(entry)
    }

    /// Reads one entry's numbers and rebuilds its key in `self.key`.
    fn read(&mut self) -> Result<(u32, u32), ()> {
        let rest = &mut self.rest;
        let headroom = u32::try_from(get_varint(rest)?).map_err(drop)?;
        let cells = u32::try_from(get_varint(rest)?).map_err(drop)?;
        let shared = usize::try_from(get_varint(rest)?).map_err(drop)?;
        let n = usize::try_from(get_varint(rest)?).map_err(drop)?;
        if shared > self.key.len() || rest.len() < n {
            return Err(());
        }
        let (suffix, tail) = rest.split_at(n);
        *rest = tail;
        self.key.truncate(shared);
        self.key.extend_from_slice(suffix);
        Ok((headroom, cells))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every entry of `r`, owned: `Ok((headroom, cells, key))`, then `Err(())` if one
    /// was malformed.
    fn all(r: &Report) -> Vec<Result<(u32, u32, String), ()>> {
        let mut out = Vec::new();
        let mut entries = r.entries();
        while let Some(e) = entries.next_entry() {
            out.push(e.map(|s| (s.headroom, s.cells, s.key.to_string())));
        }
        out
    }

    #[test]
    fn shared_prefixes_are_counted_across_words() {
        let cases: [(&[u8], &[u8], usize); 6] = [
            (b"", b"abc", 0),
            (b"abc", b"abc", 3),
            (b"abcdefgh", b"abcdefgh12", 8),
            (b"gossip_ip:ip:10.1.2.3", b"gossip_ip:ip:10.1.9.3", 18),
            (b"gossip_ip:ip:10.1.2.3", b"gossip_iX", 8),
            (b"x", b"y", 0),
        ];
        for (a, b, n) in cases {
            assert_eq!(
                (shared_prefix(a, b), shared_prefix(b, a)),
                (n, n),
                "{a:?} {b:?}"
            );
        }
    }

    #[test]
    fn reports_round_trip_and_stop_at_a_malformed_entry() {
        let mut w = ReportWriter::new("per-ip", 0xbeef);
        w.push(1, 3, "per-ip\u{1f}10.0.0.1".as_bytes());
        w.push(300, 5, "per-ip\u{1f}10.0.0.12".as_bytes());
        w.push(4, u64::from(u32::MAX) + 2, "k".as_bytes());
        w.push(1, 1, "".as_bytes());
        w.push(1, 1, "per-ip\u{1f}ü".as_bytes());
        let bytes = w.finish();
        let r = Report::decode(bytes.clone()).expect("a report");
        assert_eq!((&r.policy[..], r.spec), (&b"per-ip"[..], 0xbeef));
        let s = |headroom, cells, key: &str| Ok((headroom, cells, key.to_string()));
        let whole = [
            s(1, 3, "per-ip\u{1f}10.0.0.1"),
            s(300, 5, "per-ip\u{1f}10.0.0.12"),
            s(4, u32::MAX, "k"),
            s(4, 2, "k"),
            s(1, 1, ""),
            s(1, 1, "per-ip\u{1f}ü"),
        ];
        assert_eq!(all(&r), whole);
        // Front-coded: the second key costs its four numbers and one byte.
        let first = 2 + 6 + 8 + 4 + "per-ip\u{1f}10.0.0.1".len();
        let second = first + 2 + 1 + 1 + 1 + 1;
        let cut = Report::decode(bytes.slice(..second)).expect("header intact");
        assert_eq!(all(&cut), whole[..2]);
        // Cut inside the last entry: the whole ones stand, then one error, then the end.
        let cut = Report::decode(bytes.slice(..bytes.len() - 1)).expect("header intact");
        let spent = all(&cut);
        assert_eq!(spent[..5], whole[..5]);
        assert_eq!(spent[5..], [Err(())]);
        assert!(Report::decode(Bytes::from_static(b"\x00\x05abc")).is_none());
        // A shared prefix longer than the key before it, an overlong varint, a cut UTF-8
        // character: each is malformed.
        for entries in [
            &b"\x01\x01\x01\x00"[..],
            b"\x01\x01\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\x00",
            b"\x01\x01\x00\x01\xc3",
        ] {
            let mut b = BytesMut::from(&b"\x00\x01p\0\0\0\0\0\0\0\0"[..]);
            b.put_slice(entries);
            let r = Report::decode(b.freeze()).expect("header intact");
            assert_eq!(all(&r), [Err(())], "{entries:?}");
        }
    }
}
