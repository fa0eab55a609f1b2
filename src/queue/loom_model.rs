//! Loom model of the lanes' book-keeping ([`LaneBook`]): every interleaving (up to loom's
//! preemption bound) of the lane thread (`posting`, `covered`), a poller that holds the CQ's
//! routing lock (`complete`, `complete_kept`, `complete_taken`), a waiter (`is_done`,
//! `succeeded`, `result`, `take_kept`) and a reset (`force_flush`); also the send queue's
//! lock-free take (`Settled`) and the release of a dropped token's buffers racing its
//! completion.
//!
//! Built only as a unit test with `--cfg loom` (the atomics and locks of `src/queue.rs` are then
//! loom's, `src/sync.rs`). Run it, from the repository root, with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test --locked --release --lib queue::loom_model
//! ```
//!
//! (`scripts/test` runs it in its host stage. A separate target directory keeps the normal
//! build's artifacts; `LOOM_MAX_PREEMPTIONS` bounds the search; without it loom explores every
//! interleaving, which takes much longer.) The test `a_completion_racing_a_reset_...` checks
//! that a reset's flush, taken under the routing lock, never moves a poller's `done` back.
//!
//! The scenarios of four threads that each take several locks (a reset racing a poller and a
//! waiter, the lock-free take racing a reset or a dropped token: [`model_four_threads`]) are
//! searched with at most [`FOUR_THREADS_PREEMPTIONS`] preemptions whatever
//! `LOOM_MAX_PREEMPTIONS` says: at 3 they take about 400 s of the whole model's 435 s (one test
//! at a time, 2-core test machine), at 2 about 25 s. The bound of 2 still finds every fault
//! these scenarios were written for, each checked by putting it back into `src/queue.rs` or the
//! model: the reset's flush outside the routing lock (found at 1); `Settled::publish` storing
//! `done` before `stored_from`, or with `Relaxed`; `Settled::is_implied` loading `stored_from`
//! first; a completion stored for a dropped token; a dropped token's stored completion left in
//! the book. Set `LOOM_MODEL_DEEP=1` to search them to `LOOM_MAX_PREEMPTIONS` too.
//!
//! What the device knows is kept apart from the book, in "truth" atomics that the poller writes
//! with `Relaxed` before it records a completion: a waiter that the book tells a request is done
//! reads its truth with `Relaxed` too, so it sees the poller's write only if the book's own
//! orderings carry it (a `Relaxed` where the protocol needs `Release`/`Acquire` lets loom read
//! the initial value, and the test fails).

use std::collections::VecDeque;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

use super::{Kept, LaneBook, LaneResult, LANE_BIT};
use crate::wc::Completion;

/// The preemption bound of the four-thread scenarios (see the module's documentation).
const FOUR_THREADS_PREEMPTIONS: usize = 2;

/// `loom::model` of `f` with at most [`FOUR_THREADS_PREEMPTIONS`] preemptions, or
/// `LOOM_MAX_PREEMPTIONS` when `LOOM_MODEL_DEEP` is set.
fn model_four_threads<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MODEL_DEEP").is_none() {
        builder.preemption_bound =
            Some(builder.preemption_bound.map_or(FOUR_THREADS_PREEMPTIONS, |b| b.min(FOUR_THREADS_PREEMPTIONS)));
    }
    builder.check(f);
}

/// The QP number the book's synthetic (forced reset) completions carry.
const QP: u32 = 1;
/// Truth of a request: not completed by the device (as far as the poller recorded).
const UNKNOWN: u64 = 0;
const OK: u64 = 1;
const FAILED: u64 = 2;

/// The completion the device produces for lane request `i` (its index from the lane's
/// start): told apart from every other request's, and from the book's synthetic one.
fn device_completion(i: usize) -> Completion {
    Completion::implied(100 + i as u32, 7)
}

/// The device's side of the model: what it has accepted (the CQ entries it will produce, in
/// posting order), behind the lock that every poll takes (the CQ's routing lock), and the truth
/// of each request as the poller recorded it.
struct Device {
    /// (request index, whether it produces a completion, whether that completion is an error).
    cq: Mutex<VecDeque<(usize, bool)>>,
    truth: Vec<AtomicU64>,
}

impl Device {
    fn new(n: usize) -> Self {
        Device { cq: Mutex::new(VecDeque::new()), truth: (0..n).map(|_| AtomicU64::new(UNKNOWN)).collect() }
    }

