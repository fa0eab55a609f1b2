//! Hostile provider behaviour and hostile safe programs against the completion side, over the
//! fake device of `async_races`: made-up completions, unsignaled errors, tokens of another
//! lane, a queue one deep, two pollers, and receives that never complete.

use super::*;
use crate::queue::Take;

/// A buffer whose drop is observable.
struct Tell(Arc<AtomicBool>);
impl Drop for Tell {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

fn tell() -> (Tell, Arc<AtomicBool>) {
    let f = Arc::new(AtomicBool::new(false));
    (Tell(Arc::clone(&f)), f)
}

/// Slots a receive book keeps.
fn book_slots(q: &crate::queue::TrackedQueue) -> usize {
    q.recv_slots().expect("a receive queue's book")
}

/// A receive that stays pending at the front of a QP's own receive book (refused by the
/// provider with `bad_wr` NULL, so recorded as uncovered: the rxe doorbell case of DESIGN.md
/// §6) is set aside once the book is twice the depth: the later receives, posted, completed
/// and collected, leave no slot behind it.
#[test]
fn a_pending_front_receive_does_not_make_the_receive_book_grow() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa10, 4, &cq);
    answer_next(&shared, Answer::RefuseNull);
    let e = qp.post_recv_owned(Recv::new(w.local_mut(0x1000, 64))).expect_err("refused, bad_wr NULL");
    assert!(e.wr.is_none(), "possibly queued: kept");
    const N: u64 = 5_000;
    for i in 0..N {
        let tok = qp.post_recv_owned(Recv::new(w.local_mut(0x2000, 64))).expect("posted");
        let seq = 1 + i;
        fake.complete(recv_wc(0xa10, seq, sys::IBV_WC_SUCCESS));
        let (c, _) = tok.wait(Duration::from_secs(1)).expect("completes");
        assert!(c.is_success());
    }
    let slots = book_slots(&shared.rq);
    assert!(slots <= 2 * 4 + 1, "the receive book of a queue 4 deep keeps {slots} slots after {N} receives");
}

/// A post the provider refuses with `bad_wr` naming something that is not the request (a
/// provider's mistake) proves nothing: the receive and the send are kept as possibly queued,
/// and neither request nor buffer comes back. (Only `bad_wr` naming the request proves it was
/// not queued.)
#[test]
fn a_refusal_whose_bad_wr_names_another_request_hands_nothing_back() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa30, 4, &cq);
    answer_next(&shared, Answer::RefuseNamingOther);
    let e = qp.post_recv_owned(Recv::new(w.local_mut(0x1000, 64))).expect_err("refused");
    assert!(e.wr.is_none(), "possibly queued: kept, not handed back");
    assert_eq!(shared.rq.outstanding(), 1, "recorded as posted");
    assert_eq!(recvs(&shared).len(), 1, "the fake provider took it");
    let r = scope_with_timeout(Duration::from_millis(300), |s| {
        answer_next(&shared, Answer::RefuseNamingOther);
        let e = s.post_send(&qp, Write::new(w.local(0x2000, 8), remote())).expect_err("refused");
        assert!(e.wr.is_none(), "possibly queued: kept, not handed back");
        assert_eq!(shared.sq.outstanding(), 1, "recorded as posted");
    });
    // Nothing ever completes the kept send: the scope's drain forces a reset.
    assert!(matches!(r, Err(crate::Error::QpBroken { .. })), "{r:?}");
    assert_eq!(sends(&shared).len(), 1, "the fake provider took it");
}

/// The same on a shared receive queue: a receive consumed by a QP whose destroy took its
/// completion off the CQ (mlx5's) stays pending for ever, and the SRQ's book does not keep a
/// slot per later receive behind it.
#[test]
fn an_srq_receive_lost_with_its_qp_does_not_make_the_srq_book_grow() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let srq = w.srq(4);
    let qp = w.posting_qp(0xa20, 4, &cq, Some(Arc::clone(&srq)));
    std::mem::forget(Arc::clone(&qp));
    // Receive 0: consumed by a QP whose destroy (mlx5) cleaned its completion off the CQ.
    let (_lost_seq, lost) = post_srq_recv(&srq);
    drop(lost);
    const N: u64 = 5_000;
    for _ in 0..N {
        let (seq, tok) = post_srq_recv(&srq);
        fake.complete(recv_wc(0xa20, seq, sys::IBV_WC_SUCCESS));
        let (c, ()) = tok.wait(Duration::from_secs(1)).expect("completes");
        assert!(c.is_success());
    }
    let slots = book_slots(&srq.rq);
    assert!(slots <= 2 * 4 + 1, "the book of an SRQ 4 deep keeps {slots} slots after {N} receives");
}

