//! Model-based property tests of the sequence arithmetic of [`WorkQueue`] and [`LaneBook`]
//! (single-threaded; the concurrent protocol is `loom_model`'s). Each test drives the book and
//! an independent model (one record per request: what the device did with it, and what the
//! program has taken) with random operations from the deterministic [`Rng`], and compares every
//! answer of the book with the model's.

use super::{Book, Kept, LaneBook, LaneResult, SendBook, Take, TrackedQueue, WorkQueue, LANE_BIT};
use crate::test_util::Rng;
use crate::wc::{Completion, CompletionSource};

/// The completion the device produces for request `i`: told apart from every other request's
/// (by its byte count) and from the book's synthetic ones (implied: opcode `u32::MAX`; forced
/// reset).
fn own(i: usize) -> Completion {
    let mut c = Completion::implied(QP, 7);
    c.byte_len = i as u32;
    c.source = CompletionSource::Own;
    c
}

const QP: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq)]
enum St {
    /// Not completed (the device may have executed it, nothing reported it yet).
    Pending,
    /// Complete, result not taken: with the completion the program will get.
    Done(Completion),
    /// Result taken, or abandoned and complete: the book no longer knows it.
    Gone,
}

#[derive(Debug, Clone, Copy)]
struct Req {
    /// A completion of its own will come (signaled send, accepted receive).
    covered: bool,
    abandoned: bool,
    owner: u64,
    st: St,
}

/// The work queue model: requests in posting order from 0.
struct Model {
    depth: u32,
    send: bool,
    reqs: Vec<Req>,
    /// The device has executed the requests below this (in order); the rest are queued on it.
    executed: usize,
}

impl Model {
    fn pending(&self) -> usize {
        self.reqs.iter().filter(|r| r.st == St::Pending).count()
    }

    /// Unsignaled requests at the tail of the send queue (since the last signaled one).
    fn tail_run(&self) -> u32 {
        self.reqs.iter().rev().take_while(|r| !r.covered).count() as u32
    }

    /// The request's completion arrives: it completes with it (and, on a send queue, every
    /// request before it that is still pending completes too, successfully, with a completion
    /// of the same QP that says it was implied by a later one).
    fn complete(&mut self, i: usize) {
        let implied = Completion::implied(QP, u32::MAX);
        let from = if self.send { 0 } else { i };
        for (j, r) in self.reqs.iter_mut().enumerate().take(i + 1).skip(from) {
            if r.st == St::Pending {
                r.st = match (r.abandoned, j == i) {
                    (true, _) => St::Gone,
                    (false, true) => St::Done(own(i)),
                    (false, false) => St::Done(implied),
                };
            }
        }
    }

    /// The token of request `i` is given up: a pending request's completion will not be kept,
    /// a complete one's is dropped.
    fn abandon(&mut self, i: usize) {
        let r = &mut self.reqs[i];
        match r.st {
            St::Pending => r.abandoned = true,
            St::Done(_) => r.st = St::Gone,
            St::Gone => {}
        }
    }

    /// A forced reset: every pending request completes with a synthetic flush (kept unless its
    /// token was given up), and the device has nothing left to execute.
    fn reset(&mut self) {
        for r in &mut self.reqs {
            if r.st == St::Pending {
                r.st = if r.abandoned { St::Gone } else { St::Done(Completion::forced_reset(QP)) };
            }
        }
        self.executed = self.reqs.len();
    }

    fn uncovered(&self) -> bool {
        let mut pending = self.reqs.iter().filter(|r| r.st == St::Pending);
        if self.send {
            pending.next_back().is_some_and(|r| !r.covered)
        } else {
            pending.any(|r| !r.covered)
        }
    }
}

