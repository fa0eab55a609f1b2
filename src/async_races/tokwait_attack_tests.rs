//! Attacks on the token waits' hot paths: the poll of the CQ before the book is read (scope,
//! owned and awaited tokens), the receive books' pop of a front slot taken, and the awaited
//! token's inline first poll. Over the fake device of `async_races`.

use super::*;
use crate::queue::{Take, TrackedQueue};
use crate::test_util::Rng;
use crate::wc::Completion;

struct Watched {
    device_done: Arc<AtomicBool>,
    early: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
    seq: u64,
}

fn watched_recv(qp: &Arc<QpShared>) -> (OwnedToken<Watch>, Watched) {
    let seq = qp.rq.lock().push(true);
    let (device_done, early, drops) = Default::default();
    let w = Watch { device_done: Arc::clone(&device_done), early: Arc::clone(&early), drops: Arc::clone(&drops) };
    (OwnedToken::new(QueueArc::Recv(Arc::clone(qp)), seq, w, None), Watched { device_done, early, drops, seq })
}

type WOut = <OwnedCompletion<Watch> as Future>::Output;
fn wpoll(f: &mut OwnedCompletion<Watch>, w: &Waker) -> Poll<WOut> {
    Pin::new(f).poll(&mut Cx::from_waker(w))
}

/// A receive completion whose byte count tells the request apart.
fn recv_wc_len(qp_num: u32, seq: u64, len: u32) -> sys::ibv_wc {
    sys::ibv_wc { byte_len: len, ..recv_wc(qp_num, seq, sys::IBV_WC_SUCCESS) }
}

/// H: a future of `qa`'s first send request, waiting, whose waker panics (its executor is
/// gone).
fn panicking_waiter(qa: &Arc<QpShared>) -> OwnedCompletion<()> {
    let mut h = post_send(qa, true).into_future();
    assert!(poll(&mut h, &Waker::from(Arc::new(PanicWake))).is_pending(), "H waits");
    h
}

// ---------------------------------------------------------------------------------------------
// The waits' polls of the CQ and their reads of the book.
// ---------------------------------------------------------------------------------------------

/// An owned token's completion was routed to the book by another poller; then a completion of
/// another QP, whose future H waits with a waker that panics, lands at the CQ's head. The
/// token's wait has its result in the book: it must hand it over. Polling the CQ first routes
/// H's completion, wakes H, and H's panic unwinds the wait: the token (consumed by `wait`) is
/// dropped during the unwind, its completion abandoned. So the wait reads the book before it
/// polls.
#[test]
fn a_sync_wait_for_a_routed_completion_is_not_cut_short_by_another_futures_panicking_waker() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qa = w.qp(0xb01, 8, &cq, None);
    let qb = w.qp(0xb02, 8, &cq, None);
    let h = panicking_waiter(&qa);
    let t = post_send(&qb, true);
    fake.complete(send_wc(0xb02, 0, sys::IBV_WC_SUCCESS));
    assert_eq!(cq.poll_and_route().expect("routed"), 1, "T's completion is in the book");
    fake.complete(send_wc(0xb01, 0, sys::IBV_WC_SUCCESS)); // H's, at the CQ's head
    let r = quiet(|| t.wait(Duration::from_secs(1)));
    drop(h);
    match r {
        Ok(Ok((c, ()))) => assert!(c.is_success()),
        Ok(Err(e)) => panic!("the wait failed: {}", e.error),
        Err(_) => panic!("the wait for a completion already in the book unwound with H's waker's panic: the completion is lost with the token"),
    }
}

/// The same with a scope token and `Scope::wait`.
#[test]
fn a_scope_wait_for_a_routed_completion_is_not_cut_short_by_another_futures_panicking_waker() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qa = w.qp(0xb03, 8, &cq, None);
    let (qp, shared) = w.rc_qp(0xb04, 8, &cq);
    let h = panicking_waiter(&qa);
    let mut outcome = None;
    let r = scope(|s| {
        let tok = s.post_send(&qp, Write::new(w.local(0x1000, 8), remote())).expect("posted");
        let (seq, _) = *sends(&shared).last().expect("posted");
        fake.complete(send_wc(0xb04, seq, sys::IBV_WC_SUCCESS));
        assert_eq!(cq.poll_and_route().expect("routed"), 1);
        fake.complete(send_wc(0xb03, 0, sys::IBV_WC_SUCCESS)); // H's, at the CQ's head
        outcome = Some(match quiet(|| s.wait(tok, Duration::from_secs(1)).map(|(c, _)| c).map_err(|e| e.error)) {
            Ok(Ok(c)) => Ok(c.is_success()),
            Ok(Err(e)) => Err(format!("the wait failed: {e}")),
            Err(_) => Err("the wait for a completion already in the book unwound with H's waker's panic".to_string()),
        });
    });
    drop(h);
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(outcome.expect("ran"), Ok(true));
}

/// A sync wait whose own poll takes its completion (behind H's) and then unwinds with H's
/// waker's panic: the token, consumed by the wait, is dropped
/// during the unwind. Its buffer is released once, after the device finished (never early);
/// the completion itself goes with the unwind (the book counts it taken).
#[test]
fn a_sync_wait_that_unwinds_after_taking_its_completion_releases_the_buffer_once() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qa = w.qp(0xb16, 8, &cq, None);
    let qb = w.qp(0xb17, 8, &cq, None);
    let h = panicking_waiter(&qa);
    let (tok, watched) = watched_recv(&qb);
    fake.complete(send_wc(0xb16, 0, sys::IBV_WC_SUCCESS));
    watched.device_done.store(true, SeqCst);
    fake.complete(recv_wc_len(0xb17, watched.seq, 9));
    let r = quiet(|| tok.wait(Duration::from_secs(1)).map(|(c, b)| (c.byte_len(), b)).map_err(|e| e.error));
    assert!(r.is_err(), "H's waker's panic comes out of the wait");
    assert_eq!((watched.early.load(SeqCst), watched.drops.load(SeqCst)), (0, 1));
    assert_eq!(qb.rq.try_take(watched.seq), Take::Unknown, "taken by the unwound wait");
    assert_eq!(qb.rq.parked(), 0);
    drop(h);
}

