//! Attacks over the fake device of `async_races` on a send lane's signaled flag set and cleared in
//! place around a refused post, the bounded completions a lane's book keeps
//! (`LaneBook::keep_bounded`, depth 1 and 2, made-up numbers at the ends of the lane range), a
//! SEND_WITH_INV's build polling a receive CQ shared with other QPs' lanes and tokens (also from
//! another thread, and failing), and a dropped owned token giving its result up before its buffers
//! are released while another thread completes it.

use super::*;
use crate::wc::{CompletionSource, WcStatus};
use crate::wr::InlineSendInv;
use crate::Error;

/// The completions a send lane's book keeps (one `Completion {` per kept one in its `Debug`).
fn kept(shared: &QpShared) -> usize {
    format!("{:?}", shared.sq.lane).matches("Completion {").count()
}

/// A signaled lane post the provider refuses (naming it, or not: maybe queued) clears the
/// signaled bit it set in place: the next `post_unsignaled` of the same prepared request
/// reaches the provider unsignaled. The same for a forced signal (an unsignaled post turned
/// signaled) that is refused. The refused requests count as posted, so the prepared request is
/// not handed back until a later signaled request completes.
#[test]
fn a_refused_signaled_lane_post_leaves_its_prepared_request_unsignaled() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xd10, 8, &cq);
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            let first = lane.outstanding();
            assert_eq!(first, 0);
            answer_next(&shared, Answer::RefuseAt(0));
            lane.post(&mut wr).expect_err("refused, named");
            lane.post_unsignaled(&mut wr).expect("taken");
            answer_next(&shared, Answer::RefuseNull);
            lane.post(&mut wr).expect_err("refused, maybe queued");
            lane.post_unsignaled(&mut wr).expect("taken");
            // The run of unsignaled requests reaches half the queue: this one is forced
            // signaled, and refused.
            answer_next(&shared, Answer::RefuseNull);
            lane.post_unsignaled(&mut wr).expect_err("forced signal refused");
            lane.post_unsignaled(&mut wr).expect("forced signal taken");
            lane.post_unsignaled(&mut wr).expect("taken");
            let seen: Vec<bool> = sends(&shared).iter().map(|&(_, sig)| sig).collect();
            assert_eq!(
                seen,
                [false, true, false, true, true, false],
                "what the provider saw signaled: a refused signaled post left IBV_SEND_SIGNALED set"
            );
            let wr = wr.into_inner().expect_err("refused requests may be queued: not handed back");
            let mut wr = wr;
            let t = lane.post(&mut wr).expect("posted");
            let last = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0xd10, last, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            assert!(lane.wait(t, Duration::from_secs(1)).expect("completes").is_success());
            assert_eq!(lane.outstanding(), 0);
            wr.into_inner().expect("nothing outstanding");
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok());
    });
}

/// A lane on a queue one request deep (every post signaled, the kept bound `keep_bounded`'s
/// `max(1)`): its first request fails, then 300 more are flushed, each polled by another poll
/// than the lane's wait and collected (or not) later. The book keeps at most two completions
/// (the first failure, spared, and one more), the first failure's token still reports it, no
/// token of the lane ever reports a success, and a token whose completion was pushed out says
/// it is gone.
#[test]
fn a_depth_one_lane_keeps_its_first_failure_and_stays_bounded() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xd20, 1, &cq);
        let mut most = 0;
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            let t0 = lane.post(&mut wr).expect("posted");
            let s0 = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0xd20, s0, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_WRITE));
            cq.poll_and_route().unwrap();
            let mut late = Vec::new();
            for i in 0..300 {
                lane.post_unsignaled(&mut wr).expect("room: depth 1 and the last one polled");
                let (seq, sig) = *sends(&shared).last().unwrap();
                assert!(sig, "a queue one deep signals every request");
                fake.complete(wc_of(0xd20, seq, sys::IBV_WC_WR_FLUSH_ERR, 0));
                cq.poll_and_route().unwrap();
                most = most.max(kept(&shared));
                if i % 7 == 0 {
                    let t = lane.post(&mut wr).expect("room");
                    let seq = sends(&shared).last().unwrap().0;
                    fake.complete(wc_of(0xd20, seq, sys::IBV_WC_WR_FLUSH_ERR, 0));
                    cq.poll_and_route().unwrap();
                    most = most.max(kept(&shared));
                    late.push(t);
                }
            }
            let c0 = lane.wait(t0, Duration::from_secs(1)).expect("complete");
            assert_eq!(c0.status(), WcStatus::RemAccessErr, "the first failure was not spared: {c0:?}");
            // Later flushes pushed their completions out (the store keeps the spared first
            // failure and the newest one): their waits say so.
            for (i, t) in late.into_iter().enumerate() {
                match lane.wait(t, Duration::from_secs(1)) {
                    Ok(c) => panic!("request {i}: a completion pushed out was reported: {c:?}"),
                    Err(e) => assert!(
                        matches!(&e.error, Error::InvalidArgument { reason, .. } if reason.contains("gone")),
                        "request {i}: {:?}",
                        e.error
                    ),
                }
            }
            assert_eq!(lane.outstanding(), 0);
            wr.into_inner().expect("nothing outstanding");
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(most <= 2, "{most} completions kept on a queue one deep");
        assert_eq!(most, 2, "the bound was reached (the spared failure and one more)");
    });
}