/// Checks every query of `q` against the model.
fn check(q: &Book, m: &Model, ctx: &str) {
    let pending = m.pending();
    assert_eq!(q.outstanding() as usize, pending, "{ctx}: outstanding");
    assert!(q.outstanding() <= m.depth, "{ctx}: over depth");
    // Room exactly while fewer than `depth` are pending; the next number is the next index.
    let expect_next = (pending < m.depth as usize).then_some(m.reqs.len() as u64);
    assert_eq!(q.next_seq(), expect_next, "{ctx}: next_seq");
    for n in 0..=3usize {
        assert_eq!(q.room_for(n), pending + n <= m.depth as usize, "{ctx}: room_for({n})");
    }
    assert_eq!(q.has_uncovered(), m.uncovered(), "{ctx}: has_uncovered");
    // The count of held results a receive book publishes: its slots and set-aside completions,
    // and the model's complete requests whose results nobody took yet.
    if let Book::Recv(w) = q {
        let (held, counted) = w.held_counted();
        assert_eq!(held, counted, "{ctx}: held, counted from the slots");
        let done = m.reqs.iter().filter(|r| matches!(r.st, St::Done(_))).count();
        assert_eq!(held, done, "{ctx}: held, the model's");
    }
    for (i, r) in m.reqs.iter().enumerate() {
        assert_eq!(q.is_pending(i as u64), r.st == St::Pending, "{ctx}: is_pending({i})");
    }
    for owner in 0..3 {
        // A send queue's book keeps nothing for a request that completed without a completion
        // of its own (its token gets an implied one): only what is pending or stored.
        let kept = |st: St| match st {
            St::Gone => false,
            St::Done(c) => !m.send || c.source() != CompletionSource::ImpliedByLater,
            St::Pending => true,
        };
        let expect: Vec<u64> =
            (0..m.reqs.len()).filter(|&i| m.reqs[i].owner == owner && kept(m.reqs[i].st)).map(|i| i as u64).collect();
        assert_eq!(q.owned_by(owner), expect, "{ctx}: owned_by({owner})");
    }
}