/// Completions a provider makes up (a `wr_id` never posted, beyond the last one; a
/// duplicate of a collected request; a lane number with no lane open; a receive-lane number on
/// a QP of an SRQ; another QP's number) release nothing and complete nothing.
#[test]
fn made_up_completions_release_and_complete_nothing() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xa30, 4, &cq, None);
    let srq = w.srq(4);
    let qs = w.qp(0xa31, 4, &cq, Some(Arc::clone(&srq)));
    // Send 0 signaled, collected; send 1 unsignaled, its token dropped (buffer parked);
    // send 2 signaled, its token kept; send 3 signaled, its token dropped.
    let t0 = post_send(&qp, true);
    fake.complete(send_wc(0xa30, 0, sys::IBV_WC_SUCCESS));
    t0.wait(Duration::from_secs(1)).expect("0 completes");
    let s1 = qp.sq.lock().push(false);
    let (b1, freed1) = tell();
    drop(OwnedToken::new(QueueArc::Send(Arc::clone(&qp)), s1, b1, None));
    let t2 = post_send(&qp, true);
    let s2 = s1 + 1;
    let s3 = qp.sq.lock().push(true);
    let (b3, freed2) = tell();
    drop(OwnedToken::new(QueueArc::Send(Arc::clone(&qp)), s3, b3, None));
    // A receive of the SRQ, outstanding.
    let (rseq, rtok) = post_srq_recv(&srq);
    for wc in [
        send_wc(0xa30, 0, sys::IBV_WC_SUCCESS),             // duplicate of a collected one
        send_wc(0xa30, 7, sys::IBV_WC_SUCCESS),             // never posted (beyond next)
        send_wc(0xa30, u64::MAX >> 2, sys::IBV_WC_SUCCESS), // far beyond
        send_wc(0xa30, LANE_BIT + 5, sys::IBV_WC_SUCCESS),  // lane number, no lane open
        send_wc(0xa30, LANE_BIT, sys::IBV_WC_REM_ACCESS_ERR), // failed lane number
        wc_of(0xa31, RECV_BIT | LANE_BIT, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV), // recv lane on SRQ QP
        recv_wc(0xa31, rseq + 3, sys::IBV_WC_SUCCESS),      // SRQ number never posted
        send_wc(0xa3f, s3, sys::IBV_WC_SUCCESS),            // another (unknown) QP number
        recv_wc(0xa30, 0, sys::IBV_WC_SUCCESS),             // receive on a QP with none posted
    ] {
        fake.complete(wc);
    }
    cq.take_all().unwrap();
    assert!(!freed1.load(SeqCst) && !freed2.load(SeqCst), "a made-up completion released a buffer");
    assert!(qp.sq.is_pending(s1) && qp.sq.is_pending(s2) && qp.sq.is_pending(s3));
    assert!(srq.rq.is_pending(rseq));
    assert_eq!(qp.sq.lane.outstanding(), 0);
    assert_eq!(qs.rq.lane.outstanding(), 0);
    let t2 = match t2.try_complete() {
        Err(t) => t,
        Ok(c) => panic!("request 2 handed back by a made-up completion: {:?}", c.0),
    };
    // The real completion of 2 completes 1 and 2, not 3.
    fake.complete(send_wc(0xa30, s2, sys::IBV_WC_SUCCESS));
    let (c, ()) = t2.wait(Duration::from_secs(1)).expect("2 completes");
    assert_eq!(c.source(), crate::wc::CompletionSource::Own);
    assert!(freed1.load(SeqCst), "1's parked buffer released by 2's completion");
    assert!(!freed2.load(SeqCst) && qp.sq.is_pending(s3));
    fake.complete(send_wc(0xa30, s3, sys::IBV_WC_SUCCESS));
    cq.take_all().unwrap();
    assert!(freed2.load(SeqCst));
    fake.complete(recv_wc(0xa31, rseq, sys::IBV_WC_SUCCESS));
    rtok.wait(Duration::from_secs(1)).expect("srq receive completes");
    assert_eq!(fake.left(), 0);
}