/// The awaited token in the same spot: its first poll (inline) routes H's completion and
/// unwinds with H's panic, but its own completion stays in the book: the next poll hands it
/// over, once, and the future resolves with it.
#[test]
fn an_awaited_token_whose_completion_was_routed_survives_a_panicking_waker_in_its_first_poll() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qa = w.qp(0xb05, 8, &cq, None);
    let qb = w.qp(0xb06, 8, &cq, None);
    let h = panicking_waiter(&qa);
    let (tok, watched) = watched_recv(&qb);
    watched.device_done.store(true, SeqCst);
    fake.complete(recv_wc_len(0xb06, watched.seq, 77));
    assert_eq!(cq.poll_and_route().expect("routed"), 1);
    fake.complete(send_wc(0xb05, 0, sys::IBV_WC_SUCCESS));
    let mut f = tok.into_future();
    let wakes = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let first = quiet(|| wpoll(&mut f, &waker));
    let c = match first {
        Ok(Poll::Ready(Ok((c, b)))) => {
            drop(b);
            c
        }
        Err(_) => match wpoll(&mut f, &waker) {
            Poll::Ready(Ok((c, b))) => {
                drop(b);
                c
            }
            Poll::Ready(Err(e)) => panic!("{}", e.error),
            Poll::Pending => panic!("the completion in the book was not handed over after the unwind"),
        },
        Ok(other) => panic!("{:?}", other.map(|r| r.map(|(c, _)| c).map_err(|e| e.error))),
    };
    assert_eq!(c.byte_len(), 77);
    assert_eq!(watched.early.load(SeqCst), 0);
    assert_eq!(watched.drops.load(SeqCst), 1);
    assert_eq!(qb.rq.try_take(watched.seq), Take::Unknown, "taken once");
    assert_eq!(cq.waiters.load(SeqCst), 1, "only H still counts itself a waiter");
    drop(h);
    assert_eq!(cq.waiters.load(SeqCst), 0);
}

/// A receive queue's completion routed to the book, then the fake's next poll fails: the
/// owned wait, the awaited token's first poll and the scope's wait each hand it over (as
/// `attack_tests` checks for a send queue): each reads a receive's book before it polls.
#[test]
fn a_receive_wait_for_a_routed_completion_is_not_hidden_by_a_failed_poll() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xb07, 8, &cq);
    let route_then_fail = |seq: u64, len: u32| {
        fake.fail_next.store(false, SeqCst);
        fake.complete(recv_wc_len(0xb07, seq, len));
        assert_eq!(cq.poll_and_route().expect("routed"), 1);
        fake.fail_next.store(true, SeqCst);
    };
    let t = post_recv(&shared);
    route_then_fail(0, 11);
    let (c, ()) = t.wait(Duration::from_secs(1)).expect("in the book");
    assert_eq!(c.byte_len(), 11);

    let mut f = post_recv(&shared).into_future();
    route_then_fail(1, 12);
    let wakes = Arc::new(Count::default());
    match poll(&mut f, &Waker::from(Arc::clone(&wakes))) {
        Poll::Ready(Ok((c, ()))) => assert_eq!(c.byte_len(), 12),
        Poll::Ready(Err(e)) => panic!("in the book, got {}", e.error),
        Poll::Pending => panic!("in the book, pending"),
    }
    assert_eq!((wakes.get(), fake.arms.load(SeqCst), cq.waiters.load(SeqCst)), (0, 0, 0));

    let r = scope(|s| {
        let tok = s.post_recv(&qp, Recv::new(w.local_mut(0x1000, 64))).expect("posted");
        let seq = recvs(&shared).last().expect("posted") & !RECV_BIT;
        route_then_fail(seq, 13);
        let (c, _) = s.wait(tok, Duration::from_secs(1)).expect("in the book");
        assert_eq!(c.byte_len(), 13);
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A shared receive queue on two CQs: the wait's own poll routes the receive's completion from
/// the first CQ, then the second CQ's poll fails. The completion is in the book: the owned wait
/// and the awaited token's first poll hand it over rather than the error.
#[test]
fn an_srq_wait_finds_the_completion_its_poll_routed_before_the_next_cqs_failure() {
    let w = World::new();
    let (cq1, fake1) = w.cq();
    let (cq2, fake2) = w.cq();
    let srq = w.srq(8);
    let _q1 = w.qp(0xb08, 8, &cq1, Some(Arc::clone(&srq)));
    let _q2 = w.qp(0xb09, 8, &cq2, Some(Arc::clone(&srq)));

    let (seq, t) = post_srq_recv(&srq);
    fake1.complete(recv_wc_len(0xb08, seq, 21));
    fake2.fail_next.store(true, SeqCst);
    let (c, ()) = t.wait(Duration::from_secs(1)).expect("routed by the wait's own poll");
    assert_eq!(c.byte_len(), 21);
    assert!(!fake2.fail_next.load(SeqCst), "the second CQ was polled (and failed)");

    let (seq, t) = post_srq_recv(&srq);
    let mut f = t.into_future();
    fake1.complete(recv_wc_len(0xb08, seq, 22));
    fake2.fail_next.store(true, SeqCst);
    let wakes = Arc::new(Count::default());
    match poll(&mut f, &Waker::from(Arc::clone(&wakes))) {
        Poll::Ready(Ok((c, ()))) => assert_eq!(c.byte_len(), 22),
        Poll::Ready(Err(e)) => panic!("routed by the first poll, got {}", e.error),
        Poll::Pending => panic!("routed by the first poll, pending"),
    }
    assert_eq!((cq1.waiters.load(SeqCst), cq2.waiters.load(SeqCst)), (0, 0));
    assert_eq!(srq.rq.try_take(seq), Take::Unknown, "taken once");
}

/// The reverse order: the first CQ's poll fails, the completion waits in the second CQ. The
/// wait (and the future) resolve with the error and the token; the completion is not lost: the
/// token, waited on again, gets it, once.
#[test]
fn an_srq_wait_whose_first_cq_fails_keeps_the_token_and_the_completion() {
    let w = World::new();
    let (cq1, fake1) = w.cq();
    let (cq2, fake2) = w.cq();
    let srq = w.srq(8);
    let _q1 = w.qp(0xb0a, 8, &cq1, Some(Arc::clone(&srq)));
    let _q2 = w.qp(0xb0b, 8, &cq2, Some(Arc::clone(&srq)));
    let (seq, t) = post_srq_recv(&srq);
    fake2.complete(recv_wc_len(0xb0b, seq, 31));
    fake1.fail_next.store(true, SeqCst);
    let e = t.wait(Duration::from_secs(1)).expect_err("the first CQ's poll failed");
    assert!(!matches!(e.error, crate::Error::Timeout { .. }), "{}", e.error);
    assert_eq!(fake2.left(), 1, "still in the second CQ");
    let mut f = e.token.into_future();
    fake1.fail_next.store(true, SeqCst);
    let waker = Waker::from(Arc::new(Count::default()));
    let t = match poll(&mut f, &waker) {
        Poll::Ready(Err(e)) => e.token,
        other => panic!("the first CQ's poll failed: {:?}", other.map(|r| r.map(|(c, _)| c))),
    };
    assert_eq!(cq1.waiters.load(SeqCst), 0);
    let (c, ()) = t.wait(Duration::from_secs(1)).expect("the completion is still there");
    assert_eq!(c.byte_len(), 31);
    assert_eq!(srq.rq.try_take(seq), Take::Unknown, "taken once");
}

// ---------------------------------------------------------------------------------------------
// The awaited token's first poll, inline.
// ---------------------------------------------------------------------------------------------

/// A future polled again after it resolved (inline, at its first poll) panics, as documented,
/// before it touches the CQ: it neither polls nor takes the completion another future waits
/// for.
#[test]
fn a_resolved_future_polled_again_panics_without_polling_the_cq() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xb10, 8, &cq, None);
    let mut f = post_recv(&qp).into_future();
    fake.complete(recv_wc_len(0xb10, 0, 5));
    let waker = Waker::from(Arc::new(Count::default()));
    assert!(matches!(poll(&mut f, &waker), Poll::Ready(Ok((c, ()))) if c.byte_len() == 5));
    let mut g = post_recv(&qp).into_future();
    let gw = Arc::new(Count::default());
    assert!(poll(&mut g, &Waker::from(Arc::clone(&gw))).is_pending());
    fake.complete(recv_wc_len(0xb10, 1, 6));
    let polls = fake.polls.load(SeqCst);
    assert!(quiet(|| poll(&mut f, &waker)).is_err(), "polled after it resolved: panics");
    assert_eq!(fake.polls.load(SeqCst), polls, "no poll of the CQ");
    assert_eq!(fake.left(), 1, "G's completion is still in the CQ");
    assert_eq!(w.ch.dispatch().expect("dispatch").completions, 1);
    assert_eq!(gw.get(), 1);
    assert!(matches!(poll(&mut g, &Waker::from(gw)), Poll::Ready(Ok((c, ()))) if c.byte_len() == 6));
    drop(f);
    assert_eq!(cq.waiters.load(SeqCst), 0);
}