    fn truth(&self, i: usize) -> u64 {
        self.truth[i].load(Ordering::Relaxed)
    }
}

/// One send-lane request of a scenario: signaled or not, and whether the device fails it (an
/// error always produces a completion, whether signaled or not).
#[derive(Clone, Copy)]
struct Req {
    signaled: bool,
    fails: bool,
}

/// Polls one completion of a send lane off the device's CQ, as `CqShared::route` does under the
/// routing lock: the truth of the request (and of the unsignaled ones before it, which it
/// completes) is written first, then the book records it. False if the CQ was empty.
fn poll_send(book: &LaneBook, dev: &Device, reqs: &[Req]) -> bool {
    let mut cq = dev.cq.lock().unwrap();
    let Some((i, fails)) = cq.pop_front() else {
        return false;
    };
    for j in (0..i).rev() {
        if dev.truth(j) != UNKNOWN {
            break;
        }
        // An unsignaled request before a completion succeeded (had it failed, it would have
        // produced a completion of its own, which comes first).
        assert!(!reqs[j].signaled && !reqs[j].fails);
        dev.truth[j].store(OK, Ordering::Relaxed);
    }
    dev.truth[i].store(if fails { FAILED } else { OK }, Ordering::Relaxed);
    book.complete(LANE_BIT + i as u64, !fails, || (device_completion(i), u32::MAX));
    drop(cq);
    true
}

/// The lane thread: posts `reqs` in order (`posting` before the provider call, `covered` after
/// a signaled one is accepted); the device then has the request. Checks, as the lane's own
/// `check_room` relies on, that `done` never passes `posted`.
fn lane_posts(book: &LaneBook, dev: &Device, reqs: &[Req]) {
    for (i, r) in reqs.iter().enumerate() {
        let seq = book.next();
        assert_eq!(seq, LANE_BIT + i as u64);
        book.posting(seq);
        // The provider call: the device queues the request.
        if r.signaled || r.fails {
            dev.cq.lock().unwrap().push_back((i, r.fails));
        }
        if r.signaled {
            book.covered(seq);
        }
        let done = book.done.load(Ordering::Acquire);
        assert!(done <= book.next(), "done {done:#x} passed posted {:#x}", book.next());
        assert!(book.outstanding() <= i as u64 + 1);
    }
}

/// What a waiter saw of request `i`, checked against the truth the poller wrote before the
/// book recorded it.
fn check_result(book: &LaneBook, dev: &Device, i: usize) -> LaneResult {
    let seq = LANE_BIT + i as u64;
    let done = book.is_done(seq);
    let succeeded = book.succeeded(seq);
    let r = book.result(seq, QP);
    // Each read above is a later look than the one before it: a request seen done stays done,
    // and seen succeeded stays succeeded.
    if done {
        assert_ne!(r, LaneResult::Pending, "request {i} was done, then pending");
    }
    if succeeded {
        assert_eq!(r, LaneResult::Success, "request {i} succeeded, then {r:?}");
    }
    match r {
        LaneResult::Pending => {}
        LaneResult::Success => {
            assert_eq!(dev.truth(i), OK, "request {i} reported a success: not (yet) recorded as one")
        }
        LaneResult::Failed(c) => {
            assert_eq!(dev.truth(i), FAILED, "request {i} reported a failure: not (yet) recorded as one");
            assert_eq!(c, device_completion(i), "request {i} failed with another request's completion");
        }
        // The book keeps every failure here (no bound) and each is looked at once.
        LaneResult::Lost => panic!("request {i} reported gone, with nothing to push its completion out"),
    }
    r
}

/// One lane posting `reqs`, a poller completing them in order (two looks at the CQ), a waiter
/// looking at every request once; then the rest is polled and every request checked.
fn send_lane_scenario(reqs: &'static [Req]) {
    loom::model(move || {
        let book = Arc::new(LaneBook::new());
        let dev = Arc::new(Device::new(reqs.len()));
        let lane = {
            let (book, dev) = (book.clone(), dev.clone());
            thread::spawn(move || lane_posts(&book, &dev, reqs))
        };
        let poller = {
            let (book, dev) = (book.clone(), dev.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    poll_send(&book, &dev, reqs);
                }
            })
        };
        let waiter = {
            let (book, dev) = (book.clone(), dev.clone());
            thread::spawn(move || (0..reqs.len()).map(|i| check_result(&book, &dev, i)).collect::<Vec<_>>())
        };
        lane.join().unwrap();
        poller.join().unwrap();
        let seen = waiter.join().unwrap();
        while poll_send(&book, &dev, reqs) {}
        // Quiet: everything up to the last signaled (or failed) request is complete.
        let last = reqs.iter().rposition(|r| r.signaled || r.fails).map_or(0, |l| l + 1);
        assert_eq!(book.outstanding(), (reqs.len() - last) as u64);
        for (i, r) in reqs.iter().enumerate().take(last) {
            let expect = if r.fails { FAILED } else { OK };
            assert_eq!(dev.truth(i), expect);
            match seen[i] {
                // A failure's completion is handed out once: the waiter took it.
                LaneResult::Failed(_) => {}
                _ => {
                    let again = check_result(&book, &dev, i);
                    assert_ne!(again, LaneResult::Pending);
                }
            }
        }
    });
}