/// An error completion of an unsignaled request is its own, and is handed to its
/// token, never an implied success, even when the later signaled success was polled first by
/// the later request's own wait (`complete_taken`) and the lock-free take is tried.
#[test]
fn an_unsignaled_requests_error_is_never_read_as_implied_success() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xa40, 8, &cq, None);
    let a = post_send(&qp, false);
    let b = post_send(&qp, false);
    let c = post_send(&qp, true);
    // The device reports a's error (its own completion), then c's success.
    fake.complete(send_wc(0xa40, 0, sys::IBV_WC_REM_ACCESS_ERR));
    fake.complete(send_wc(0xa40, 2, sys::IBV_WC_SUCCESS));
    let (cc, ()) = c.wait(Duration::from_secs(1)).expect("c");
    assert!(cc.is_success());
    let (cb, ()) = b.wait(Duration::from_secs(1)).expect("b");
    assert_eq!(cb.source(), crate::wc::CompletionSource::ImpliedByLater);
    let (ca, ()) = a.wait(Duration::from_secs(1)).expect("a");
    assert!(!ca.is_success(), "a's error read as {ca:?}");
}

/// A lane token waited on another QP's lane of the same scope is refused and handed
/// back; waited on its own lane it completes once.
#[test]
fn a_lane_token_waited_on_another_lane_is_refused() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qa, sa) = w.rc_qp(0xa50, 4, &cq);
    let (mut qb, _sb) = w.rc_qp(0xa51, 4, &cq);
    let r = scope(|s| {
        let mut la = s.send_lane(&mut qa).expect("lane a");
        let mut lb = s.send_lane(&mut qb).expect("lane b");
        let mut wa = la.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
        let tok = la.post(&mut wa).expect("posted");
        let e = lb.wait(tok, Duration::from_millis(50)).expect_err("foreign token");
        assert!(matches!(e.error, crate::Error::InvalidArgument { .. }), "{:?}", e.error);
        let (seq, _) = *sends(&sa).last().unwrap();
        fake.complete(wc_of(0xa50, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        assert!(la.wait(e.token, Duration::from_secs(1)).expect("own lane").is_success());
    });
    assert!(r.is_ok(), "{r:?}");
}

/// Depth 1. A send queue one deep refuses a second request until the first completed,
/// forces every request signaled, and the owners' ring (one entry) never mixes two requests'
/// owners: a dropped token's buffer waits for its own completion.
#[test]
fn a_queue_one_deep_keeps_one_request_and_its_owner() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa60, 1, &cq);
    for round in 0..3u64 {
        let t = qp.post_send_owned(Write::new(w.local(0x1000, 8), remote()).unsignaled()).expect("posted");
        let (seq, signaled) = *sends(&shared).last().unwrap();
        assert_eq!(seq, round);
        assert!(signaled, "a queue one deep signals every request");
        let e = qp.post_send_owned(Write::new(w.local(0x1000, 8), remote())).expect_err("full");
        assert!(matches!(e.error, crate::Error::QueueFull { .. }), "{:?}", e.error);
        if round == 1 {
            drop(t);
            assert!(shared.sq.is_pending(seq));
            fake.complete(send_wc(0xa60, seq, sys::IBV_WC_SUCCESS));
            cq.take_all().unwrap();
            assert_eq!(shared.sq.parked(), 0);
        } else {
            fake.complete(send_wc(0xa60, seq, sys::IBV_WC_SUCCESS));
            t.wait(Duration::from_secs(1)).expect("completes");
        }
    }
}