/// `set_await_polls`: during the polls, another poller routes the completion to the book and
/// the fake's next poll fails: the future's next poll resolves with the completion from the
/// book (read before any poll), arming nothing. A second future, whose poll fails with nothing
/// in the book, resolves with the error and its token, counting itself a waiter of nothing.
#[test]
fn a_failed_poll_during_a_futures_extra_polls_finds_the_routed_completion_first() {
    let w = World::new();
    let (cq, fake) = w.cq();
    crate::cq::Cq { inner: Arc::clone(&cq) }.set_await_polls(3);
    let qp = w.qp(0xb11, 8, &cq, None);
    let wakes = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut f = post_recv(&qp).into_future();
    assert!(poll(&mut f, &waker).is_pending());
    assert!(poll(&mut f, &waker).is_pending());
    assert_eq!(wakes.get(), 2, "it woke itself twice");
    fake.complete(recv_wc_len(0xb11, 0, 41));
    assert_eq!(cq.poll_and_route().expect("routed"), 1);
    fake.fail_next.store(true, SeqCst);
    match poll(&mut f, &waker) {
        Poll::Ready(Ok((c, ()))) => assert_eq!(c.byte_len(), 41),
        Poll::Ready(Err(e)) => panic!("in the book, got {}", e.error),
        Poll::Pending => panic!("in the book, pending"),
    }
    assert_eq!((fake.arms.load(SeqCst), cq.waiters.load(SeqCst)), (0, 0));
    // A receive's book is read before the poll: the failure is still to come.
    assert!(fake.fail_next.swap(false, SeqCst));

    let mut g = post_recv(&qp).into_future();
    assert!(poll(&mut g, &waker).is_pending());
    fake.fail_next.store(true, SeqCst);
    let t = match poll(&mut g, &waker) {
        Poll::Ready(Err(e)) => e.token,
        other => panic!("the poll failed: {:?}", other.map(|r| r.map(|(c, _)| c))),
    };
    assert_eq!((fake.arms.load(SeqCst), cq.waiters.load(SeqCst)), (0, 0));
    fake.complete(recv_wc_len(0xb11, 1, 42));
    let (c, ()) = t.wait(Duration::from_secs(1)).expect("completes");
    assert_eq!(c.byte_len(), 42);
}

/// During `set_await_polls`' extra polls the future's own poll takes its completion, and the
/// poll unwinds (another future's waker panics): the completion is kept (`taken`) and the
/// next poll hands it over, once; the buffer is never handed back before the device finished.
#[test]
fn a_completion_taken_by_an_extra_poll_that_unwinds_is_delivered_once() {
    let w = World::new();
    let (cq, fake) = w.cq();
    crate::cq::Cq { inner: Arc::clone(&cq) }.set_await_polls(2);
    let qa = w.qp(0xb12, 8, &cq, None);
    let qb = w.qp(0xb13, 8, &cq, None);
    // H waits (its own extra polls over, woken by a counting waker) with a waker that panics.
    let mut h = post_send(&qa, true).into_future();
    let counting = Waker::from(Arc::new(Count::default()));
    for _ in 0..2 {
        assert!(poll(&mut h, &counting).is_pending());
    }
    assert!(poll(&mut h, &Waker::from(Arc::new(PanicWake))).is_pending());
    assert_eq!(cq.waiters.load(SeqCst), 1, "H waits");
    let (tok, watched) = watched_recv(&qb);
    let mut f = tok.into_future();
    let wakes = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wakes));
    assert!(wpoll(&mut f, &waker).is_pending(), "F's first extra poll");
    // H's completion first (routed, H woken: panics), then F's (taken by F's poll).
    fake.complete(send_wc(0xb12, 0, sys::IBV_WC_SUCCESS));
    watched.device_done.store(true, SeqCst);
    fake.complete(recv_wc_len(0xb13, watched.seq, 51));
    assert!(quiet(|| wpoll(&mut f, &waker)).is_err(), "H's waker panicked out of F's poll");
    assert_eq!(qb.rq.try_take(watched.seq), Take::Unknown, "the book counts it taken");
    match wpoll(&mut f, &waker) {
        Poll::Ready(Ok((c, b))) => {
            assert_eq!(c.byte_len(), 51);
            drop(b);
        }
        other => panic!("{:?}", other.map(|r| r.map(|(c, _)| c).map_err(|e| e.error))),
    }
    assert_eq!((watched.early.load(SeqCst), watched.drops.load(SeqCst)), (0, 1));
    assert_eq!(fake.arms.load(SeqCst), 1, "F never armed (only H did)");
    assert!(matches!(poll(&mut h, &Waker::from(Arc::new(Count::default()))), Poll::Ready(Ok(_))));
    assert_eq!(cq.waiters.load(SeqCst), 0);
}