/// A send lane's book keeps at most the queue's depth of completions after an error
/// (`LaneBook::kept_completion` -> `keep_bounded`): a completion a later one pushes out is
/// gone, and its token's wait says so (`InvalidArgument`, as a receive lane's) rather than
/// inventing a forced reset, which never happened. A queue two deep: request 0 fails, request
/// 1 is flushed (or, a device's mistake, succeeds after the failure), requests 2 and 3 are
/// flushed, all polled by another poll before any wait. The first failure is spared; request
/// 1's completion is pushed out.
#[test]
fn a_lane_completion_pushed_out_of_the_book_is_reported_gone_not_as_a_forced_reset() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xd30, 2, &cq);
        for second in [sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_SUCCESS] {
            let r = scope(|s| {
                let mut lane = s.send_lane(&mut qp).expect("lane");
                let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
                let t0 = lane.post(&mut wr).expect("posted");
                let s0 = sends(&shared).last().unwrap().0;
                fake.complete(wc_of(0xd30, s0, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_WRITE));
                cq.poll_and_route().unwrap();
                let t1 = lane.post(&mut wr).expect("posted");
                let s1 = sends(&shared).last().unwrap().0;
                fake.complete(wc_of(0xd30, s1, second, sys::IBV_WC_RDMA_WRITE));
                cq.poll_and_route().unwrap();
                for _ in 0..2 {
                    let _t = lane.post(&mut wr).expect("posted");
                    let sn = sends(&shared).last().unwrap().0;
                    fake.complete(wc_of(0xd30, sn, sys::IBV_WC_WR_FLUSH_ERR, 0));
                    cq.poll_and_route().unwrap();
                }
                assert!(kept(&shared) <= 2, "the store is bounded by the depth");
                let c0 = lane.wait(t0, Duration::from_secs(1)).expect("complete");
                assert_eq!(c0.status(), WcStatus::RemAccessErr, "the first failure is spared");
                let e = lane.wait(t1, Duration::from_secs(1)).expect_err("its completion is gone");
                assert!(
                    matches!(&e.error, Error::InvalidArgument { reason, .. } if reason.contains("gone")),
                    "request 1 (the device said {second}): {:?}",
                    e.error
                );
                // The token stays valid, and says the same again.
                let e = lane.wait(e.token, Duration::from_secs(1)).expect_err("still gone");
                assert!(matches!(e.error, Error::InvalidArgument { .. }), "{:?}", e.error);
                assert_eq!(lane.outstanding(), 0);
            });
            assert!(r.is_ok(), "{r:?}");
        }
    });
}