/// All succeed: an unsignaled request completed by the signaled one after it.
#[test]
fn loom_send_lane_successes() {
    static REQS: [Req; 3] = [
        Req { signaled: false, fails: false },
        Req { signaled: true, fails: false },
        Req { signaled: true, fails: false },
    ];
    send_lane_scenario(&REQS);
}

/// An error (its completion kept), then a flush: successes before it stay successes, the
/// failures report their own completions.
#[test]
fn loom_send_lane_with_errors() {
    static REQS: [Req; 3] = [
        Req { signaled: false, fails: false },
        Req { signaled: false, fails: true },
        Req { signaled: true, fails: true },
    ];
    send_lane_scenario(&REQS);
}

/// The receive lane: requests `0..n` posted (all before the poller and the waiter start: the
/// lane's posting is modelled by the send scenarios), a poller that keeps what it polls
/// (`complete_kept`, at most `keep`), and the lane's own wait, which takes what is kept and
/// otherwise polls for itself (`complete_taken`, earlier completions into its own FIFO), as
/// `RecvLane::wait` does. Every completion is handed out at most once, as the device produced it
/// for that request; `Lost` only when more than `keep` were kept after it.
fn recv_lane_scenario(n: usize, keep: usize) {
    loom::model(move || {
        let book = Arc::new(LaneBook::new());
        let dev = Arc::new(Device::new(n));
        for i in 0..n {
            book.posting(LANE_BIT + i as u64);
            dev.cq.lock().unwrap().push_back((i, false));
        }
        // How many completions the poller kept, in order: a request kept as the k-th may be
        // dropped once `k + keep` have been kept.
        let kept_rank: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(u64::MAX)).collect());
        let kept_total = Arc::new(AtomicU64::new(0));
        let poller = {
            let (book, dev, kept_rank, kept_total) = (book.clone(), dev.clone(), kept_rank.clone(), kept_total.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    let mut cq = dev.cq.lock().unwrap();
                    let Some((i, _)) = cq.pop_front() else { break };
                    let k = kept_total.fetch_add(1, Ordering::Relaxed);
                    kept_rank[i].store(k, Ordering::Relaxed);
                    dev.truth[i].store(OK, Ordering::Relaxed);
                    book.complete_kept(LANE_BIT + i as u64, device_completion(i), keep);
                    assert!(super::lock(&book.kept).len() <= keep.max(1), "more than {keep} kept");
                }
            })
        };
        let waiter = {
            let (book, dev, kept_rank, kept_total) = (book.clone(), dev.clone(), kept_rank.clone(), kept_total.clone());
            thread::spawn(move || {
                let mut ready: VecDeque<(usize, Completion)> = VecDeque::new();
                let mut handed = vec![0u32; n];
                for token in 0..n {
                    let seq = LANE_BIT + token as u64;
                    // At most two rounds of the wait's loop per token.
                    for _ in 0..2 {
                        if let Some(p) = ready.iter().position(|&(i, _)| i == token) {
                            let (_, c) = ready.remove(p).unwrap();
                            assert_eq!(c, device_completion(token));
                            handed[token] += 1;
                            break;
                        }
                        match book.take_kept(seq, QP) {
                            Kept::Pending => {}
                            Kept::Done(c) => {
                                assert_eq!(dev.truth(token), OK, "receive {token} handed out before it was recorded");
                                assert_eq!(c, device_completion(token), "receive {token}: another's completion");
                                handed[token] += 1;
                                break;
                            }
                            Kept::Lost => {
                                let rank = kept_rank[token].load(Ordering::Relaxed);
                                assert_ne!(rank, u64::MAX, "receive {token} lost but never kept");
                                assert!(
                                    kept_total.load(Ordering::Relaxed) > rank + keep as u64,
                                    "receive {token} lost with fewer than {keep} kept after it"
                                );
                                break;
                            }
                        }
                        // The wait's own poll (`CqShared::poll_for_recv_lane`).
                        let mut cq = dev.cq.lock().unwrap();
                        if let Some((i, _)) = cq.pop_front() {
                            dev.truth[i].store(OK, Ordering::Relaxed);
                            assert!(book.complete_taken(LANE_BIT + i as u64));
                            ready.push_back((i, device_completion(i)));
                        }
                    }
                }
                handed
            })
        };
        poller.join().unwrap();
        let handed = waiter.join().unwrap();
        for (token, &h) in handed.iter().enumerate() {
            assert!(h <= 1, "receive {token} handed out {h} times");
            if h == 1 {
                // Taken: never handed out again.
                let again = book.take_kept(LANE_BIT + token as u64, QP);
                assert_ne!(again, Kept::Done(device_completion(token)), "receive {token} handed out twice");
            }
        }
        assert!(super::lock(&book.kept).len() <= keep.max(1));
    });
}