/// A future dropped after its first poll missed (it waits), and a future dropped during its
/// extra polls (it never waited): the buffers are parked until the device's completions come,
/// and released then, never before.
#[test]
fn a_future_dropped_after_its_inline_miss_parks_its_buffer_until_the_device_is_done() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xb14, 8, &cq, None);
    let waker = Waker::from(Arc::new(Count::default()));
    // Polled once (it waits), then dropped by a `select!` whose other branch won.
    let (tok, a) = watched_recv(&qp);
    let mut f = tok.into_future();
    assert!(wpoll(&mut f, &waker).is_pending());
    drop(f);
    crate::cq::Cq { inner: Arc::clone(&cq) }.set_await_polls(5);
    let (tok, b) = watched_recv(&qp);
    let mut g = tok.into_future();
    assert!(wpoll(&mut g, &waker).is_pending(), "an extra poll: nothing registered");
    drop(g);
    assert_eq!(qp.rq.parked(), 2);
    assert_eq!((a.drops.load(SeqCst), b.drops.load(SeqCst)), (0, 0), "kept while the device may use them");
    a.device_done.store(true, SeqCst);
    fake.complete(recv_wc_len(0xb14, a.seq, 1));
    b.device_done.store(true, SeqCst);
    fake.complete(recv_wc_len(0xb14, b.seq, 2));
    assert_eq!(cq.poll_and_route().expect("routed"), 2);
    assert_eq!((a.drops.load(SeqCst), b.drops.load(SeqCst)), (1, 1), "released by the poll");
    assert_eq!((a.early.load(SeqCst), b.early.load(SeqCst)), (0, 0));
    assert_eq!(qp.rq.recv_slots(), Some(0), "nothing left in the book");
    assert_eq!(cq.waiters.load(SeqCst), 0);
}

// ---------------------------------------------------------------------------------------------
// A receive book pops its front slot when its result is taken.
// ---------------------------------------------------------------------------------------------

/// Request states of the receive book model.
#[derive(Debug, Clone, Copy, PartialEq)]
enum St {
    Pending { covered: bool, abandoned: bool },
    Done(u32),
    Gone,
}

fn own(i: u64) -> Completion {
    let mut c = Completion::implied(1, sys::IBV_WC_RECV);
    c.byte_len = i as u32;
    c
}

/// A receive book (a QP's or an SRQ's) driven through the methods the library calls, with
/// completions in any order (an SRQ's, several QPs), taken by their own wait's poll
/// (`complete_taken_recv`, anywhere in the book, the front included), routed (`complete`),
/// taken (`try_take`), abandoned (dropped tokens), uncovered receives that never complete,
/// and resets. Every result is handed over exactly once, with its own completion; the book
/// never holds more than three times the depth of slots, and after any change that is not a
/// post, no more than twice the depth plus the posts since the last time it was at most
/// twice the depth.
#[test]
fn a_receive_book_completed_in_any_order_hands_each_result_over_once_and_stays_bounded() {
    receive_book_model(10, u64::MAX);
}

/// The same with many receives that never complete (uncovered) and many tokens leaked (never
/// taken nor dropped): the book still stays within three times the depth.
#[test]
fn a_receive_book_with_leaked_tokens_and_stuck_receives_stays_bounded() {
    receive_book_model(3, 4);
}

