//! Attacks on the lanes and the scope's drain over the fake device of `async_races`: closures
//! that panic, return early or forget their lanes, tokens and prepared requests while the
//! device still holds lane requests; error completions of unsignaled requests; other threads
//! polling the CQ while a lane posts and waits; a receive lane dropped mid-scope with a refused
//! receive still possibly queued; nested scopes using an outer lane; a CQ error while a lane
//! waits; made-up lane completions.

use super::*;

/// The device completes `wr_id` of QP `qp_num` after `ms` milliseconds, on its own thread.
fn complete_later(fake: &'static FakeCq, qp_num: u32, wr_id: u64, opcode: u32, ms: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        fake.complete(wc_of(qp_num, wr_id, sys::IBV_WC_SUCCESS, opcode));
    })
}

/// The closure panics while a signaled lane READ (the device writes its destination) is in
/// flight; the device completes it 150 ms later. The scope must not unwind (ending the borrow
/// of the destination) before that completion: it waits, then resumes the panic, and the QP is
/// usable (no reset was needed).
#[test]
fn a_panicking_closure_with_a_lane_read_in_flight_unwinds_only_after_its_completion() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0x900, 8, &cq);
        let started = std::time::Instant::now();
        let mut device = None;
        let r = quiet(|| {
            scope(|s| {
                let mut lane = s.send_lane(&mut qp).expect("lane");
                let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
                let _tok = lane.post(&mut rd).expect("posted");
                let seq = sends(&shared).last().unwrap().0;
                device = Some(complete_later(fake, 0x900, seq, sys::IBV_WC_RDMA_READ, 150));
                panic!("the closure panics with the READ in flight");
            })
        });
        assert!(r.is_err(), "the closure's panic is resumed");
        let elapsed = started.elapsed();
        device.unwrap().join().unwrap();
        assert!(elapsed >= Duration::from_millis(150), "unwound after {elapsed:?}, before the device was done");
        assert_eq!(shared.sq.lane.outstanding(), 0);
        assert!(shared.check_usable().is_ok(), "a completion arrived: no reset");
    });
}

/// The closure forgets its lane, its token and the prepared request (`mem::forget`), then
/// returns early with `?` while the request is in flight; the device completes it 150 ms
/// later. The scope returns the closure's error only once the request completed.
#[test]
fn an_early_return_with_a_forgotten_lane_token_and_prepared_request_waits_for_the_device() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0x910, 8, &cq);
        let started = std::time::Instant::now();
        let mut device = None;
        let r = scope(|s| -> crate::Result<()> {
            let mut lane = s.send_lane(&mut qp)?;
            let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).map_err(|e| e.error)?;
            let tok = lane.post(&mut rd)?;
            let seq = sends(&shared).last().unwrap().0;
            device = Some(complete_later(fake, 0x910, seq, sys::IBV_WC_RDMA_READ, 150));
            // What a program may do whatever the types implement (a token or lane is
            // forgotten the same whether or not its type implements `Drop`).
            #[allow(clippy::forget_non_drop)]
            std::mem::forget(tok);
            std::mem::forget(rd);
            #[allow(clippy::forget_non_drop)]
            std::mem::forget(lane);
            Err(crate::Error::invalid("test", "an early return"))?;
            Ok(())
        });
        let elapsed = started.elapsed();
        device.unwrap().join().unwrap();
        assert!(matches!(r, Ok(Err(crate::Error::InvalidArgument { .. }))), "{r:?}");
        assert!(elapsed >= Duration::from_millis(150), "returned after {elapsed:?}, before the device was done");
        assert_eq!(shared.sq.lane.outstanding(), 0);
        assert!(shared.check_usable().is_ok());
    });
}