/// The store is deep enough: nothing is ever lost.
#[test]
fn loom_recv_lane_keeps_for_the_wait() {
    recv_lane_scenario(3, 3);
}

/// The store holds one: a kept completion may be dropped, and its wait then says so.
#[test]
fn loom_recv_lane_drops_the_oldest() {
    recv_lane_scenario(3, 1);
}

/// A reset after the poller stopped (as `Qp::reset` and the scope's forced flush run when the
/// poller is another QP's wait on a shared CQ that has gone quiet): every request is done, the
/// ones the poller had recorded keep their result, the rest failed with a forced reset; a
/// waiter running beside them never sees a request go back to pending or change its result.
#[test]
fn loom_reset_after_the_poller_completes_everything() {
    static REQS: [Req; 3] = [
        Req { signaled: true, fails: false },
        Req { signaled: true, fails: true },
        Req { signaled: false, fails: false },
    ];
    reset_scenario(&REQS, false);
}

/// A reset (`force_flush`) concurrent with a poller that records a completion of the same lane.
/// `LaneBook::is_stale` relies on completions being recorded one at a time under the CQ's
/// routing lock ("load-then-store is enough"), so the reset's flush takes the same lock
/// (`QpShared::flush_lanes_and_graves`): without it, a poller that passed `is_stale` before the
/// reset stored its `done` after the reset's, moving `done` back below `posted` (the lane's
/// later requests pending again on a reset QP).
#[test]
fn loom_a_completion_racing_a_reset_leaves_everything_done() {
    static REQS: [Req; 3] = [
        Req { signaled: true, fails: false },
        Req { signaled: true, fails: true },
        Req { signaled: false, fails: false },
    ];
    reset_scenario(&REQS, true);
}