fn receive_book_model(uncovered_one_in: u64, leak_one_in: u64) {
    let mut worst_after_take = 0usize;
    let mut worst = 0usize;
    for seed in 1..400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let depth = 1 + rng.below(6) as u32;
        let d = depth as usize;
        let q = TrackedQueue::new(depth, None);
        let mut m: Vec<St> = Vec::new();
        let mut delivered: Vec<u32> = Vec::new();
        let mut posts_since_low = 0usize;
        let mut leaked: Vec<bool> = Vec::new();
        for step in 0..500 {
            let ctx = format!("seed {seed} step {step} depth {depth}");
            // The held results the book publishes are the ones it holds, and none is there
            // when it says so (a waiter then polls without reading the book).
            if let crate::queue::Book::Recv(w) = &*q.lock() {
                let (held, counted) = w.held_counted();
                assert_eq!(held, counted, "{ctx}: held");
                assert_eq!(q.may_hold(0, false), held > 0, "{ctx}: published");
            }
            let before = q.recv_slots().expect("receive book");
            let mut pushed = false;
            let mut took_front = false;
            match rng.below(12) {
                0..=3 => {
                    let next = q.lock().next_seq();
                    if let Some(seq) = next {
                        let covered = rng.below(uncovered_one_in) != 0;
                        assert_eq!(q.lock().push(covered), seq, "{ctx}");
                        assert_eq!(seq as usize, m.len(), "{ctx}: consecutive");
                        m.push(St::Pending { covered, abandoned: false });
                        delivered.push(0);
                        leaked.push(leak_one_in != u64::MAX && rng.below(leak_one_in) == 0);
                        pushed = true;
                    }
                }
                4..=6 => {
                    let pending: Vec<usize> =
                        (0..m.len()).filter(|&i| matches!(m[i], St::Pending { covered: true, .. })).collect();
                    if pending.is_empty() {
                        continue;
                    }
                    // Mostly the oldest (in order), sometimes any.
                    let i =
                        if rng.below(3) == 0 { pending[rng.below(pending.len() as u64) as usize] } else { pending[0] };
                    let St::Pending { abandoned, .. } = m[i] else { unreachable!() };
                    if rng.below(2) == 0 {
                        let front = m.iter().position(|s| *s != St::Gone) == Some(i);
                        let taken = q.complete_taken_recv(i as u64);
                        assert_eq!(taken, !abandoned, "{ctx}: complete_taken_recv({i})");
                        if taken {
                            delivered[i] += 1;
                            m[i] = St::Gone;
                            took_front = front;
                        } else {
                            q.complete(i as u64, own(i as u64));
                            m[i] = St::Gone;
                        }
                    } else {
                        q.complete(i as u64, own(i as u64));
                        m[i] = if abandoned { St::Gone } else { St::Done(i as u32) };
                    }
                }
                7..=8 => {
                    if m.is_empty() {
                        continue;
                    }
                    let i = rng.below(m.len() as u64 + 1) as usize;
                    if leaked.get(i) == Some(&true) {
                        continue;
                    }
                    let expect = match m.get(i) {
                        None | Some(St::Gone) => Take::Unknown,
                        Some(St::Pending { abandoned: true, .. }) => {
                            // Its token is gone: nobody asks.
                            continue;
                        }
                        Some(St::Pending { .. }) => Take::Pending,
                        Some(St::Done(_)) => Take::Done(own(i as u64)),
                    };
                    let front = m.iter().position(|s| *s != St::Gone) == Some(i);
                    let got = q.try_take(i as u64);
                    assert_eq!(got, expect, "{ctx}: try_take({i})");
                    if let Take::Done(c) = got {
                        assert_eq!(c.byte_len(), i as u32, "{ctx}: its own completion");
                        delivered[i] += 1;
                        m[i] = St::Gone;
                        took_front = front;
                    }
                }
                9..=10 => {
                    let live: Vec<usize> = (0..m.len())
                        .filter(|&i| !leaked[i] && matches!(m[i], St::Done(_) | St::Pending { abandoned: false, .. }))
                        .collect();
                    if live.is_empty() {
                        continue;
                    }
                    let i = live[rng.below(live.len() as u64) as usize];
                    q.abandon(i as u64);
                    m[i] = match m[i] {
                        St::Pending { covered, .. } => St::Pending { covered, abandoned: true },
                        _ => St::Gone,
                    };
                }
                _ => {
                    if rng.below(6) == 0 {
                        q.force_flush(1);
                        for s in &mut m {
                            if let St::Pending { abandoned, .. } = *s {
                                *s = if abandoned { St::Gone } else { St::Done(u32::MAX) };
                            }
                        }
                    }
                }
            }
            // A reset's flush is a synthetic completion: check it apart.
            for (i, s) in m.iter_mut().enumerate() {
                if *s == St::Done(u32::MAX) && !leaked[i] {
                    match q.try_take(i as u64) {
                        Take::Done(c) => assert!(!c.is_success(), "{ctx}: a flush"),
                        other => panic!("{ctx}: flushed {i}: {other:?}"),
                    }
                    delivered[i] += 1;
                    *s = St::Gone;
                }
            }
            for (i, s) in m.iter().enumerate() {
                assert_eq!(q.is_pending(i as u64), matches!(s, St::Pending { .. }), "{ctx}: is_pending({i})");
                assert!(delivered[i] <= 1, "{ctx}: {i} delivered twice");
            }
            let outstanding = m.iter().filter(|s| matches!(s, St::Pending { .. })).count();
            assert_eq!(q.outstanding() as usize, outstanding, "{ctx}: outstanding");
            let slots = q.recv_slots().expect("receive book");
            worst = worst.max(slots * 100 / d);
            assert!(slots <= 3 * d, "{ctx}: {slots} slots");
            if pushed {
                posts_since_low += 1;
            }
            if slots <= 2 * d {
                posts_since_low = 0;
            }
            assert!(slots <= 2 * d + posts_since_low, "{ctx}: {slots} slots, {posts_since_low} posts since");
            if took_front && slots < before {
                worst_after_take = worst_after_take.max(slots.saturating_sub(2 * d));
            }
        }
        // Everything settles: each result is handed over exactly once (or abandoned); the
        // leaked ones too, here (to look at what the book kept for them).
        q.force_flush(1);
        for (i, s) in m.iter().enumerate() {
            match s {
                St::Pending { abandoned: false, .. } | St::Done(_) => {
                    let got = q.try_take(i as u64);
                    assert!(matches!(got, Take::Done(_)), "seed {seed}: {i} not handed over: {got:?}");
                    if let (Take::Done(c), St::Done(n)) = (got, s) {
                        if *n != u32::MAX {
                            assert_eq!(c.byte_len(), *n, "seed {seed}: {i}'s own completion");
                        }
                    }
                    delivered[i] += 1;
                }
                _ => assert_eq!(q.try_take(i as u64), Take::Unknown, "seed {seed}: {i} handed over again"),
            }
        }
        assert!(delivered.iter().all(|&n| n <= 1), "seed {seed}: a result handed over twice");
        assert_eq!(q.recv_slots(), Some(0), "seed {seed}: the settled book is empty");
    }
    eprintln!(
        "largest excess over 2*depth left by a front take: {worst_after_take}; most slots: {worst}% of the depth"
    );
}

/// A front take of a receive book that posts made grow past twice the depth pops one slot and
/// sets nothing aside: the book stays above twice the depth until the next completion sets
/// the rest aside; it never passes three times the depth.
#[test]
fn a_front_take_of_a_grown_receive_book_leaves_it_bounded() {
    let q = TrackedQueue::new(4, None);
    for i in 0..8u64 {
        assert_eq!(q.lock().push(true), i);
        q.complete(i, own(i)); // completed, its token kept uncollected
    }
    for _ in 0..4 {
        q.lock().push(true);
    }
    assert_eq!(q.recv_slots(), Some(12), "posts do not set aside");
    assert_eq!(q.try_take(0), Take::Done(own(0)));
    let after_take = q.recv_slots().expect("receive book");
    eprintln!("slots after the front take: {after_take}");
    assert!(after_take <= 12);
    assert!(q.complete_taken_recv(8), "the next receive's own wait takes it");
    let after = q.recv_slots().expect("receive book");
    assert!(after <= 8, "the next completion sets aside: {after} slots");
    for i in 1..8u64 {
        assert_eq!(q.try_take(i), Take::Done(own(i)), "set aside, still handed over");
    }
    for i in 9..12u64 {
        assert!(q.complete_taken_recv(i));
    }
    assert_eq!(q.recv_slots(), Some(0));
}

/// An awaited receive whose token was forgotten after its completion was routed (a leaked
/// completion at the front of the book), then 2000 receives, each awaited (first poll inline,
/// front pops behind the leaked slot): the book stays within twice the depth plus one, and
/// every future resolves with its own completion.
#[test]
fn a_leaked_front_completion_and_awaited_receives_do_not_grow_the_book() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xb15, 4, &cq, None);
    let leaked = post_recv(&qp);
    fake.complete(recv_wc_len(0xb15, 0, 0));
    assert_eq!(cq.poll_and_route().expect("routed"), 1);
    std::mem::forget(leaked);
    let waker = Waker::from(Arc::new(Count::default()));
    let mut max = 0;
    for i in 1..2001u64 {
        let mut f = post_recv(&qp).into_future();
        if i % 3 == 0 {
            // Waits first, then dispatched.
            assert!(poll(&mut f, &waker).is_pending());
            fake.complete(recv_wc_len(0xb15, i, i as u32));
            w.ch.dispatch().expect("dispatch");
        } else {
            fake.complete(recv_wc_len(0xb15, i, i as u32));
        }
        match poll(&mut f, &waker) {
            Poll::Ready(Ok((c, ()))) => assert_eq!(c.byte_len(), i as u32),
            other => panic!("{i}: {:?}", other.map(|r| r.map(|(c, _)| c).map_err(|e| e.error))),
        }
        max = max.max(qp.rq.recv_slots().expect("receive book"));
    }
    assert!(max <= 2 * 4 + 1, "the book kept up to {max} slots");
    assert_eq!(cq.waiters.load(SeqCst), 0);
}

// ---------------------------------------------------------------------------------------------
// All three, under tokio's multi-threaded runtime.
// ---------------------------------------------------------------------------------------------

