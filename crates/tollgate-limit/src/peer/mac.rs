//! The peer messages' MAC: BLAKE3 in keyed mode, its 32-byte key derived from the fleet's
//! shared secret with BLAKE3's `derive_key` (so a secret of any length of at least
//! [`MIN_SECRET_BYTES`] keys it, and this key serves this use only).
//!
//! Not HMAC-SHA256, which sealed wire versions up to 5: an HMAC costs two SHA-256 blocks
//! beyond the message's own (the inner padding block and the outer hash), so a gossip push
//! and its empty reply took some 9 blocks on the sender alone, per peer, each interval; on a
//! CPU without SHA extensions (and under valgrind, which the instruction bench runs in) that
//! was most of what the gossip site cost over local (BENCHMARKS.md, issue 12). Keyed BLAKE3
//! is a PRF with a 256-bit key and a 256-bit tag: one compression per 64 bytes and none
//! extra, each several times cheaper than a SHA-256 block in software (with SHA extensions
//! the two are closer, and BLAKE3 still runs fewer blocks per message). What a MAC covers
//! and how replays are refused is `wire.rs`'s.

/// Bytes of a MAC (and of the derived key).
pub const MAC_LEN: usize = 32;

/// The shortest secret accepted (as `check` demands of `peer_secret_env`).
pub const MIN_SECRET_BYTES: usize = 32;

/// `derive_key`'s context string: unique to this application and use, as BLAKE3 asks, so
/// the key is not the one any other use of the same secret would derive.
const KEY_CONTEXT: &str = "tollgate 2026-12-01 peer wire v6 message MAC";

/// The shared secret, as the MAC key derived from it; never printed.
#[derive(Clone)]
pub struct Secret {
    key: [u8; MAC_LEN],
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// `None` when shorter than [`MIN_SECRET_BYTES`].
    pub fn new(bytes: &[u8]) -> Option<Secret> {
        if bytes.len() < MIN_SECRET_BYTES {
            return None;
        }
        Some(Secret {
            key: blake3::derive_key(KEY_CONTEXT, bytes),
        })
    }

    /// The MAC of `signed` (contiguous: a reply's bound request MAC is appended to it by
    /// `wire.rs`, so every MAC is one `keyed_hash` call and no streaming hasher is built).
    pub(super) fn mac(&self, signed: &[u8]) -> [u8; MAC_LEN] {
        *blake3::keyed_hash(&self.key, signed).as_bytes()
    }

    /// Whether `mac` is the MAC of `signed`, compared in constant time.
    pub(super) fn verify(&self, signed: &[u8], mac: &[u8]) -> bool {
        // `blake3::Hash`'s equality with a slice is constant-time (false for other lengths).
        blake3::Hash::from_bytes(self.mac(signed)) == *mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_derived_and_every_byte_counts() {
        let s = Secret::new(&[7; 32]).expect("32 bytes");
        assert_ne!(s.key, [7; 32], "the secret itself never keys the MAC");
        let mac = s.mac(b"message");
        assert!(s.verify(b"message", &mac));
        assert!(!s.verify(b"messagf", &mac));
        assert!(!s.verify(b"message", &mac[..31]));
        let other = Secret::new(&[8; 32]).expect("32 bytes");
        assert!(!other.verify(b"message", &mac));
        // Keys of secrets of other lengths differ too (the key is derived, not padded).
        let longer = Secret::new(&[7; 33]).expect("33 bytes");
        assert!(!longer.verify(b"message", &mac));
    }
}