/// An unsignaled lane READ fails (remote access error: an error always has a completion),
/// and the signaled WRITE after it is flushed. Until the error is polled, the READ's prepared
/// request is not handed back; the WRITE's token reports the flush, never a success; once
/// both are polled, nothing of the lane is outstanding and the READ is handed back.
#[test]
fn an_unsignaled_lane_requests_error_is_reported_and_not_read_as_success() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x920, 8, &cq);
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
        let mut wr = lane.prepare(Write::new(w.local(0x2000, 8), remote())).expect("prepared");
        lane.post_unsignaled(&mut rd).expect("posted");
        let tok = lane.post(&mut wr).expect("posted");
        let all = sends(&shared);
        let (read_seq, write_seq) = (all[0].0, all[1].0);
        assert!(!all[0].1 && all[1].1);
        let rd = rd.into_inner().expect_err("in flight: the device may write the READ's destination");
        fake.complete(wc_of(0x920, read_seq, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_READ));
        // Another poller takes the READ's error: the lane's book has it.
        cq.poll_and_route().unwrap();
        assert_eq!(lane.outstanding(), 1, "the WRITE is still outstanding");
        let tok = lane.wait(tok, Duration::from_millis(20)).expect_err("the WRITE has not completed").token;
        fake.complete(wc_of(0x920, write_seq, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RDMA_WRITE));
        let c = lane.wait(tok, Duration::from_secs(1)).expect("flushed");
        assert_eq!(c.status(), crate::wc::WcStatus::WrFlushErr, "{c:?}");
        assert_eq!(lane.outstanding(), 0);
        rd.into_inner().expect("the device is done with it");
        wr.into_inner().expect("nothing outstanding");
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A send lane posts and waits while another thread polls the same CQ in a loop (as
/// `Cq::progress` would): each wait returns its own request's result, whichever thread
/// polled it (a mix of signaled and unsignaled requests, the last one failing), and the lane
/// ends with nothing outstanding.
#[test]
fn a_send_lane_waits_while_another_thread_polls_its_cq() {
    bounded(60, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0x930, 16, &cq);
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (cq, stop) = (Arc::clone(&cq), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(SeqCst) {
                    n += cq.poll_and_route().unwrap_or(0);
                    std::thread::yield_now();
                }
                n
            })
        };
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            for i in 0..=600u64 {
                if i % 3 != 0 {
                    lane.post_unsignaled(&mut wr).expect("room");
                    continue;
                }
                let tok = lane.post(&mut wr).expect("room");
                let (seq, signaled) = *sends(&shared).last().unwrap();
                assert!(signaled);
                // Only the last request fails: on a real send queue an error flushes the ones
                // after it (a success after a failure: `a_lane_success_after_a_failure_is_reported_the_same_whichever_thread_polls_it`).
                let fail = i == 600;
                let status = if fail { sys::IBV_WC_REM_ACCESS_ERR } else { sys::IBV_WC_SUCCESS };
                fake.complete(wc_of(0x930, seq, status, sys::IBV_WC_RDMA_WRITE));
                let c = if i % 2 == 0 {
                    lane.wait(tok, Duration::from_secs(5))
                } else {
                    lane.wait_spin(tok, Duration::from_secs(5))
                }
                .expect("completes");
                assert_eq!(c.is_success(), !fail, "request {i}: {c:?}");
                if !fail {
                    assert_eq!(c.source(), crate::wc::CompletionSource::Own, "request {i}");
                }
                assert_eq!(lane.outstanding(), 0, "request {i}");
            }
        });
        stop.store(true, SeqCst);
        let polled = poller.join().unwrap();
        assert!(r.is_ok(), "{r:?}");
        eprintln!("the other thread polled {polled} completions");
    });
}