/// `reqs` posted; a poller records what the device completed, a waiter looks at every request,
/// and the QP is reset: concurrently with the poller (`racing`), or after it.
fn reset_scenario(reqs: &'static [Req], racing: bool) {
    let model = if racing { model_four_threads } else { loom::model };
    model(move || {
        let book = Arc::new(LaneBook::new());
        let dev = Arc::new(Device::new(reqs.len()));
        lane_posts(&book, &dev, reqs);
        let reset_done = Arc::new(AtomicU64::new(0));
        let poller = {
            let (book, dev) = (book.clone(), dev.clone());
            thread::spawn(move || while poll_send(&book, &dev, reqs) {})
        };
        let reset = {
            let (book, dev, reset_done) = (book.clone(), dev.clone(), reset_done.clone());
            move || {
                // Under the routing lock, as `QpShared::flush_lanes_and_graves` flushes. The
                // reset is announced before the flush: a waiter that sees the flush's failures
                // (its `done`, a Release store after this) sees the announcement.
                let routing = dev.cq.lock().unwrap();
                reset_done.store(1, Ordering::Release);
                book.force_flush();
                drop(routing);
            }
        };
        let (poller, resetter) = if racing {
            (Some(poller), Some(thread::spawn(reset.clone())))
        } else {
            poller.join().unwrap();
            (None, None)
        };
        let waiter = {
            let (book, dev, reset_done) = (book.clone(), dev.clone(), reset_done.clone());
            thread::spawn(move || {
                let mut seen = Vec::new();
                for i in 0..reqs.len() {
                    let seq = LANE_BIT + i as u64;
                    let done = book.is_done(seq);
                    let succeeded = book.succeeded(seq);
                    if succeeded {
                        assert_eq!(dev.truth(i), OK, "request {i}: success before the poller recorded it");
                    }
                    if done && !succeeded {
                        // Failed: by its own error (recorded), or by the reset.
                        let truth = dev.truth(i);
                        assert!(
                            truth == FAILED || reset_done.load(Ordering::Acquire) == 1 || truth == UNKNOWN,
                            "request {i} failed, truth {truth}"
                        );
                    }
                    seen.push((done, succeeded));
                }
                seen
            })
        };
        if let (Some(poller), Some(resetter)) = (poller, resetter) {
            poller.join().unwrap();
            resetter.join().unwrap();
        } else {
            reset();
        }
        let seen = waiter.join().unwrap();
        // After the reset: nothing outstanding, everything done.
        assert_eq!(book.outstanding(), 0, "requests outstanding after a reset");
        for (i, &(done, succeeded)) in seen.iter().enumerate() {
            let seq = LANE_BIT + i as u64;
            assert!(book.is_done(seq), "request {i} pending after a reset");
            // What the waiter saw stays true.
            assert!(!done || book.is_done(seq));
            if succeeded {
                assert!(book.succeeded(seq), "request {i} succeeded, then failed");
            }
            match book.result(seq, QP) {
                LaneResult::Pending => unreachable!(),
                LaneResult::Success => assert_eq!(dev.truth(i), OK),
                LaneResult::Failed(c) if c == device_completion(i) => assert_eq!(dev.truth(i), FAILED),
                // A forced reset's: the poller had not recorded it (or recorded it as part of a
                // run that the reset overtook); never a recorded success seen as such.
                LaneResult::Failed(c) => {
                    assert_eq!(c, Completion::forced_reset(QP));
                    assert!(!succeeded);
                }
                LaneResult::Lost => panic!("request {i} reported gone: a recorded failure is kept, and read once"),
            }
        }
    });
}

/// The send queue's book read without its lock ([`super::Settled`]): requests 0 (unsignaled),
/// 1 (signaled, fails: its error completion is stored), 2 (unsignaled) and 3 (signaled) are
/// posted; a poller records the completions of 1 and 3 (each also completing the requests
/// before it); two waiters, each holding two of the tokens, take their results as
/// `Scope::wait` does (`TrackedQueue::try_take`, the lock-free implied case first), and a
/// third thread optionally resets the queue meanwhile (`flush_book`). A stored completion is
/// handed to its token, never an implied success in its place; an implied success goes only
/// to requests that have no completion of their own.
fn settled_scenario(reset: bool) {
    let model = if reset { model_four_threads } else { loom::model };
    model(move || {
        let q = Arc::new(super::TrackedQueue::new(8, Some(QP)));
        {
            let mut book = q.lock();
            for signaled in [false, true, false, true] {
                book.push_owned(signaled, 0);
            }
        }
        let failed = device_completion(1);
        let ok = device_completion(3);
        let poller = {
            let q = q.clone();
            thread::spawn(move || {
                q.complete(1, failed);
                q.complete(3, ok);
            })
        };
        let resetter = reset.then(|| {
            let q = q.clone();
            thread::spawn(move || {
                let mut book = q.lock();
                q.flush_book(&mut book, QP);
            })
        });
        // One look each while the others run (no spinning: loom explores every order); what
        // is still pending is taken once everything has run.
        let look = |q: &super::TrackedQueue, seq: u64| match q.try_take(seq) {
            super::Take::Done(c) => Some(c),
            super::Take::Pending => None,
            super::Take::Unknown => panic!("request {seq} unknown"),
        };
        let waiter = {
            let q = q.clone();
            thread::spawn(move || (look(&q, 1), look(&q, 2)))
        };
        let (c0, c3) = (look(&q, 0), look(&q, 3));
        let (c1, c2) = waiter.join().unwrap();
        poller.join().unwrap();
        if let Some(r) = resetter {
            r.join().unwrap();
        }
        let last = |c: Option<Completion>, seq: u64| c.or_else(|| look(&q, seq)).expect("complete after the poller");
        let (c0, c1, c2, c3) = (last(c0, 0), last(c1, 1), last(c2, 2), last(c3, 3));
        let implied = Completion::implied(QP, u32::MAX);
        let flushed = Completion::forced_reset(QP);
        // Request 1's own completion (the error), or the reset's if it came first; never an
        // implied success.
        assert!(c1 == failed || (reset && c1 == flushed), "request 1: {c1:?}");
        assert!(c3 == ok || (reset && c3 == flushed), "request 3: {c3:?}");
        // The unsignaled ones: implied by a later completion, or flushed by the reset.
        assert!(c0 == implied || (reset && c0 == flushed), "request 0: {c0:?}");
        assert!(c2 == implied || (reset && c2 == flushed), "request 2: {c2:?}");
        assert_eq!(q.outstanding(), 0);
    });
}