/// Two threads polling one CQ (progress and a token's wait) while the device completes
/// in order: each token gets its own completion exactly once, and the lock-free take of an
/// implied request races the stored error of an earlier one without handing a success.
#[test]
fn two_pollers_never_deliver_a_completion_twice_or_to_the_wrong_token() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xa70, 64, &cq, None);
    for _round in 0..200 {
        let toks: Vec<_> = (0..8).map(|i| (i, post_send(&qp, i % 3 == 2 || i == 7))).collect();
        let base = qp.sq.lock().next_seq().unwrap() - 8;
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let cq = Arc::clone(&cq);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    let _ = cq.poll_and_route();
                }
            })
        };
        // Request 3 (unsignaled) fails with its own completion; 2, 5, 7 are signaled.
        for (i, st) in [
            (2, sys::IBV_WC_SUCCESS),
            (3, sys::IBV_WC_LOC_PROT_ERR),
            (5, sys::IBV_WC_WR_FLUSH_ERR),
            (7, sys::IBV_WC_WR_FLUSH_ERR),
        ] {
            fake.complete(send_wc(0xa70, base + i, st));
        }
        for (i, t) in toks {
            let (c, ()) = t.wait(Duration::from_secs(2)).expect("completes");
            match i {
                0 | 1 => assert!(c.is_success() && c.source() == crate::wc::CompletionSource::ImpliedByLater),
                2 => assert!(c.is_success() && c.source() == crate::wc::CompletionSource::Own),
                3 => assert_eq!(c.status(), crate::wc::WcStatus::LocProtErr),
                4 => {} // whatever the book says: delivered once
                5 | 7 => assert_eq!(c.status(), crate::wc::WcStatus::WrFlushErr),
                6 => assert_eq!(c.source(), crate::wc::CompletionSource::ImpliedByLater),
                _ => unreachable!(),
            }
        }
        stop.store(true, SeqCst);
        poller.join().unwrap();
        assert_eq!(qp.sq.try_take(base + 8), Take::Unknown);
    }
}

/// A completion another poller already routed to the book is handed over by the waits of
/// scope tokens, owned tokens and awaited owned tokens when the CQ's next poll fails: each
/// reads the book before it polls (an awaited send knows from the book's published `done`,
/// without its lock, that its result is there). One request of each kind, each recorded by
/// `poll_and_route`, then waited for with the fake provider's next poll failing.
#[test]
fn a_token_wait_for_a_routed_completion_is_not_hidden_by_a_failed_poll() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa80, 8, &cq);
    let route_then_fail_next_poll = || {
        let (seq, signaled) = *sends(&shared).last().expect("posted");
        assert!(signaled);
        fake.fail_next.store(false, SeqCst);
        fake.complete(send_wc(0xa80, seq, sys::IBV_WC_SUCCESS));
        assert_eq!(cq.poll_and_route().expect("routed"), 1);
        fake.fail_next.store(true, SeqCst);
    };
    let r = scope(|s| {
        let tok = s.post_send(&qp, Write::new(w.local(0x1000, 8), remote())).expect("posted");
        route_then_fail_next_poll();
        let (c, _) = s.wait(tok, Duration::from_secs(1)).expect("the book has the completion");
        assert!(c.is_success());
    });
    assert!(r.is_ok(), "{r:?}");

    let tok = qp.post_send_owned(Write::new(w.local(0x1000, 8), remote())).expect("posted");
    route_then_fail_next_poll();
    let (c, _) = tok.wait(Duration::from_secs(1)).expect("the book has the completion");
    assert!(c.is_success());

    let seq = shared.sq.lock().push(true);
    let mut fut = OwnedToken::new(QueueArc::Send(Arc::clone(&shared)), seq, (), None).into_future();
    fake.fail_next.store(false, SeqCst);
    fake.complete(send_wc(0xa80, seq, sys::IBV_WC_SUCCESS));
    assert_eq!(cq.poll_and_route().expect("routed"), 1);
    fake.fail_next.store(true, SeqCst);
    let wakes = Arc::new(Count::default());
    match poll(&mut fut, &Waker::from(Arc::clone(&wakes))) {
        Poll::Ready(Ok((c, ()))) => assert!(c.is_success()),
        Poll::Ready(Err(e)) => panic!("the book has the completion, got {}", e.error),
        Poll::Pending => panic!("the book has the completion, the future is pending"),
    }
    assert_eq!(wakes.get(), 0);
}

