//! The synchronisation primitives of the pure book-keeping (`src/queue.rs`): std's atomics and
//! mutexes and the crate's `PollLock`, or loom's when the unit tests are built with `--cfg loom`, so that the loom model of the lanes'
//! protocol (`queue::loom_model`) explores every interleaving of the lane, the poller and a
//! waiter. The normal build (and `--cfg loom` outside the unit tests) uses std's.

#[cfg(not(all(loom, test)))]
pub(crate) use crate::cq::{PollGuard as LockGuard, PollLock as Lock};
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

/// The lock of a work queue's book ([`crate::queue::TrackedQueue`]): held only around a
/// post (its provider call included) or a book update, never across a wait, so the CQs'
/// routing lock serves ([`crate::cq`]'s `PollLock`: a ticket lock, one atomic add to take and one
/// to release, no poisoning). Under loom, loom's mutex.
#[cfg(all(loom, test))]
pub(crate) struct Lock<T>(Mutex<T>);

#[cfg(all(loom, test))]
pub(crate) type LockGuard<'a, T> = MutexGuard<'a, T>;

#[cfg(all(loom, test))]
impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Self {
        Lock(Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