fn work_queue_matches_the_model(send: bool) {
    for seed in 1..300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let depth = 1 + rng.below(9) as u32;
        let half = (depth / 2).max(1);
        let mut q = if send { Book::Send(SendBook::new(depth, QP)) } else { Book::Recv(WorkQueue::new(depth)) };
        let mut m = Model { depth, send, reqs: Vec::new(), executed: 0 };
        let mut longest_run = 0;
        for step in 0..300 {
            let ctx = format!("seed {seed} step {step} depth {depth}");
            match rng.below(10) {
                // Post, signaled or not; the library's rule for an unsignaled one first. A
                // refused post that may have been queued is recorded uncovered, like an
                // unsignaled one.
                0..=3 => {
                    let Some(seq) = q.next_seq() else { continue };
                    let ahead = rng.below(3) as u32;
                    let must = q.must_signal(ahead);
                    // Must signal exactly when, unsignaled, it would make the run of
                    // unsignaled requests (with the `ahead` before it) reach half the depth.
                    // (Receives are never unsignaled: false.)
                    assert_eq!(must, send && m.tail_run() + ahead + 1 >= half, "{ctx}: must_signal({ahead})");
                    let covered = if send { q.must_signal(0) || rng.below(3) == 0 } else { rng.below(6) != 0 };
                    let owner = rng.below(3);
                    assert_eq!(q.push_owned(covered, owner), seq, "{ctx}: numbers are consecutive");
                    m.reqs.push(Req { covered, abandoned: false, owner, st: St::Pending });
                    if send {
                        longest_run = longest_run.max(m.tail_run());
                    }
                }
                // The device executes the next queued request; its completion comes if it is
                // covered, or if it is an unsignaled send that failed (an error always has a
                // completion of its own, a flush too). (A receive queue's uncovered request was
                // never queued: skipped.) Half the time a receive's completion is polled by the
                // wait of its own token, which takes it at once (`WorkQueue::complete_taken`);
                // refused for a token given up, whose completion is then recorded as usual.
                4..=5 => {
                    if m.executed < m.reqs.len() {
                        let i = m.executed;
                        m.executed += 1;
                        if m.reqs[i].covered || (send && rng.below(4) == 0) {
                            let taken = match &mut q {
                                Book::Recv(w) if rng.below(2) == 0 => {
                                    let taken = w.complete_taken(i as u64);
                                    assert_eq!(taken, !m.reqs[i].abandoned, "{ctx}: complete_taken({i})");
                                    taken
                                }
                                _ => false,
                            };
                            if !taken {
                                assert!(q.complete(i as u64, own(i)), "{ctx}: completion of {i} refused");
                            }
                            m.complete(i);
                            if taken {
                                m.reqs[i].st = St::Gone;
                            }
                        }
                    }
                }
                // A stale or foreign completion: refused, nothing changes (also when the wait of
                // a receive's token polls it).
                6 => {
                    let i = rng.below(m.reqs.len() as u64 + 3) as usize;
                    if i >= m.reqs.len() || m.reqs[i].st != St::Pending {
                        if let Book::Recv(w) = &mut q {
                            assert!(!w.complete_taken(i as u64), "{ctx}: stale completion {i} taken by a wait");
                        }
                        assert!(!q.complete(i as u64, own(i)), "{ctx}: stale completion {i} taken");
                    }
                }
                7 => {
                    let i = rng.below(m.reqs.len() as u64 + 2) as usize;
                    // A send queue's result is taken by the one token that holds its number,
                    // which the taking consumes (and a given-up token is gone): never twice.
                    if send && m.reqs.get(i).is_some_and(|r| r.st == St::Gone || r.abandoned) {
                        continue;
                    }
                    let expect = match m.reqs.get(i).map(|r| r.st) {
                        None | Some(St::Gone) => Take::Unknown,
                        Some(St::Pending) => Take::Pending,
                        Some(St::Done(c)) => {
                            m.reqs[i].st = St::Gone;
                            Take::Done(c)
                        }
                    };
                    assert_eq!(q.try_take(i as u64), expect, "{ctx}: try_take({i})");
                }
                8 => {
                    if let Some(i) = (!m.reqs.is_empty()).then(|| rng.below(m.reqs.len() as u64) as usize) {
                        q.abandon(i as u64);
                        m.abandon(i);
                    }
                }
                // A reset: rarely.
                _ => {
                    if rng.below(4) == 0 {
                        q.force_flush(QP);
                        m.reset();
                    }
                }
            }
            check(&q, &m, &ctx);
        }
        if send {
            assert!(longest_run < half, "seed {seed}: a run of {longest_run} unsignaled requests, depth {depth}");
        }
    }
}

#[test]
fn send_queue_arithmetic_matches_a_model() {
    work_queue_matches_the_model(true);
}

#[test]
fn receive_queue_arithmetic_matches_a_model() {
    work_queue_matches_the_model(false);
}