/// Another thread takes a receive lane's completions (kept for the lane), each with its own
/// length: each token's wait hands back its own receive's completion, and a prepared
/// receive's buffer is handed out only once its own receive completed.
#[test]
fn a_receive_lanes_completions_kept_by_another_poller_go_each_to_its_own_token() {
    bounded(60, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0x940, 8, &cq);
        let r = scope(|s| {
            let mut rlane = s.recv_lane(&mut qp).expect("lane");
            let mut bufs: Vec<_> = (0..4u64)
                .map(|i| rlane.prepare(Recv::new(w.local_mut(0x1000 + i * 64, 64))).expect("prepared"))
                .collect();
            for round in 0..50u32 {
                let mut toks = Vec::new();
                for b in bufs.iter_mut() {
                    toks.push(Some(rlane.post(b).expect("room")));
                }
                let seqs: Vec<u64> = recvs(&shared).iter().rev().take(4).rev().copied().collect();
                for b in &bufs {
                    assert!(b.received().is_none(), "round {round}: handed out while posted");
                }
                for (k, &seq) in seqs.iter().enumerate() {
                    let wc = sys::ibv_wc {
                        byte_len: 10 + k as u32,
                        ..wc_of(0x940, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV)
                    };
                    fake.complete(wc);
                    if k == 1 {
                        // Another poller takes the first two.
                        cq.poll_and_route().unwrap();
                        assert!(bufs[0].received().is_some() && bufs[1].received().is_some());
                        assert!(bufs[2].received().is_none(), "round {round}: not complete yet");
                    }
                }
                // Waited out of order: each gets its own length.
                for k in [3usize, 0, 2, 1] {
                    let t = toks[k].take().unwrap();
                    let c = rlane.wait(t, Duration::from_secs(5)).expect("completes");
                    assert_eq!(c.byte_len(), 10 + k as u32, "round {round}, receive {k}");
                }
                assert_eq!(rlane.outstanding(), 0);
            }
        });
        assert!(r.is_ok(), "{r:?}");
    });
}

/// A send lane ends with an unsignaled tail (no completion will come for it) while another
/// thread polls the same CQ busily: the drain must still give up within the tail's grace,
/// reset the QP and report `QpBroken`, with nothing of the lane left outstanding.
#[test]
fn a_lanes_unsignaled_tail_with_a_busy_other_poller_is_reset_within_bounds() {
    bounded(30, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0x950, 8, &cq);
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (cq, stop) = (Arc::clone(&cq), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    let _ = cq.poll_and_route();
                }
            })
        };
        fake.busy.store(true, SeqCst);
        let started = std::time::Instant::now();
        let r = scope_with_timeout(Duration::from_secs(2), |s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            let t = lane.post(&mut wr).expect("posted");
            let seq = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0x950, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            assert!(lane.wait(t, Duration::from_secs(5)).expect("completes").is_success());
            lane.post_unsignaled(&mut wr).expect("posted");
        });
        let elapsed = started.elapsed();
        stop.store(true, SeqCst);
        poller.join().unwrap();
        fake.busy.store(false, SeqCst);
        assert!(matches!(r, Err(crate::Error::QpBroken { qp_num: 0x950 })), "{r:?}");
        // The drain's 2 s and the flush's wait (5 s at most: the busy CQ never shows the
        // tail's grace an idle poll), with room for a loaded two-core machine: it takes about
        // 7 s, and took 10 s on this machine while a VM ran beside the tests.
        assert!(elapsed < Duration::from_secs(14), "the drain took {elapsed:?}");
        assert_eq!(shared.sq.lane.outstanding(), 0, "reset: nothing outstanding");
    });
}

/// A value the closure owns panics in its drop at the closure's end while a lane's unsignaled
/// READ is in flight (nothing will complete it): the drain resets the QP before the panic is
/// resumed, so no borrow ends with the READ possibly running.
#[test]
fn a_drop_that_panics_at_the_closures_end_with_a_lane_tail_is_resumed_after_the_reset() {
    bounded(30, || {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("a drop that panics at the closure's end");
            }
        }
        let w = World::new();
        let (cq, _fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0x960, 8, &cq);
        let r = quiet(|| {
            scope(|s| {
                let _bomb = Bomb;
                let mut lane = s.send_lane(&mut qp).expect("lane");
                let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
                lane.post_unsignaled(&mut rd).expect("posted");
            })
        });
        assert!(r.is_err(), "the drop's panic is resumed");
        assert_eq!(shared.sq.lane.outstanding(), 0, "the READ was settled (reset) before the unwind went on");
        assert!(shared.check_usable().is_err(), "forced: the QP refuses posts until reset");
    });
}

