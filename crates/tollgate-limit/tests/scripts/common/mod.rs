//! What the scripts' tests share: a real `redis-server` (`redis.rs`) and the decision
//! replies read as words (`words.rs`), small copies of the gateway's `tests/common/`.

pub mod redis;
pub mod words;

/// `n` as a `NonZeroU32` (test constants).
pub fn nz(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).expect("non-zero")
}