/// Two QPs on one CQ (a receive queue, a send queue) and an SRQ on a second CQ: futures
/// awaited on a multi-threaded runtime (some created after their completion was routed, some
/// before it landed), sync waits on another thread, a device thread completing in order per
/// queue, and a thread calling `progress` on both CQs all along. Every request resolves once,
/// with its own completion, and nothing hangs.
#[cfg(feature = "tokio")]
#[test]
fn awaited_and_waited_tokens_under_a_multi_threaded_runtime_resolve_once_with_their_own_completions() {
    multi_threaded(true, 0xb20);
}

/// The same without the thread calling `progress`: only the futures' own polls, the sync
/// waits and the channel's driver poll the CQs.
#[cfg(feature = "tokio")]
#[test]
fn awaited_and_waited_tokens_served_by_the_driver_alone_resolve_once_with_their_own_completions() {
    multi_threaded(false, 0xb30);
}

#[cfg(feature = "tokio")]
fn multi_threaded(with_progress: bool, base: u32) {
    use std::sync::atomic::AtomicU64;
    let w = World::new();
    let (cq, fake) = w.cq();
    let (cq2, fake2) = w.cq();
    let (nr, ns, nx) = (base, base + 1, base + 2);
    let qr = w.qp(nr, 16, &cq, None);
    let qs = w.qp(ns, 16, &cq, None);
    let srq = w.srq(16);
    let _qx = w.qp(nx, 16, &cq2, Some(Arc::clone(&srq)));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let progress = {
        let (cq, cq2, stop) = (Arc::clone(&cq), Arc::clone(&cq2), Arc::clone(&stop));
        std::thread::spawn(move || {
            while with_progress && !stop.load(SeqCst) {
                let _ = cq.poll_and_route();
                let _ = cq2.poll_and_route();
                std::thread::yield_now();
            }
        })
    };
    let resolved = Arc::new(AtomicU64::new(0));
    let wrong = Arc::new(AtomicU64::new(0));
    const ROUNDS: u64 = 1500;
    const PER: u64 = 6;
    let mut rng = Rng(0x5eed_1234_5678_9abd);
    let mut expected = 0u64;
    for round in 0..ROUNDS {
        let mut device: Vec<(u8, u64)> = Vec::new();
        let mut handles = Vec::new();
        let mut sync_tokens = Vec::new();
        for k in 0..PER {
            let kind = (round + k) % 3;
            let (seq, tok) = match kind {
                0 => {
                    let seq = qr.rq.lock().push(true);
                    (seq, OwnedToken::new(QueueArc::Recv(Arc::clone(&qr)), seq, (), None))
                }
                1 => {
                    let seq = qs.sq.lock().push(true);
                    (seq, OwnedToken::new(QueueArc::Send(Arc::clone(&qs)), seq, (), None))
                }
                _ => post_srq_recv(&srq),
            };
            let len = (round * PER + k) as u32 + 1;
            device.push((kind as u8, seq));
            expected += 1;
            let (resolved, wrong) = (Arc::clone(&resolved), Arc::clone(&wrong));
            if rng.below(4) == 0 {
                sync_tokens.push((tok, len));
            } else {
                let late = rng.below(2) == 0;
                handles.push((late, len, tok, resolved, wrong));
            }
        }
        // Some futures start before the device completes, the others after.
        let mut late = Vec::new();
        let mut joins = Vec::new();
        for (is_late, len, tok, resolved, wrong) in handles {
            let fut = async move {
                match tok.await {
                    Ok((c, ())) if c.byte_len() == len => {
                        resolved.fetch_add(1, SeqCst);
                    }
                    _ => {
                        wrong.fetch_add(1, SeqCst);
                    }
                }
            };
            if is_late {
                late.push(fut);
            } else {
                joins.push(rt.spawn(fut));
            }
        }
        let sync = {
            let (resolved, wrong) = (Arc::clone(&resolved), Arc::clone(&wrong));
            std::thread::spawn(move || {
                for (tok, len) in sync_tokens {
                    match tok.wait(Duration::from_secs(10)) {
                        Ok((c, ())) if c.byte_len() == len => {
                            resolved.fetch_add(1, SeqCst);
                        }
                        _ => {
                            wrong.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        };
        // The device, in posting order per queue (lens are in posting order overall).
        for (i, (kind, seq)) in device.iter().enumerate() {
            let len = (round * PER + i as u64) as u32 + 1;
            match kind {
                0 => fake.complete(recv_wc_len(nr, *seq, len)),
                1 => fake.complete(sys::ibv_wc { byte_len: len, ..send_wc(ns, *seq, sys::IBV_WC_SUCCESS) }),
                _ => fake2.complete(recv_wc_len(nx, *seq, len)),
            }
            if rng.below(3) == 0 {
                std::thread::yield_now();
            }
        }
        for fut in late {
            joins.push(rt.spawn(fut));
        }
        rt.block_on(async {
            for j in joins {
                tokio::time::timeout(Duration::from_secs(10), j).await.expect("a future hung").expect("task");
            }
        });
        sync.join().expect("sync waits");
    }
    stop.store(true, SeqCst);
    progress.join().unwrap();
    assert_eq!(wrong.load(SeqCst), 0, "a request resolved with another's completion or an error");
    assert_eq!(resolved.load(SeqCst), expected);
    assert_eq!(qr.rq.recv_slots(), Some(0));
    assert_eq!(srq.rq.recv_slots(), Some(0));
    assert_eq!((cq.waiters.load(SeqCst), cq2.waiters.load(SeqCst)), (0, 0));
    drop(rt);
}

fn rwc2(qp_num: u32, seq: u64, len: u32) -> sys::ibv_wc {
    sys::ibv_wc { byte_len: len, ..recv_wc(qp_num, seq, sys::IBV_WC_SUCCESS) }
}

/// A waker that runs its hook at its first wake (then counts).
struct OnWake {
    hook: Mutex<Option<Hook>>,
    wakes: AtomicUsize,
}
impl Wake for OnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        let hook = self.hook.lock().unwrap().take();
        if let Some(h) = hook {
            h();
        }
    }
}

/// Runs `f` on a thread of its own; a hang (a deadlock) fails the test after 20 s.
fn bounded<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("hung (deadlock?)"),
    }
}

// ---------------------------------------------------------------------------------------------
// A future that waits already reads the book after its serving, before the serving's error.
// ---------------------------------------------------------------------------------------------

/// An SRQ receive future waiting on two CQs; its completion lands on the first; the second's
/// poll fails. The future's poll serves the first CQ (routing its completion to the book),
/// then the second's serving fails: the future resolves with the error although its
/// completion is in the book (the token comes back, so nothing is lost).
#[test]
fn a_waiting_srq_future_whose_later_cq_fails_hands_over_the_completion_its_serving_routed() {
    let w = World::new();
    let (cq1, fake1) = w.cq();
    let (cq2, fake2) = w.cq();
    let srq = w.srq(8);
    let _q1 = w.qp(0xc01, 8, &cq1, Some(Arc::clone(&srq)));
    let _q2 = w.qp(0xc02, 8, &cq2, Some(Arc::clone(&srq)));
    let (seq, t) = post_srq_recv(&srq);
    let mut f = t.into_future();
    let wakes = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wakes));
    assert!(poll(&mut f, &waker).is_pending());
    assert_eq!((cq1.waiters.load(SeqCst), cq2.waiters.load(SeqCst)), (1, 1), "waits on both");
    fake1.complete(rwc2(0xc01, seq, 61));
    fake2.fail_next.store(true, SeqCst);
    let r = poll(&mut f, &waker);
    assert!(!fake2.fail_next.load(SeqCst), "the second CQ was polled (and failed)");
    match r {
        Poll::Ready(Ok((c, ()))) => assert_eq!(c.byte_len(), 61),
        Poll::Ready(Err(e)) => {
            let in_book = srq.rq.try_take(seq);
            panic!("resolved with the serving's error ({}) while its completion was in the book ({in_book:?})", e.error)
        }
        Poll::Pending => panic!("pending"),
    }
    assert_eq!((cq1.waiters.load(SeqCst), cq2.waiters.load(SeqCst)), (0, 0));
}