/// A future's first poll, inline in `poll`, hands its result to the out-of-line rest when it
/// misses, which does not poll for it again: three polls in all, that one, then the serving's
/// (`CqShared::serve`: a batch before the arming, and the re-poll after it that closes the
/// race with a completion landing meanwhile). A completion at the head of the CQ is taken by
/// the first poll alone.
#[test]
fn an_awaited_token_polls_its_cq_once_before_it_serves_it() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xa90, 64, &cq, None);
    let wake = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wake));

    let mut f = post_send(&qp, true).into_future();
    let before = fake.polls.load(SeqCst);
    assert!(poll(&mut f, &waker).is_pending());
    assert_eq!(fake.polls.load(SeqCst) - before, 3, "its own poll, then the serving's two");
    assert_eq!((fake.arms.load(SeqCst), cq.waiters.load(SeqCst)), (1, 1), "armed, counted");
    fake.complete(send_wc(0xa90, 0, sys::IBV_WC_SUCCESS));
    assert_eq!(w.ch.dispatch().unwrap().completions, 1);
    assert!(matches!(poll(&mut f, &waker), Poll::Ready(Ok((c, ()))) if c.is_success()));
    assert_eq!(cq.waiters.load(SeqCst), 0);

    let mut g = post_send(&qp, true).into_future();
    fake.complete(send_wc(0xa90, 1, sys::IBV_WC_SUCCESS));
    let (before, arms, wakes) = (fake.polls.load(SeqCst), fake.arms.load(SeqCst), wake.get());
    assert!(matches!(poll(&mut g, &waker), Poll::Ready(Ok((c, ()))) if c.is_success()));
    assert_eq!(fake.polls.load(SeqCst) - before, 1, "taken by the first poll");
    assert_eq!((fake.arms.load(SeqCst), cq.waiters.load(SeqCst), wake.get()), (arms, 0, wakes), "no arming, no wake");
}

/// A dropped token whose request completed (its result routed into the book by another poll)
/// and whose buffer's drop panics: the result is given up all the same, so the book keeps no
/// result for good. Kept, a receive book held it forever (`held` never back to 0: every later
/// awaited receive read the book first), and a send book's first stored result stayed at it
/// (no later unsignaled request of the queue was proved complete from the published counters).
#[test]
fn a_completed_tokens_buffer_whose_drop_panics_still_gives_its_result_up() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x4c, 64, &cq, None);
    // A receive.
    let seq = qp.rq.lock().push(true);
    let token = OwnedToken::new(QueueArc::Recv(Arc::clone(&qp)), seq, crate::scope::PanickingDrop, None);
    fake.complete(recv_wc(0x4c, seq, sys::IBV_WC_SUCCESS));
    cq.poll_and_route().expect("poll");
    assert!(qp.rq.may_hold(seq, false), "the receive's result is in the book");
    let dropped = quiet(|| drop(token));
    assert!(dropped.is_err(), "the buffer's panic comes out of the token's drop");
    if let crate::queue::Book::Recv(b) = &*qp.rq.lock() {
        assert_eq!(b.held_counted(), (0, 0), "the receive book holds no result");
    }
    assert!(!qp.rq.may_hold(seq + 1, false), "the book publishes that it holds nothing");
    // A send: signaled, completed into the book, dropped with the panicking buffer; then an
    // unsignaled request and a signaled one after it.
    let s0 = qp.sq.lock().push(true);
    let token = OwnedToken::new(QueueArc::Send(Arc::clone(&qp)), s0, crate::scope::PanickingDrop, None);
    fake.complete(send_wc(0x4c, s0, sys::IBV_WC_SUCCESS));
    cq.poll_and_route().expect("poll");
    assert!(quiet(|| drop(token)).is_err(), "the buffer's panic comes out of the token's drop");
    let s1 = qp.sq.lock().push(false);
    let s2 = qp.sq.lock().push(true);
    fake.complete(send_wc(0x4c, s2, sys::IBV_WC_SUCCESS));
    cq.poll_and_route().expect("poll");
    assert!(qp.sq.implied(s1).is_some(), "the unsignaled request is proved complete by the counters");
}
