//! A node's lease books without a store or a gateway, on the in-process coordinator and a
//! manual clock: batch sizes and timing (`batches.rs`), calm keys (`calm.rs`), books leaving
//! memory once spent (`books_leave.rs`). The limiter's own tests (moved from the gateway's
//! `tests/lease/`); the lease site's machinery is public, no feature needed.

mod batches;
mod books_leave;
mod calm;