/// A send queue's book behind its [`TrackedQueue`], driven through the methods the library
/// calls (a post under the lock, `complete`, `try_take`, `abandon`, a reset's flush), with the
/// lock-free `implied` asked at every step for every request a token still holds: it must hand
/// over a completion only for a request that is complete with none of its own stored (never
/// for a pending one, whose memory the device may still use, nor for one whose error, flush
/// or forced reset is stored), and then the model's implied success. (The concurrent protocol
/// is `loom_model`'s `loom_settled_*`.)
#[test]
fn the_lock_free_take_of_a_send_queue_matches_the_model() {
    for seed in 1..300u64 {
        let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
        let depth = 1 + rng.below(9) as u32;
        let q = TrackedQueue::new(depth, Some(QP));
        let mut m = Model { depth, send: true, reqs: Vec::new(), executed: 0 };
        for step in 0..300 {
            let ctx = format!("seed {seed} step {step} depth {depth}");
            match rng.below(10) {
                0..=3 => {
                    let mut book = q.lock();
                    let Some(seq) = book.next_seq() else { continue };
                    let covered = book.must_signal(0) || rng.below(3) == 0;
                    let owner = rng.below(3);
                    assert_eq!(book.push_owned(covered, owner), seq, "{ctx}: numbers are consecutive");
                    drop(book);
                    m.reqs.push(Req { covered, abandoned: false, owner, st: St::Pending });
                }
                // The device executes the next request: a signaled one reports it, an unsignaled
                // one only when it fails. Half the time the poll is the wait of the request's own
                // token, which takes the completion at once (`complete_taken`); refused for a
                // token given up, whose completion the poll then records as usual.
                4..=5 => {
                    if m.executed < m.reqs.len() {
                        let i = m.executed;
                        m.executed += 1;
                        if m.reqs[i].covered || rng.below(4) == 0 {
                            if rng.below(2) == 0 {
                                let taken = q.complete_taken(i as u64);
                                assert_eq!(taken, !m.reqs[i].abandoned, "{ctx}: complete_taken({i})");
                                if !taken {
                                    q.complete(i as u64, own(i));
                                }
                                m.complete(i);
                                if taken {
                                    m.reqs[i].st = St::Gone;
                                }
                            } else {
                                q.complete(i as u64, own(i));
                                m.complete(i);
                            }
                        }
                    }
                }
                // A stale or unknown completion changes nothing (`check` below), whether a wait
                // or a routing poll finds it.
                6 => {
                    let i = rng.below(m.reqs.len() as u64 + 3) as usize;
                    if i >= m.reqs.len() || m.reqs[i].st != St::Pending {
                        assert!(!q.complete_taken(i as u64), "{ctx}: stale completion {i} taken by a wait");
                        q.complete(i as u64, own(i));
                    }
                }
                // A token takes its result: at most once, never after it was given up.
                7 => {
                    let i = rng.below(m.reqs.len() as u64 + 2) as usize;
                    if m.reqs.get(i).is_none_or(|r| r.st == St::Gone || r.abandoned) {
                        continue;
                    }
                    let expect = match m.reqs[i].st {
                        St::Pending => Take::Pending,
                        St::Done(c) => {
                            m.reqs[i].st = St::Gone;
                            Take::Done(c)
                        }
                        St::Gone => unreachable!("skipped above"),
                    };
                    assert_eq!(q.try_take(i as u64), expect, "{ctx}: try_take({i})");
                }
                // A token is given up (dropped or leaked).
                8 => {
                    if let Some(i) = (!m.reqs.is_empty()).then(|| rng.below(m.reqs.len() as u64) as usize) {
                        if m.reqs[i].st == St::Gone {
                            continue;
                        }
                        q.abandon(i as u64);
                        m.abandon(i);
                    }
                }
                _ => {
                    if rng.below(4) == 0 {
                        q.force_flush(QP);
                        m.reset();
                    }
                }
            }
            check(&q.lock(), &m, &ctx);
            // Whether a completion of its own is stored for a request before the one asked
            // about: the lock-free take covers only the requests below the first stored one
            // (the others take the lock, `try_take_locked`).
            let mut stored_before = false;
            for (i, r) in m.reqs.iter().enumerate() {
                let implied = match r.st {
                    St::Done(c) if c.source() == CompletionSource::ImpliedByLater => Some(c),
                    _ => None,
                };
                if !r.abandoned && r.st != St::Gone {
                    let got = q.implied(i as u64);
                    // Sound: an implied success only where the model has one.
                    if got.is_some() {
                        assert_eq!(got, implied, "{ctx}: implied({i}), the model says {:?}", r.st);
                    }
                    // Complete: every implied success below the first stored completion.
                    if implied.is_some() && !stored_before {
                        assert_eq!(got, implied, "{ctx}: implied({i}) missed, nothing stored before it");
                    }
                }
                stored_before |= matches!(r.st, St::Done(_)) && implied.is_none();
            }
        }
    }
}

/// A lane request in the lane book's model.
#[derive(Debug, Clone, Copy, PartialEq)]
enum L {
    Pending,
    Ok,
    /// Failed with this completion; `None`: completed by a reset, without one.
    Failed(Option<Completion>),
    /// Receive lane: complete, its completion kept (or dropped from the store, `None`).
    Kept(Option<Completion>),
    /// Result handed out.
    Taken,
}