#[test]
fn loom_settled_send_book() {
    settled_scenario(false);
}

#[test]
fn loom_settled_send_book_with_a_reset() {
    settled_scenario(true);
}

/// The lock-free collection against a dropped token: a token given up while its stored error
/// is in the book (`abandon` removes the first stored completion or a middle one, and
/// `stored_from` jumps) races the poller, a waiter whose own error is stored and one on an
/// unsignaled request after it. Requests: 0 signaled and failing, 1 unsignaled, 2 signaled and
/// failing, 3 unsignaled, 4 signaled. `dropped` (0 or 2) is abandoned by a third thread; the
/// waiter looks at the other failing request and at 3, the main thread at 1 and 4, each as the
/// waits do (`implied`, then `try_take_locked`).
fn settled_abandon_scenario(dropped: u64) {
    model_four_threads(move || {
        let q = Arc::new(super::TrackedQueue::new(8, Some(QP)));
        {
            let mut book = q.lock();
            for signaled in [true, false, true, false, true] {
                book.push_owned(signaled, 0);
            }
        }
        let (e0, e2, ok) = (device_completion(0), device_completion(2), device_completion(4));
        let kept = 2 - dropped;
        let poller = {
            let q = q.clone();
            thread::spawn(move || {
                q.complete(0, e0);
                q.complete(2, e2);
                q.complete(4, ok);
            })
        };
        let dropper = {
            let q = q.clone();
            thread::spawn(move || q.abandon(dropped))
        };
        let look = |q: &super::TrackedQueue, seq: u64| {
            if let Some(c) = q.implied(seq) {
                return Some(c);
            }
            match q.try_take_locked(seq) {
                super::Take::Done(c) => Some(c),
                super::Take::Pending => None,
                super::Take::Unknown => panic!("request {seq} unknown"),
            }
        };
        let waiter = {
            let q = q.clone();
            thread::spawn(move || (look(&q, kept), look(&q, 3)))
        };
        let (c1, c4) = (look(&q, 1), look(&q, 4));
        let (ck, c3) = waiter.join().unwrap();
        poller.join().unwrap();
        dropper.join().unwrap();
        let last = |c: Option<Completion>, seq: u64| c.or_else(|| look(&q, seq)).expect("complete after the poller");
        let (c1, c3, c4, ck) = (last(c1, 1), last(c3, 3), last(c4, 4), last(ck, kept));
        let implied = Completion::implied(QP, u32::MAX);
        let want_k = if kept == 0 { e0 } else { e2 };
        assert_eq!(ck, want_k, "request {kept}: its stored error");
        assert_eq!(c4, ok, "request 4");
        assert_eq!(c1, implied, "request 1");
        assert_eq!(c3, implied, "request 3");
        assert_eq!(q.outstanding(), 0);
        assert_eq!(q.lock().as_send().map(|b| b.results.len()), Some(0), "a result left behind");
    });
}

#[test]
fn loom_settled_send_book_with_the_first_stored_completion_abandoned() {
    settled_abandon_scenario(0);
}

#[test]
fn loom_settled_send_book_with_a_middle_stored_completion_abandoned() {
    settled_abandon_scenario(2);
}

/// A token dropped (its buffers released to the queue, then its completion abandoned) while a
/// poller records its request's completion: in every order, nothing stays parked once both are
/// done. (A poll that read the graves' count before the release stored it released nothing; the
/// release looks at the request again after storing the count.)
#[test]
fn loom_a_token_dropped_while_its_request_completes_leaves_nothing_parked() {
    loom::model(|| {
        let q = Arc::new(super::TrackedQueue::new(8, Some(QP)));
        q.lock().push_owned(true, 0);
        let poller = {
            let q = q.clone();
            thread::spawn(move || q.complete(0, device_completion(0)))
        };
        q.release(0, Box::new([0u8; 8]));
        q.abandon(0);
        poller.join().unwrap();
        assert_eq!(q.parked(), 0, "the buffers of a dropped token stayed parked after its completion");
    });
}
