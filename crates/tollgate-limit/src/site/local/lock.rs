//! The shard lock of the local site: a spin lock whose release is a plain store. A child of
//! `local.rs`.
//!
//! Why not `std::sync::Mutex`: its unlock is an atomic swap (it must see whether a thread
//! sleeps on the futex), and on x86 a locked instruction waits for the store buffer to
//! drain. perf on `benches/limiter.rs` put a tenth of a hot-key check's samples on that
//! swap and another tenth on the lock's compare-exchange. A release store is a plain
//! `mov`: the check keeps one atomic instruction instead of two.
//!
//! Why spinning is acceptable: a check holds the lock for a table probe and a few
//! arithmetic steps, never across an await or a system call. The long holders (a full
//! shard's `make_room`, a reload carrying a shard, `clear_split`) are rare; a waiter spins
//! a short while and then yields its core to the holder instead of burning its time slice
//! (two cores, many threads: a preempted holder must be able to run).

use spin::mutex::{SpinMutex, SpinMutexGuard};

/// A held shard lock: dropping it releases the lock.
pub(super) type Guard<'a, T> = SpinMutexGuard<'a, T>;

/// Busy-wait rounds before a waiter yields: about the length of a check's critical section.
const SPINS: u32 = 64;

/// A spin lock that yields while its holder runs long.
pub(super) struct ShardLock<T>(SpinMutex<T>);

impl<T> ShardLock<T> {
    pub(super) fn new(value: T) -> Self {
        ShardLock(SpinMutex::new(value))
    }

    /// Take the lock; uncontended, one compare-exchange.
    #[inline]
    pub(super) fn lock(&self) -> Guard<'_, T> {
        match self.0.try_lock() {
            Some(guard) => guard,
            None => self.lock_contended(),
        }
    }

    /// Wait for the holder: spin (reading, not writing, the lock word so the line stays
    /// shared) for `SPINS` rounds, then yield the core and try again.
    #[cold]
    fn lock_contended(&self) -> Guard<'_, T> {
        loop {
            for _ in 0..SPINS {
                if !self.0.is_locked()
                    && let Some(guard) = self.0.try_lock()
                {
                    return guard;
                }
                std::hint::spin_loop();
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Two threads adding under the lock lose no update, and a long holder (sleeping
    /// with the lock) is waited for, not overtaken.
    #[test]
    fn excludes_and_waits_for_a_long_holder() {
        let lock = Arc::new(ShardLock::new(0u64));
        let held = lock.lock();
        let other = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                for _ in 0..100_000 {
                    *lock.lock() += 1;
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(*held, 0, "the other thread waited for the holder");
        drop(held);
        for _ in 0..100_000 {
            *lock.lock() += 1;
        }
        other.join().expect("no panic");
        assert_eq!(*lock.lock(), 200_000);
    }
}
