//! The synchronisation primitives of the pure book-keeping (`src/queue.rs`): std's, or loom's
//! when the unit tests are built with `--cfg loom`, so that the loom model of the lanes'
//! protocol (`queue::loom_model`) explores every interleaving of the lane, the poller and a
//! waiter. The normal build (and `--cfg loom` outside the unit tests) uses std's.

#[cfg(all(loom, test))]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    Mutex, MutexGuard,
};
#[cfg(not(all(loom, test)))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    Mutex, MutexGuard,
};