// ---------------------------------------------------------------------------------------------
// An awaited token whose completion is already in the book takes it without polling the CQ: a
// poll may run another future's waker, and one that panics would unwind through this future's
// poll; a real executor then drops the future, and the completion would be lost with the token.
// ---------------------------------------------------------------------------------------------

/// F (a receive of QP `base + 1`, or with `send` a signaled send) with its completion routed
/// to the book by another poller, and H (a send of QP `base`), waiting with a waker that
/// panics, whose completion is at the head of the CQ.
fn routed_with_panicking_head(
    w: &'static World,
    base: u32,
    await_polls: Option<u32>,
    send: bool,
) -> (OwnedCompletion<()>, OwnedCompletion<()>, Arc<QpShared>) {
    let (cq, fake) = w.cq();
    if let Some(n) = await_polls {
        crate::cq::Cq { inner: Arc::clone(&cq) }.set_await_polls(n);
    }
    let qa = w.qp(base, 8, &cq, None);
    let qb = w.qp(base + 1, 8, &cq, None);
    // H waits (its extra polls, if any, over) with a waker that panics.
    let mut h = post_send(&qa, true).into_future();
    let counting = Waker::from(Arc::new(Count::default()));
    for _ in 0..await_polls.unwrap_or(0) {
        assert!(poll(&mut h, &counting).is_pending());
    }
    assert!(poll(&mut h, &Waker::from(Arc::new(PanicWake))).is_pending());
    let mut f = if send { post_send(&qb, true) } else { post_recv(&qb) }.into_future();
    if await_polls.is_some() {
        assert!(poll(&mut f, &counting).is_pending(), "F in its extra polls");
        assert_eq!(cq.waiters.load(SeqCst), 1, "F waits on nothing yet (only H)");
    }
    // F's completion routed by another poller; then H's lands at the head of the CQ.
    fake.complete(if send {
        sys::ibv_wc { byte_len: 71, ..send_wc(base + 1, 0, sys::IBV_WC_SUCCESS) }
    } else {
        rwc2(base + 1, 0, 71)
    });
    assert_eq!(cq.poll_and_route().expect("routed"), 1);
    fake.complete(send_wc(base, 0, sys::IBV_WC_SUCCESS));
    (f, h, qb)
}

fn as_a_task_would(mut f: OwnedCompletion<()>, qb: &Arc<QpShared>) {
    let waker = Waker::from(Arc::new(Count::default()));
    match quiet(|| poll(&mut f, &waker)) {
        Ok(Poll::Ready(Ok((c, ())))) => assert_eq!(c.byte_len(), 71),
        Ok(other) => panic!("{:?}", other.map(|r| r.map(|(c, _)| c).map_err(|e| e.error))),
        Err(_) => {
            // What tokio does with a task whose poll panicked: drops its future.
            drop(f);
            let left = (qb.sq.try_take(0), qb.rq.try_take(0));
            panic!(
                "the future's poll unwound with another future's waker although its completion was in the book; \
                 the task's drop of the future gave it up (book now: {left:?})"
            );
        }
    }
}

#[test]
fn an_awaited_first_poll_with_its_completion_in_the_book_does_not_run_other_wakers() {
    let w = World::new();
    let (f, h, qb) = routed_with_panicking_head(w, 0xc10, None, false);
    as_a_task_would(f, &qb);
    drop(h);
}

/// The same for a send, whose book says without its lock that its result is there.
#[test]
fn an_awaited_send_with_its_completion_in_the_book_does_not_run_other_wakers() {
    let w = World::new();
    let (f, h, qb) = routed_with_panicking_head(w, 0xc30, None, true);
    as_a_task_would(f, &qb);
    drop(h);
}

#[test]
fn an_extra_poll_with_its_completion_in_the_book_does_not_run_other_wakers() {
    let w = World::new();
    let (f, h, qb) = routed_with_panicking_head(w, 0xc20, Some(3), false);
    as_a_task_would(f, &qb);
    drop(h);
}

// ---------------------------------------------------------------------------------------------
// Resolved futures.
// ---------------------------------------------------------------------------------------------

/// A future that resolved with a failed poll's error (its token handed back) and is polled
/// again panics before it polls the CQ.
#[test]
fn a_future_resolved_with_an_error_polled_again_panics_without_polling() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xc30, 8, &cq, None);
    let mut f = post_recv(&qp).into_future();
    fake.fail_next.store(true, SeqCst);
    let waker = Waker::from(Arc::new(Count::default()));
    let t = match poll(&mut f, &waker) {
        Poll::Ready(Err(e)) => e.token,
        other => panic!("{:?}", other.map(|r| r.map(|(c, _)| c))),
    };
    fake.complete(rwc2(0xc30, 0, 9));
    let polls = fake.polls.load(SeqCst);
    assert!(quiet(|| poll(&mut f, &waker)).is_err(), "polled after it resolved: panics");
    assert_eq!(fake.polls.load(SeqCst), polls, "no poll of the CQ");
    assert_eq!(fake.left(), 1);
    let (c, ()) = t.wait(Duration::from_secs(1)).expect("the token gets it");
    assert_eq!(c.byte_len(), 9);
    assert_eq!(cq.waiters.load(SeqCst), 0);
}