/// An inner scope posts through the outer scope's lane (its memory borrowed for the outer
/// scope): the inner scope does not wait for it (it is not the inner scope's), the outer one
/// does.
#[test]
fn an_inner_scope_posting_through_an_outer_lane_leaves_the_wait_to_the_outer_scope() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0x970, 8, &cq);
        let started = std::time::Instant::now();
        let mut device = None;
        let mut inner_took = Duration::ZERO;
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
            let t0 = std::time::Instant::now();
            let inner = scope(|_inner| {
                let tok = lane.post(&mut rd).expect("posted");
                #[allow(clippy::forget_non_drop)]
                std::mem::forget(tok);
            });
            inner_took = t0.elapsed();
            assert!(inner.is_ok(), "{inner:?}");
            let seq = sends(&shared).last().unwrap().0;
            device = Some(complete_later(fake, 0x970, seq, sys::IBV_WC_RDMA_READ, 150));
        });
        let elapsed = started.elapsed();
        device.unwrap().join().unwrap();
        assert!(r.is_ok(), "{r:?}");
        assert!(inner_took < Duration::from_millis(100), "the inner scope waited {inner_took:?}");
        assert!(elapsed >= Duration::from_millis(150), "the outer scope returned after {elapsed:?}");
        assert_eq!(shared.sq.lane.outstanding(), 0);
    });
}

/// A receive lane's receive is refused without a name (the provider queued it after all),
/// the lane is dropped mid-scope, and a scope receive is posted through the send lane after
/// it. The lane's prepared receive is not handed out while it may be queued; the device
/// completes both in order; the scope ends without a reset.
#[test]
fn a_receive_refused_unnamed_on_a_dropped_receive_lane_is_kept_until_its_completion() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0x980, 4, &cq);
        let r = scope(|s| {
            let (lane, mut rlane) = s.lanes(&mut qp).expect("lanes");
            let mut p = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
            answer_next(&shared, Answer::RefuseNamingOther);
            rlane.post(&mut p).expect_err("refused, bad_wr names another request");
            assert_eq!(rlane.outstanding(), 1, "possibly queued");
            drop(rlane);
            assert!(p.received().is_none(), "possibly queued: not handed out");
            let p = p.into_inner().expect_err("possibly queued: not handed out");
            // The queue is 4 deep: the lane's receive counts.
            let mut toks = Vec::new();
            for i in 0..3u64 {
                toks.push(s.post_recv_lane(&lane, Recv::new(w.local_mut(0x2000 + i * 64, 64))).expect("room"));
            }
            let full = s.post_recv_lane(&lane, Recv::new(w.local_mut(0x3000, 64))).expect_err("full");
            assert!(matches!(full.error, crate::Error::QueueFull { .. }), "{:?}", full.error);
            let rs = recvs(&shared);
            assert_eq!(rs.len(), 4);
            for &seq in &rs {
                fake.complete(wc_of(0x980, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
            }
            for t in toks {
                assert!(s.wait(t, Duration::from_secs(1)).expect("completes").0.is_success());
            }
            assert_eq!(shared.rq.lane.outstanding(), 0, "the lane's receive completed first");
            p.into_inner().expect("complete: handed out");
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok());
    });
}

/// A CQ error (`IBV_EVENT_CQ_ERR`, read by `Context::next_async_event`) while a lane waits for
/// a request that will never complete (its completion was lost with the overrun): the wait
/// times out, the scope's drain resets the QP, the scope reports `QpBroken`, and the next
/// lane on the QP is refused.
#[test]
fn a_cq_error_while_a_lane_waits_ends_in_a_reset_by_the_drain() {
    bounded(30, || {
        let (w, wfd) = world_with_events();
        let (cq, fake) = w.cq();
        w.ctx.cqs.lock().unwrap().push(Arc::downgrade(&cq));
        let (mut qp, shared) = w.rc_qp(0x990, 8, &cq);
        let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
        let r = scope_with_timeout(Duration::from_millis(500), |s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
            let tok = lane.post(&mut wr).expect("posted");
            inject_event(wfd, fake.raw as u64, sys::IBV_EVENT_CQ_ERR);
            let ev = ctx.next_async_event(Duration::from_secs(1)).expect("event");
            assert_eq!(ev.name(), "IBV_EVENT_CQ_ERR");
            assert!(shared.check_usable().is_err(), "broken by the CQ error");
            let e = lane.wait(tok, Duration::from_millis(50)).expect_err("lost with the overrun");
            assert!(matches!(e.error, crate::Error::Timeout { .. }), "{:?}", e.error);
            assert_eq!(lane.outstanding(), 1);
        });
        assert!(matches!(r, Err(crate::Error::QpBroken { qp_num: 0x990 })), "{r:?}");
        assert_eq!(shared.sq.lane.outstanding(), 0);
        let r = scope(|s| {
            let e = s.send_lane(&mut qp).expect_err("broken");
            assert!(matches!(e, crate::Error::QpBroken { .. }), "{e:?}");
        });
        assert!(r.is_ok(), "{r:?}");
    });
}