/// Send and receive lanes: random posts (signaled or not), in-order completions (errors on a
/// send lane; kept, or taken by the wait, on a receive lane), stale and foreign numbers, waits,
/// resets and re-opens, against a model of each request.
fn lane_book_matches_the_model(send: bool) {
    for seed in 1..300u64 {
        let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
        let depth = 1 + rng.below(6) as usize;
        let keep = 1 + rng.below(3) as usize;
        let book = LaneBook::new();
        // Requests of the book from `base` on (a re-open starts a new lane at `posted`).
        let mut base = LANE_BIT;
        let mut reqs: Vec<(bool, L)> = Vec::new(); // (signaled, state)
        let mut executed = 0usize;
        // Kept completions of a receive lane, in the order kept (the oldest is dropped first).
        let mut store: Vec<usize> = Vec::new();
        // A send lane's error puts the QP in error: every later request fails (flushes).
        let mut in_error = false;
        // After a reset nothing is posted or completed until a new lane opens.
        let mut reset = false;
        for step in 0..200 {
            let ctx = format!("seed {seed} step {step} send {send} depth {depth} keep {keep}");
            let outstanding = reqs.iter().filter(|r| r.1 == L::Pending).count();
            match rng.below(9) {
                0..=2 if outstanding < depth && !reset => {
                    let seq = book.next();
                    assert_eq!(seq, base + reqs.len() as u64, "{ctx}: next");
                    let signaled = !send || rng.below(2) == 0;
                    book.posting(seq);
                    if signaled {
                        book.covered(seq);
                    }
                    reqs.push((signaled, L::Pending));
                }
                // The device completes the next request (in order).
                3..=4 if executed < reqs.len() => {
                    let i = executed;
                    executed += 1;
                    let seq = base + i as u64;
                    let fails = in_error || rng.below(5) == 0;
                    in_error |= fails && send;
                    if send {
                        // An unsignaled request that succeeded reports nothing (a later one
                        // implies it); a failure always reports.
                        if reqs[i].0 || fails {
                            // (Kept without a bound here: the bound is `lane_drain_attack_tests`'.)
                            book.complete(seq, !fails, || (own(i), u32::MAX));
                            for r in &mut reqs[..i] {
                                if r.1 == L::Pending {
                                    r.1 = L::Ok;
                                }
                            }
                            reqs[i].1 = if fails { L::Failed(Some(own(i))) } else { L::Ok };
                        }
                    } else if rng.below(2) == 0 {
                        // Another poller keeps it for the wait.
                        book.complete_kept(seq, own(i), keep);
                        if store.len() >= keep {
                            let oldest = store.remove(0);
                            reqs[oldest].1 = L::Kept(None);
                        }
                        store.push(i);
                        reqs[i].1 = L::Kept(Some(own(i)));
                    } else {
                        // The wait's own poll takes it.
                        assert!(book.complete_taken(seq), "{ctx}: complete_taken({i})");
                        reqs[i].1 = L::Taken;
                    }
                }
                // Stale or never-posted numbers change nothing.
                5 => {
                    let before = snapshot(&book);
                    let done = reqs.iter().position(|r| r.1 == L::Pending).unwrap_or(reqs.len());
                    let seq = if rng.below(2) == 0 && done > 0 {
                        base + rng.below(done as u64)
                    } else {
                        base + reqs.len() as u64 + rng.below(3)
                    };
                    if send {
                        // A wait's own completion is a posted request's (a token's number).
                        if rng.below(2) == 0 || seq >= base + reqs.len() as u64 {
                            book.complete(seq, rng.below(2) == 0, || (own(99), u32::MAX));
                        } else {
                            assert!(!book.complete_awaited(seq), "{ctx}: stale {seq} answers no wait");
                        }
                    } else if rng.below(2) == 0 {
                        book.complete_kept(seq, own(99), keep);
                    } else {
                        assert!(!book.complete_taken(seq), "{ctx}: stale complete_taken");
                    }
                    assert_eq!(snapshot(&book), before, "{ctx}: stale number {seq:#x} changed the book");
                }
                // A wait looks at a request.
                6..=7 if !reqs.is_empty() => {
                    let i = rng.below(reqs.len() as u64) as usize;
                    let seq = base + i as u64;
                    let st = reqs[i].1;
                    assert_eq!(book.is_done(seq), st != L::Pending, "{ctx}: is_done({i})");
                    if send {
                        let expect = match st {
                            L::Pending => LaneResult::Pending,
                            L::Ok => LaneResult::Success,
                            L::Failed(Some(c)) => {
                                reqs[i].1 = L::Taken;
                                LaneResult::Failed(c)
                            }
                            // Completed by the reset, without a completion: a synthetic flush,
                            // each time it is asked.
                            L::Failed(None) => LaneResult::Failed(Completion::forced_reset(QP)),
                            // Its completion was handed out: gone, not invented.
                            L::Taken => LaneResult::Lost,
                            L::Kept(_) => unreachable!(),
                        };
                        assert_eq!(book.succeeded(seq), st == L::Ok, "{ctx}: succeeded({i})");
                        assert_eq!(book.result(seq, QP), expect, "{ctx}: result({i})");
                    } else {
                        let expect = match st {
                            L::Pending => Kept::Pending,
                            L::Kept(Some(c)) => Kept::Done(c),
                            // Completed by the reset, without a completion: a synthetic flush, each
                            // time it is asked.
                            L::Failed(_) => Kept::Done(Completion::forced_reset(QP)),
                            L::Kept(None) | L::Taken => Kept::Lost,
                            L::Ok => unreachable!(),
                        };
                        if let L::Kept(Some(_)) = st {
                            reqs[i].1 = L::Taken;
                            store.retain(|&k| k != i);
                        }
                        assert_eq!(book.take_kept(seq, QP), expect, "{ctx}: take_kept({i})");
                    }
                }
                // A reset: what had not completed failed, without a completion of its own.
                8 if rng.below(3) == 0 => {
                    book.force_flush();
                    for r in &mut reqs {
                        if r.1 == L::Pending {
                            r.1 = L::Failed(None);
                        }
                    }
                    executed = reqs.len();
                    reset = true;
                }
                _ => {
                    // A new lane opens once nothing is outstanding (after a reset, or when all
                    // completed); refused while something is.
                    if outstanding > 0 {
                        assert_eq!(book.open(), None, "{ctx}: open with {outstanding} outstanding");
                    } else if reset || rng.below(4) == 0 {
                        let next = book.open();
                        assert_eq!(next, Some(base + reqs.len() as u64), "{ctx}: open");
                        base = next.unwrap();
                        reqs.clear();
                        store.clear();
                        (executed, in_error, reset) = (0, false, false);
                    }
                }
            }
            let outstanding = reqs.iter().filter(|r| r.1 == L::Pending).count();
            assert_eq!(book.outstanding(), outstanding as u64, "{ctx}: outstanding");
            if send {
                // Uncovered: something outstanding after the last signaled request.
                let last_signaled = reqs.iter().rposition(|r| r.0);
                let uncovered =
                    reqs.iter().enumerate().any(|(i, r)| r.1 == L::Pending && last_signaled.is_none_or(|l| i > l));
                assert_eq!(book.has_uncovered_tail(), uncovered, "{ctx}: has_uncovered_tail");
            }
            if !send {
                let kept = super::lock(&book.kept).len();
                assert!(kept <= keep, "{ctx}: {kept} kept");
            }
        }
    }
}

/// What a stale completion must not change.
fn snapshot(book: &LaneBook) -> (u64, u64, u64, u64, Vec<(u64, Completion)>) {
    use super::Ordering::Relaxed;
    let kept = super::lock(&book.kept).clone();
    (
        book.posted.load(Relaxed),
        book.done.load(Relaxed),
        book.covered.load(Relaxed),
        book.first_error.load(Relaxed),
        kept,
    )
}

#[test]
fn send_lane_arithmetic_matches_a_model() {
    lane_book_matches_the_model(true);
}

#[test]
fn receive_lane_arithmetic_matches_a_model() {
    lane_book_matches_the_model(false);
}