/// Made-up lane completions at the ends of the number space, with error and success statuses:
/// `u64::MAX` (both lane bits, the receive lane's last number), `LANE_BIT - 1` (a scope's
/// number, never posted), the send lane's last number (`RECV_BIT - 1`), a number far past the
/// lane's, and its next number. None is kept (the book's bounded store stays empty), none
/// completes the lane's READ (its destination is not handed back), nothing panics or
/// overflows; the READ's own completion then completes it.
#[test]
fn made_up_lane_completions_at_the_ends_of_the_numbers_keep_and_complete_nothing() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xd40, 1, &cq);
        let r = scope(|s| {
            let (mut lane, mut rlane) = s.lanes(&mut qp).expect("lanes");
            let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
            let tok = lane.post(&mut rd).expect("posted");
            let seq = sends(&shared).last().unwrap().0;
            let mut rcv = rlane.prepare(Recv::new(w.local_mut(0x3000, 64))).expect("prepared");
            let rtok = rlane.post(&mut rcv).expect("posted");
            let rseq = recvs(&shared).last().copied().unwrap();
            for id in [u64::MAX, LANE_BIT - 1, RECV_BIT - 1, seq + (1 << 40), seq + 1, rseq + 1, rseq + (1 << 40)] {
                for status in [sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_SUCCESS] {
                    fake.complete(wc_of(0xd40, id, status, sys::IBV_WC_RDMA_READ));
                }
            }
            cq.take_all().unwrap();
            assert_eq!(kept(&shared), 0, "a made-up completion was kept by the send lane's book");
            assert_eq!(
                format!("{:?}", shared.rq.lane).matches("Completion {").count(),
                0,
                "kept by the receive lane's"
            );
            assert_eq!(lane.outstanding(), 1, "a made-up completion completed the READ");
            assert_eq!(rlane.outstanding(), 1, "a made-up completion completed the receive");
            let rd = rd.into_inner().expect_err("in flight");
            assert!(rcv.received().is_none());
            fake.complete(wc_of(0xd40, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
            fake.complete(wc_of(0xd40, rseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
            assert!(lane.wait(tok, Duration::from_secs(1)).expect("own").is_success());
            assert!(rlane.wait(rtok, Duration::from_secs(1)).expect("own").is_success());
            rd.into_inner().expect("done");
            assert!(rcv.received().is_some());
        });
        assert!(r.is_ok(), "{r:?}");
    });
}

/// A SEND_WITH_INV to a peer on the QP's own device polls the QP's receive CQ empty before its
/// claim (`scope::build_into`). Here that CQ is shared with another QP whose send lane has a
/// READ, and whose receive lane has a receive, complete on it, and with the sender's own scope
/// WRITE; plus a failure of the other lane's request before, a success after it (kept), and
/// duplicates. The build takes them all off (then refuses the unbound rkey) and steals none:
/// every token reports its own completion, the failure stays a failure, and the duplicates
/// change nothing.
#[test]
fn a_send_with_invalidate_polling_a_shared_cq_steals_no_lane_or_token_completion() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qa, sa) = w.rc_qp(0xd50, 8, &cq);
        sa.set_peer_on_device_for_test(true);
        let (mut ql, sl) = w.rc_qp(0xd51, 8, &cq);
        let r = scope(|s| {
            let (mut lane, mut rlane) = s.lanes(&mut ql).expect("lanes");
            let mut bad = lane.prepare(Write::new(w.local(0x1800, 8), remote())).expect("prepared");
            let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
            let tf = lane.post(&mut bad).expect("posted");
            let sf = sends(&sl).last().unwrap().0;
            let t = lane.post(&mut rd).expect("posted");
            let lseq = sends(&sl).last().unwrap().0;
            let mut rcv = rlane.prepare(Recv::new(w.local_mut(0x3000, 64))).expect("prepared");
            let rtok = rlane.post(&mut rcv).expect("posted");
            let rseq = recvs(&sl).last().copied().unwrap();
            let ta = s.post_send(&qa, Write::new(w.local(0x5000, 8), remote())).expect("posted");
            let aseq = sends(&sa).last().unwrap().0;
            fake.complete(wc_of(0xd51, sf, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_WRITE));
            fake.complete(wc_of(0xd51, lseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
            fake.complete(wc_of(0xd51, rseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
            fake.complete(wc_of(0xd50, aseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            // Duplicates of each.
            fake.complete(wc_of(0xd51, sf, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            fake.complete(wc_of(0xd51, lseq, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RDMA_READ));
            fake.complete(wc_of(0xd51, rseq, sys::IBV_WC_LOC_LEN_ERR, sys::IBV_WC_RECV));
            fake.complete(wc_of(0xd50, aseq, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RDMA_WRITE));
            let e = s.post_send(&qa, InlineSendInv::new(b"x", 0x0bad_0b01)).map(drop).expect_err("not bound");
            assert!(e.wr.is_some(), "refused before the provider: handed back");
            assert_eq!(fake.left(), 0, "the build polled the receive CQ empty");
            assert_eq!(lane.outstanding(), 0);
            assert_eq!(rlane.outstanding(), 0);
            let cf = lane.wait(tf, Duration::from_secs(1)).expect("complete");
            assert_eq!(cf.status(), WcStatus::RemAccessErr, "{cf:?}");
            let c = lane.wait(t, Duration::from_secs(1)).expect("complete");
            assert!(c.is_success() && c.source() != CompletionSource::ForcedReset, "the READ: {c:?}");
            let rc = rlane.wait(rtok, Duration::from_secs(1)).expect("kept for the lane");
            assert!(rc.is_success(), "the receive: {rc:?}");
            let (ca, _src) = s.wait(ta, Duration::from_secs(1)).expect("complete");
            assert!(ca.is_success() && ca.source() == CompletionSource::Own, "the WRITE: {ca:?}");
            rd.into_inner().expect("done");
            bad.into_inner().expect("done");
            assert!(rcv.received().is_some());
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(sl.check_usable().is_ok() && sa.check_usable().is_ok());
    });
}

/// The same from another thread, many times: one thread's send and receive lanes post and wait
/// (the device completes each request at once) while another thread builds SEND_WITH_INVs on
/// a QP whose receive CQ is the lanes' CQ, each build polling it empty. Every wait returns its
/// own request's success within bounds, whichever thread polled it; nothing is left
/// outstanding.
#[test]
fn send_with_invalidate_builds_on_another_thread_race_lane_waits_without_loss() {
    bounded(60, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qa, sa) = w.rc_qp(0xd60, 8, &cq);
        sa.set_peer_on_device_for_test(true);
        let (mut ql, sl) = w.rc_qp(0xd61, 8, &cq);
        let stop = AtomicBool::new(false);
        /// Stops the other thread however the lanes' thread leaves (a failed assertion too).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        let builds = AtomicUsize::new(0);
        let r = scope(|s| {
            std::thread::scope(|ts| {
                ts.spawn(|| {
                    while !stop.load(SeqCst) {
                        let e = qa.post_send_owned(InlineSendInv::new(b"x", 0x0bad_0c01)).map(drop);
                        assert!(e.is_err(), "an unbound rkey is refused");
                        builds.fetch_add(1, SeqCst);
                        std::thread::yield_now();
                    }
                });
                let _stop = Stop(&stop);
                let (mut lane, mut rlane) = s.lanes(&mut ql).expect("lanes");
                let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
                let mut rcv = rlane.prepare(Recv::new(w.local_mut(0x3000, 64))).expect("prepared");
                // The other thread's builds interleave with the lanes' waits: at least one
                // between every 20 rounds.
                let mut seen = 0;
                for i in 0..400u32 {
                    if i % 20 == 0 {
                        while builds.load(SeqCst) == seen {
                            std::thread::yield_now();
                        }
                        seen = builds.load(SeqCst);
                    }
                    let t = lane.post(&mut rd).expect("posted");
                    let seq = sends(&sl).last().unwrap().0;
                    let rt = rlane.post(&mut rcv).expect("posted");
                    let rseq = recvs(&sl).last().copied().unwrap();
                    fake.complete(wc_of(0xd61, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
                    fake.complete(wc_of(0xd61, rseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
                    let c = lane.wait(t, Duration::from_secs(5)).expect("the READ completes");
                    assert!(c.is_success(), "READ {i}: {c:?}");
                    let c = rlane.wait(rt, Duration::from_secs(5)).expect("the receive completes");
                    assert!(c.is_success(), "receive {i}: {c:?}");
                }
                stop.store(true, SeqCst);
                assert_eq!(lane.outstanding() + rlane.outstanding(), 0);
                rd.into_inner().expect("done");
                assert!(rcv.received().is_some());
            });
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(builds.load(SeqCst) > 0, "the other thread built at least one SEND_WITH_INV");
        assert!(sl.check_usable().is_ok());
    });
}

/// A SEND_WITH_INV whose build's poll of the receive CQ fails (the provider's poll returns -1)
/// is refused with that error and handed back, posting nothing; the completions the CQ holds
/// stay there for the next poll, and a lane request among them completes with its own
/// success.
#[test]
fn a_send_with_invalidate_whose_receive_cq_poll_fails_is_handed_back_and_loses_nothing() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qa, sa) = w.rc_qp(0xd70, 8, &cq);
        sa.set_peer_on_device_for_test(true);
        let (mut ql, sl) = w.rc_qp(0xd71, 8, &cq);
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut ql).expect("lane");
            let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
            let t = lane.post(&mut rd).expect("posted");
            let seq = sends(&sl).last().unwrap().0;
            fake.complete(wc_of(0xd71, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
            let before = sends(&sa).len();
            fake.fail_next.store(true, SeqCst);
            let e = s.post_send(&qa, InlineSendInv::new(b"x", 0x0bad_0d01)).map(drop).expect_err("the poll failed");
            assert!(!matches!(e.error, crate::Error::InvalidArgument { .. }), "the poll's error: {:?}", e.error);
            assert!(e.wr.is_some(), "nothing posted: handed back");
            assert_eq!(sends(&sa).len(), before, "the provider saw nothing");
            assert_eq!(fake.left(), 1, "the failed poll took nothing");
            let c = lane.wait(t, Duration::from_secs(1)).expect("complete");
            assert!(c.is_success(), "{c:?}");
            rd.into_inner().expect("done");
        });
        assert!(r.is_ok(), "{r:?}");
    });
}

/// An owned token dropped while another thread completes its request (the device done with
/// the buffer, then the completion polled): the token gives its result up before it hands
/// its buffer to the queue (`OwnedToken::give_up`). Over many rounds, on a send and a receive
/// queue: the buffer is never dropped before the device is done, each is dropped exactly once,
/// and no result is left in either book (the send book's counters still prove a later
/// unsignaled request complete; the receive book holds nothing).
#[test]
fn an_owned_token_dropped_while_another_thread_completes_it_is_released_once_and_never_early() {
    bounded(60, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0xd80, 16, &cq, None);
        let early = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let rounds = 400;
        for i in 0..rounds {
            let send = i % 2 == 0;
            let done = Arc::new(AtomicBool::new(false));
            let watch = Watch { device_done: Arc::clone(&done), early: Arc::clone(&early), drops: Arc::clone(&drops) };
            let (token, wc) = if send {
                let seq = qp.sq.lock().push(true);
                (
                    OwnedToken::new(QueueArc::Send(Arc::clone(&qp)), seq, watch, None),
                    send_wc(0xd80, seq, sys::IBV_WC_SUCCESS),
                )
            } else {
                let seq = qp.rq.lock().push(true);
                (
                    OwnedToken::new(QueueArc::Recv(Arc::clone(&qp)), seq, watch, None),
                    recv_wc(0xd80, seq, sys::IBV_WC_SUCCESS),
                )
            };
            std::thread::scope(|ts| {
                let device = ts.spawn(|| {
                    if i % 3 == 0 {
                        std::thread::yield_now();
                    }
                    done.store(true, SeqCst);
                    fake.complete(wc);
                    while fake.left() > 0 {
                        cq.poll_and_route().unwrap();
                    }
                });
                if i % 3 == 1 {
                    std::thread::yield_now();
                }
                drop(token);
                device.join().unwrap();
            });
        }
        assert_eq!(early.load(SeqCst), 0, "a buffer was dropped before the device was done with it");
        assert_eq!(drops.load(SeqCst), rounds, "each buffer dropped exactly once");
        assert_eq!(qp.sq.parked() + qp.rq.parked(), 0, "buffers left parked");
        if let crate::queue::Book::Recv(b) = &*qp.rq.lock() {
            assert_eq!(b.held_counted(), (0, 0), "the receive book holds a result nobody will take");
        }
        let s1 = qp.sq.lock().push(false);
        let s2 = qp.sq.lock().push(true);
        fake.complete(send_wc(0xd80, s2, sys::IBV_WC_SUCCESS));
        cq.poll_and_route().unwrap();
        assert!(qp.sq.implied(s1).is_some(), "a given-up result stayed first in the send book");
    });
}

/// A send request posted in the book only (the fake device told separately): its number and
/// owned token.
fn send(qp: &Arc<QpShared>, signaled: bool) -> (u64, OwnedToken<()>) {
    let seq = qp.sq.lock().push(signaled);
    (seq, OwnedToken::new(QueueArc::Send(Arc::clone(qp)), seq, (), None))
}

/// The implied success is built where a wait hands it over (`TrackedQueue::implied`, from
/// `Settled::qp_num`) instead of copied from a stored one. Unsignaled requests of two QPs on one
/// CQ, each implied by a later signaled one, collected by an owned wait, an owned future and
/// a scope wait: each completion is a success implied by a later one, of its own QP (not the
/// other's, not 0), and the signaled ones report their own completion. A request whose later
/// signaled request failed is not implied: it reports the failure's flush, never a success.
#[test]
fn implied_successes_built_in_place_name_their_own_qp_and_only_follow_a_success() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let qa = w.qp(0xda0, 8, &cq, None);
        let qb = w.qp(0xda1, 8, &cq, None);
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        for (qp, num) in [(&qa, 0xda0u32), (&qb, 0xda1u32)] {
            let (_, u1) = send(qp, false);
            let (_, u2) = send(qp, false);
            let (s_sig, sig) = send(qp, true);
            fake.complete(send_wc(num, s_sig, sys::IBV_WC_SUCCESS));
            cq.poll_and_route().unwrap();
            let (c1, ()) = u1.wait(Duration::from_secs(1)).map_err(drop).expect("implied");
            let mut f = u2.into_future();
            let Poll::Ready(Ok((c2, ()))) = poll(&mut f, &waker) else { panic!("the future is implied complete") };
            for c in [c1, c2] {
                assert!(c.is_success(), "{c:?}");
                assert_eq!(c.source(), CompletionSource::ImpliedByLater, "{c:?}");
                assert_eq!(c.qp_num(), num, "an implied success names another QP: {c:?}");
            }
            let (cs, ()) = sig.wait(Duration::from_secs(1)).map_err(drop).expect("own");
            assert_eq!(cs.source(), CompletionSource::Own);
            // A failure of the signaled request after an unsignaled one: flushed, not implied.
            let (_, u) = send(qp, false);
            let (s_bad, bad) = send(qp, true);
            fake.complete(send_wc(num, s_bad - 1, sys::IBV_WC_REM_ACCESS_ERR));
            fake.complete(send_wc(num, s_bad, sys::IBV_WC_WR_FLUSH_ERR));
            cq.poll_and_route().unwrap();
            let (cu, ()) = u.wait(Duration::from_secs(1)).map_err(drop).expect("complete");
            assert_eq!(cu.status(), WcStatus::RemAccessErr, "the unsignaled request's own error: {cu:?}");
            let (cb, ()) = bad.wait(Duration::from_secs(1)).map_err(drop).expect("complete");
            assert!(!cb.is_success(), "{cb:?}");
        }
    });
}

/// The same through a scope: an unsignaled scope WRITE implied by a signaled one reports the
/// scope QP's number.
#[test]
fn a_scope_wait_hands_over_an_implied_success_of_its_own_qp() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xdb0, 8, &cq);
        let (_other, _) = w.rc_qp(0xdb1, 8, &cq);
        let r = scope(|s| {
            let u = s.post_send(&qp, Write::new(w.local(0x1000, 8), remote()).unsignaled()).expect("posted");
            let t = s.post_send(&qp, Write::new(w.local(0x2000, 8), remote())).expect("posted");
            let (useq, sig) = *sends(&shared).first().unwrap();
            assert!(!sig);
            let last = sends(&shared).last().unwrap().0;
            assert!(last > useq);
            fake.complete(wc_of(0xdb0, last, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            let (c, _) = s.wait(u, Duration::from_secs(1)).expect("implied");
            assert!(c.is_success() && c.source() == CompletionSource::ImpliedByLater, "{c:?}");
            assert_eq!(c.qp_num(), 0xdb0, "{c:?}");
            let (c, _) = s.wait(t, Duration::from_secs(1)).expect("own");
            assert_eq!(c.source(), CompletionSource::Own);
        });
        assert!(r.is_ok(), "{r:?}");
    });
}