/// Made-up lane completions: a success for a lane number not posted yet, for a number of
/// another QP's lane, and with the receive bit for a send lane's number. None of them
/// completes anything: the lane's READ stays outstanding (its destination not handed back)
/// until its own completion; the number not posted yet is then posted and completes only by
/// its own completion.
#[test]
fn made_up_lane_completions_complete_nothing() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x9a0, 8, &cq);
    let (_other, _other_shared) = w.rc_qp(0x9a1, 8, &cq);
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
        let tok = lane.post(&mut rd).expect("posted");
        let seq = sends(&shared).last().unwrap().0;
        fake.complete(wc_of(0x9a0, seq + 1, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        fake.complete(wc_of(0x9a0, seq + 5, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        fake.complete(wc_of(0x9a1, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        fake.complete(wc_of(0x9a0, seq | RECV_BIT, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        cq.take_all().unwrap();
        assert_eq!(lane.outstanding(), 1, "a made-up completion completed the READ");
        let tok = lane.wait(tok, Duration::from_millis(20)).expect_err("not complete").token;
        let mut rd = rd.into_inner().expect_err("in flight");
        let tok2 = lane.post(&mut rd).expect("posted");
        assert_eq!(sends(&shared).last().unwrap().0, seq + 1);
        cq.take_all().unwrap();
        assert_eq!(lane.outstanding(), 2, "the early completion of seq + 1 was not kept for it");
        fake.complete(wc_of(0x9a0, seq + 1, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        assert!(lane.wait(tok2, Duration::from_secs(1)).expect("own completion").is_success());
        assert!(lane.wait(tok, Duration::from_secs(1)).expect("implied").is_success());
        rd.into_inner().expect("done");
    });
    assert!(r.is_ok(), "{r:?}");
}

/// `PreparedList::into_inner` after the wait for the list's token while a later request of
/// the lane is still in flight: refused (the lane does not number the posts of one prepared
/// request, so it waits for all), handed back once the later one completed.
#[test]
fn a_prepared_list_is_not_handed_back_while_a_later_lane_request_is_in_flight() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x9b0, 8, &cq);
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let wrs: Vec<_> = (0..3u64).map(|i| Read::new(w.local_mut(0x1000 + i * 64, 64), remote())).collect();
        let mut list = lane.prepare_list(wrs, 2).expect("list");
        let t1 = lane.post_list(&mut list).expect("posted");
        let last_of_list = sends(&shared).last().unwrap().0;
        let mut one = lane.prepare(Read::new(w.local_mut(0x2000, 64), remote())).expect("prepared");
        let t2 = lane.post(&mut one).expect("posted");
        let later = sends(&shared).last().unwrap().0;
        fake.complete(wc_of(0x9b0, last_of_list, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        assert!(lane.wait(t1, Duration::from_secs(1)).expect("list").is_success());
        let list = list.into_inner().expect_err("a later request is in flight");
        let one = one.into_inner().expect_err("in flight");
        fake.complete(wc_of(0x9b0, later, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        assert!(lane.wait(t2, Duration::from_secs(1)).expect("one").is_success());
        list.into_inner().expect("all done");
        one.into_inner().expect("done");
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A lane request's completion is reported the same whichever thread polled it. Request 0
/// fails; request 1, signaled, then completes successfully (a device that goes on after an
/// error, which RC, UC and UD send queues do not: they flush). The book keeps that success
/// (`LaneBook::complete`), so the lane's own poll and another thread's both report the
/// device's success, and no forced reset is made up for it.
#[test]
fn a_lane_success_after_a_failure_is_reported_the_same_whichever_thread_polls_it() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x9c0, 8, &cq);
    let mut results = Vec::new();
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
        let t0 = lane.post(&mut wr).expect("posted");
        let s0 = sends(&shared).last().unwrap().0;
        fake.complete(wc_of(0x9c0, s0, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_WRITE));
        assert!(!lane.wait(t0, Duration::from_secs(1)).expect("failed").is_success());
        for other_thread_polls in [false, true] {
            let t = lane.post(&mut wr).expect("posted");
            let seq = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0x9c0, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            if other_thread_polls {
                std::thread::scope(|ts| ts.spawn(|| cq.poll_and_route().unwrap()).join().unwrap());
            }
            let c = lane.wait(t, Duration::from_secs(1)).expect("completed");
            results.push((c.status(), c.source()));
        }
    });
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(results[0], results[1], "lane-polled vs other-thread-polled: {results:?}");
    assert!(
        results.iter().all(|&(_, src)| src != crate::wc::CompletionSource::ForcedReset),
        "a forced reset reported where none happened: {results:?}"
    );
}

/// A lane request fails; its error completion is taken by another poller and kept for the
/// token. The device then reports the same request again, successfully (a made-up duplicate):
/// the book ignores it (stale), and the lane's wait, which polls the duplicate first, reports
/// the kept failure, not a success (`CqShared::poll_for_lane` answers for the awaited request
/// only when the book finds its number not stale: `LaneBook::complete_awaited`). Scope and owned tokens reject made-up completions
/// too (`attack_tests::made_up_completions_release_and_complete_nothing`).
#[test]
fn a_duplicate_success_of_a_failed_lane_request_is_not_reported_as_success() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x9d0, 8, &cq);
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut rd = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
        let t = lane.post(&mut rd).expect("posted");
        let seq = sends(&shared).last().unwrap().0;
        fake.complete(wc_of(0x9d0, seq, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_READ));
        cq.poll_and_route().unwrap();
        assert_eq!(lane.outstanding(), 0);
        fake.complete(wc_of(0x9d0, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        let c = lane.wait(t, Duration::from_secs(1)).expect("complete");
        assert_eq!(c.status(), crate::wc::WcStatus::RemAccessErr, "the READ failed, reported {c:?}");
    });
    assert!(r.is_ok(), "{r:?}");
}

/// After an error the QP is in ERR and flushes every request the lane posts after it, the
/// unsignaled ones included (a flush completes every request). A lane that goes on posting
/// (it does not read the QP's state) and collects its signaled tokens: the flush completions
/// of its unsignaled requests, which no token will ever take, must not pile up for the rest of
/// the scope. (Counted through the book's `Debug`: one `Completion {` per kept completion.)
#[test]
fn flushes_of_unsignaled_lane_requests_after_an_error_do_not_pile_up() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let depth = 8u32;
    let (mut qp, shared) = w.rc_qp(0x9e0, depth, &cq);
    let kept = |shared: &QpShared| format!("{:?}", shared.sq.lane).matches("Completion {").count();
    let mut seen = 0usize;
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
        let t = lane.post(&mut wr).expect("posted");
        let s0 = sends(&shared).last().unwrap().0;
        fake.complete(wc_of(0x9e0, s0, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_WRITE));
        assert!(!lane.wait(t, Duration::from_secs(1)).expect("failed").is_success());
        for _ in 0..200 {
            for _ in 0..3 {
                lane.post_unsignaled(&mut wr).expect("room");
            }
            let t = lane.post(&mut wr).expect("room");
            let n = sends(&shared).len();
            for &(seq, _) in &sends(&shared)[n - 4..] {
                fake.complete(wc_of(0x9e0, seq, sys::IBV_WC_WR_FLUSH_ERR, 0));
            }
            let c = lane.wait(t, Duration::from_secs(1)).expect("flushed");
            assert_eq!(c.status(), crate::wc::WcStatus::WrFlushErr);
            seen = seen.max(kept(&shared));
        }
    });
    assert!(r.is_ok(), "{r:?}");
    assert!(
        seen <= depth as usize,
        "{seen} flush completions kept for requests no token will take (queue depth {depth})"
    );
}
