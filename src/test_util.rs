//! Helpers for the unit tests.

use crate::Error;

/// Asserts that `r` is the refusal a test means: [`Error::InvalidArgument`] of `verb` whose
/// reason contains `reason_part` (a literal part of the check's message), not merely some
/// refusal, which another check could have made. Prints the whole error, or what was accepted.
#[track_caller]
pub(crate) fn assert_refused<T: std::fmt::Debug>(r: Result<T, Error>, verb: &str, reason_part: &str) {
    match r {
        Err(Error::InvalidArgument { verb: v, reason }) if v == verb && reason.contains(reason_part) => {}
        other => panic!(
            "expected Error::InvalidArgument {{ verb: {verb:?}, reason containing {reason_part:?} }}, got {other:?}"
        ),
    }
}

/// A deterministic xorshift generator, so the property tests need no dependency.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