// ---------------------------------------------------------------------------------------------
// `SrqShared::poll`: more CQs than the stack holds, the list's lock, the last `Arc` of a CQ.
// ---------------------------------------------------------------------------------------------

/// Six CQs (two beyond `SRQ_CQS_INLINE`): one `SrqShared::poll`
/// polls each CQ once, in the list's order; a receive completing on the sixth CQ is found by a
/// sync wait, and another by an awaited token's first poll.
#[test]
fn an_srq_on_six_cqs_polls_each_once_and_finds_completions_on_the_last() {
    let w = World::new();
    let srq = w.srq(16);
    let cqs: Vec<_> = (0..6).map(|_| w.cq()).collect();
    for (i, (cq, _)) in cqs.iter().enumerate() {
        let _ = w.qp(0xc40 + i as u32, 8, cq, Some(Arc::clone(&srq)));
    }
    assert_eq!(srq.cqs().len(), 6);
    let before: Vec<usize> = cqs.iter().map(|(_, f)| f.polls.load(SeqCst)).collect();
    assert_eq!(srq.poll().expect("polled"), 0);
    let after: Vec<usize> = cqs.iter().map(|(_, f)| f.polls.load(SeqCst)).collect();
    assert!(before.iter().zip(&after).all(|(b, a)| a - b == 1), "{before:?} -> {after:?}");

    let (s1, t1) = post_srq_recv(&srq);
    let (s2, t2) = post_srq_recv(&srq);
    cqs[5].1.complete(rwc2(0xc45, s1, 81));
    cqs[4].1.complete(rwc2(0xc44, s2, 82));
    let (c, ()) = t1.wait(Duration::from_secs(1)).expect("on the sixth CQ");
    assert_eq!(c.byte_len(), 81);
    let mut f = t2.into_future();
    match poll(&mut f, &Waker::from(Arc::new(Count::default()))) {
        Poll::Ready(Ok((c, ()))) => assert_eq!(c.byte_len(), 82),
        other => panic!("{:?}", other.map(|r| r.map(|(c, _)| c).map_err(|e| e.error))),
    }
    // A failure on a CQ beyond the stack: reported, the completion on a CQ before it found.
    let (s3, t3) = post_srq_recv(&srq);
    cqs[1].1.complete(rwc2(0xc41, s3, 83));
    cqs[5].1.fail_next.store(true, SeqCst);
    assert!(srq.poll().is_err(), "the sixth CQ's failure");
    assert!(matches!(srq.rq.try_take(s3), Take::Done(c) if c.byte_len() == 83), "routed before the failure");
    drop(t3);
    for (cq, _) in &cqs {
        assert_eq!(cq.waiters.load(SeqCst), 0);
    }
}

/// A waker run by `SrqShared::poll`'s routing (of the first CQ) locks the SRQ's list of CQs
/// (`cqs`, an attach of a new QP on a new CQ) and drops every other handle of the second CQ
/// and its QP: the poll goes on (the list's lock is not held while completions are routed),
/// and the second CQ, whose last `Arc` the poll held, is destroyed when the poll returns.
#[test]
fn srq_poll_routes_with_the_list_unlocked_and_drops_a_cqs_last_arc_after_it() {
    let w = World::new();
    let (cq1, fake1) = w.cq();
    let (cq2, fake2) = w.droppable_cq();
    let srq = w.srq(8);
    let _q1 = w.qp(0xc50, 8, &cq1, Some(Arc::clone(&srq)));
    let q2 = QpShared::fake(w.raw_qp(0xc51), 0xc51, 8, &cq2, Arc::clone(&w.pd), Some(Arc::clone(&srq)));
    let qa = w.qp(0xc52, 8, &cq1, None);
    let weak_cq2 = Arc::downgrade(&cq2);
    let (seq, t) = post_srq_recv(&srq);
    // H waits on cq1; its waker, run by the routing of cq1's poll, does the hostile part.
    let mut h = post_send(&qa, true).into_future();
    let hook: Hook = {
        let srq = Arc::clone(&srq);
        let mut held = Some((q2, cq2));
        Box::new(move || {
            assert_eq!(srq.cqs().len(), 2, "the list, locked from the waker");
            let (q2, cq2) = held.take().unwrap();
            drop(q2);
            drop(cq2);
            let (cq3, _) = w.cq();
            let _q3 = w.qp(0xc53, 8, &cq3, Some(Arc::clone(&srq)));
        })
    };
    let on_wake = Arc::new(OnWake { hook: Mutex::new(Some(hook)), wakes: AtomicUsize::new(0) });
    assert!(poll(&mut h, &Waker::from(Arc::clone(&on_wake))).is_pending());
    fake1.complete(send_wc(0xc52, 0, sys::IBV_WC_SUCCESS));
    fake2.complete(rwc2(0xc51, seq, 91));
    let r =
        bounded(move || t.wait(Duration::from_secs(5)).map(|(c, ())| c.byte_len()).map_err(|e| e.error.to_string()));
    assert_eq!(on_wake.wakes.load(SeqCst), 1, "H woken by the SRQ wait's poll");
    assert_eq!(r, Ok(91), "the receive of the QP dropped meanwhile completes in the SRQ's book");
    assert_eq!(weak_cq2.strong_count(), 0, "the second CQ was destroyed");
    assert_eq!(srq.cqs().len(), 2, "cq1 and the new one");
    assert!(matches!(poll(&mut h, &Waker::from(Arc::new(Count::default()))), Poll::Ready(Ok(_))));
}

/// The same on one CQ: the future's completion lands after its inline poll missed (at its
/// waker's registration); its serving's first batch routes it to the book, the poll after the
/// arming fails: the future resolves with that error, its completion in the book.
#[test]
fn a_future_whose_serving_fails_after_routing_its_completion_hands_it_over() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xc60, 8, &cq, None);
    let mut f = post_recv(&qp).into_future();
    let (waker, _h) = hooked(Box::new(move || {
        fake.complete(rwc2(0xc60, 0, 101));
        *fake.on_arm.lock().unwrap() = Some(Box::new(move || fake.fail_next.store(true, SeqCst)));
    }));
    let r = poll(&mut f, &waker);
    assert_eq!(fake.arms.load(SeqCst), 1, "armed");
    assert!(!fake.fail_next.load(SeqCst), "the poll after the arming failed");
    match r {
        Poll::Ready(Ok((c, ()))) => assert_eq!(c.byte_len(), 101),
        Poll::Ready(Err(e)) => {
            let in_book = qp.rq.try_take(0);
            panic!("resolved with the serving's error ({}) while its completion was in the book ({in_book:?})", e.error)
        }
        Poll::Pending => panic!("pending"),
    }
    assert_eq!(cq.waiters.load(SeqCst), 0);
}
