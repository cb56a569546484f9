//! Distinct keys in one minute: a HyperLogLog (Flajolet et al., 2007) of 2^10 one-byte
//! registers, a child of `top/mod.rs` — keys denied (`Hll`, under the policy's lock) and
//! keys seen (`AtomicHll`, written without a lock by every decision, `seen.rs`). Minutes
//! merge by taking each register's maximum, so a window's count is one estimate over the
//! union of its minutes.
//!
//! Hand-written (thirty lines) rather than a crate's: it reuses the 64-bit hash the
//! Space-Saving table already computed for the key, so a denial hashes its key once; the
//! HyperLogLog crates hash the item themselves. Standard error 1.04 / sqrt(1024) ≈ 3.3 %,
//! with linear counting below 2.5 × 1024 (nearly exact for a few hundred keys).

use std::sync::atomic::{AtomicU8, Ordering};

/// Register index bits.
const P: u32 = 10;
const M: usize = 1 << P;

#[derive(Debug, Clone)]
pub(super) struct Hll {
    registers: Box<[u8; M]>,
}

impl Default for Hll {
    fn default() -> Self {
        Hll {
            registers: Box::new([0; M]),
        }
    }
}

impl Hll {
    pub fn clear(&mut self) {
        self.registers.fill(0);
    }

    /// Note one key by its hash (remixed: the table's hasher is fast, not avalanche-proof).
    pub fn insert(&mut self, hash: u64) {
        let (index, rank) = place(hash);
        let r = &mut self.registers[index];
        *r = (*r).max(rank);
    }

    /// This one and the registers of `other` together.
    pub fn merge_atomic(&mut self, other: &AtomicHll) {
        for (a, b) in self.registers.iter_mut().zip(other.registers.iter()) {
            *a = (*a).max(b.load(Ordering::Relaxed));
        }
    }

    /// This one and `other` together.
    pub fn merge(&mut self, other: &Hll) {
        for (a, b) in self.registers.iter_mut().zip(other.registers.iter()) {
            *a = (*a).max(*b);
        }
    }

    /// Estimated distinct keys.
    pub fn estimate(&self) -> u64 {
        let m = M as f64;
        let zeros = self.registers.iter().filter(|&&r| r == 0).count();
        let sum: f64 = self
            .registers
            .iter()
            .map(|&r| 2f64.powi(-i32::from(r)))
            .sum();
        let raw = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
        let estimate = if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        estimate.round() as u64
    }
}

/// The register a hash lands in and the rank it puts there.
fn place(hash: u64) -> (usize, u8) {
    let h = mix(hash);
    let index = (h >> (64 - P)) as usize;
    let rank = ((h << P) | (1 << (P - 1))).leading_zeros() + 1;
    (index, rank as u8)
}

/// An [`Hll`] every thread writes without a lock: a register only grows, so a racing
/// write loses nothing (`fetch_max`), and a key seen again reads its register and stops.
#[derive(Debug)]
pub(super) struct AtomicHll {
    registers: Box<[AtomicU8]>,
}

impl Default for AtomicHll {
    fn default() -> Self {
        AtomicHll {
            registers: (0..M).map(|_| AtomicU8::new(0)).collect(),
        }
    }
}

impl AtomicHll {
    pub fn insert(&self, hash: u64) {
        let (index, rank) = place(hash);
        let r = &self.registers[index];
        if r.load(Ordering::Relaxed) < rank {
            r.fetch_max(rank, Ordering::Relaxed);
        }
    }

    pub fn clear(&self) {
        for r in self.registers.iter() {
            r.store(0, Ordering::Relaxed);
        }
    }
}

/// MurmurHash3's 64-bit finalizer.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}
