//! Hostile sequences against the lanes over the fake device of `async_races` (`LANE_POLLED_AWAITED`,
//! the send wait's first poll, the checkpoint a signaled post leaves alone, `OrderedRecvLane`):
//! the properties the lanes promise, under random mixes of posts, refusals, polls and waits.

use super::*;
use crate::lane::LaneToken;

/// A small deterministic generator (xorshift64*): the sequences are reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The send lane's wait for a request whose completion another poller already recorded polls
/// first; a failed poll must not hide the recorded completion (with a CQ whose polls keep
/// failing, the token could then never be collected by `wait`, though the book has it).
#[test]
fn a_send_lane_wait_for_a_recorded_completion_is_not_hidden_by_a_failed_poll() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x6a0, 8, &cq);
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
        let tok = lane.post(&mut wr).expect("posted");
        let (seq, _) = *sends(&shared).last().unwrap();
        fake.complete(wc_of(0x6a0, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        cq.poll_and_route().unwrap();
        assert_eq!(lane.outstanding(), 0, "recorded by the other poller");
        fake.fail_next.store(true, SeqCst);
        let got = lane.wait(tok, Duration::from_secs(1));
        assert!(got.expect("the book has the completion").is_success());
    });
    assert!(r.is_ok(), "{r:?}");
}

/// The send lane under a random mix of unsignaled, signaled and list posts, refusals (named,
/// unnamed), waits in any order (some with a failed poll), polls by another poller and a
/// device that completes in its own time. After every step: the provider never holds more
/// than the queue's depth (counted as a provider counts: a slot is free once a completion
/// covering it was polled), and never a run of more than `depth / 2` unsignaled requests; a
/// successful wait is for a request that a polled completion covers.
#[test]
fn a_send_lane_never_overfills_or_misses_a_forced_signal_under_a_random_mix() {
    let w = World::new();
    for (k, depth) in [1u32, 2, 3, 4, 5, 8, 9, 16].into_iter().enumerate() {
        for seed in 1..=6u64 {
            let qpn = 0x700 + (k as u32) * 0x10 + seed as u32;
            let (cq, fake) = w.cq();
            let (mut qp, shared) = w.rc_qp(qpn, depth, &cq);
            let max_run = u64::from(depth / 2);
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) + u64::from(depth));
            let r = scope_with_timeout(Duration::from_millis(200), |s| {
                let mut lane = s.send_lane(&mut qp).expect("lane");
                let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
                let n = (depth as usize).clamp(1, 3);
                let every = (max_run.max(1) as usize).min(2);
                let wrs: Vec<_> = (0..n).map(|i| Write::new(w.local(0x2000 + i as u64 * 8, 8), remote())).collect();
                let mut list = lane.prepare_list(wrs, every).expect("list");
                // The device's side: completions pushed (index into `sends`, inclusive).
                let mut pushed: Vec<usize> = Vec::new();
                let mut completed_upto = 0usize;
                let mut tokens: Vec<(LaneToken<'_>, u64)> = Vec::new();
                for step in 0..400 {
                    let op = rng.below(10);
                    match op {
                        0..=2 => {
                            if rng.below(8) == 0 {
                                answer_next(
                                    &shared,
                                    if rng.below(2) == 0 { Answer::RefuseAt(0) } else { Answer::RefuseNull },
                                );
                            }
                            let _ = lane.post_unsignaled(&mut wr);
                            with_fake_qp(shared.as_ptr(), |f| f.answers.clear());
                        }
                        3 => {
                            if rng.below(8) == 0 {
                                answer_next(&shared, Answer::RefuseNull);
                            }
                            let before = sends(&shared).len();
                            let res = lane.post(&mut wr);
                            with_fake_qp(shared.as_ptr(), |f| f.answers.clear());
                            if let Ok(t) = res {
                                assert!(sends(&shared).len() > before);
                                tokens.push((t, sends(&shared).last().unwrap().0));
                            }
                        }
                        4 => {
                            if rng.below(8) == 0 {
                                let at = rng.below(n as u64 + 1) as usize;
                                answer_next(&shared, if at < n { Answer::RefuseAt(at) } else { Answer::RefuseNull });
                            }
                            let res = lane.post_list(&mut list);
                            with_fake_qp(shared.as_ptr(), |f| f.answers.clear());
                            if let Ok(t) = res {
                                tokens.push((t, sends(&shared).last().unwrap().0));
                            }
                        }
                        5 | 6 => {
                            // The device executes up to the next signaled request it holds.
                            let all = sends(&shared);
                            if let Some(i) = (completed_upto..all.len()).find(|&i| all[i].1) {
                                fake.complete(wc_of(qpn, all[i].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                                pushed.push(i);
                                completed_upto = i + 1;
                            }
                        }
                        7 | 8 if !tokens.is_empty() => {
                            let i = if rng.below(2) == 0 { 0 } else { rng.below(tokens.len() as u64) as usize };
                            let (t, seq) = tokens.remove(i);
                            if rng.below(6) == 0 {
                                fake.fail_next.store(true, SeqCst);
                            }
                            match lane.wait(t, Duration::ZERO) {
                                Ok(c) => {
                                    assert!(c.is_success(), "step {step}: {c:?}");
                                    let polled = pushed.len() - fake.left();
                                    let all = sends(&shared);
                                    let covered = polled.checked_sub(1).map(|p| all[pushed[p]].0);
                                    assert!(
                                        covered.is_some_and(|c| c >= seq),
                                        "depth {depth} seed {seed} step {step}: request {seq:#x} handed back, polled up to {covered:?}"
                                    );
                                }
                                Err(e) => tokens.insert(i, (e.token, seq)),
                            }
                        }
                        _ => {
                            let _ = cq.poll_and_route();
                        }
                    }
                    // The provider's count: taken, minus what polled completions freed.
                    let all = sends(&shared);
                    let polled = pushed.len() - fake.left();
                    let freed = polled.checked_sub(1).map_or(0, |p| pushed[p] + 1);
                    assert!(
                        all.len() - freed <= depth as usize,
                        "depth {depth} seed {seed} step {step}: {} outstanding at the provider",
                        all.len() - freed
                    );
                    let mut run = 0u64;
                    for &(_, signaled) in &all {
                        run = if signaled { 0 } else { run + 1 };
                        assert!(run <= max_run, "depth {depth} seed {seed} step {step}: a run of {run} unsignaled");
                    }
                }
                // Settle: one signaled request covers the tail; everything completes. (Refused
                // posts count as outstanding with no completion promised: a queue full of them
                // takes no further post, and only the scope's drain, resetting the QP, ends it.)
                let mut last = None;
                for _ in 0..64 {
                    match lane.post(&mut wr) {
                        Ok(t) => {
                            last = Some(t);
                            break;
                        }
                        Err(_) => {
                            let all = sends(&shared);
                            if let Some(i) = (completed_upto..all.len()).find(|&i| all[i].1) {
                                fake.complete(wc_of(qpn, all[i].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                                pushed.push(i);
                                completed_upto = i + 1;
                            }
                            let _ = cq.poll_and_route();
                        }
                    }
                }
                let Some(last) = last else {
                    // Wedged (refusals fill the queue): the scope's drain resets the QP.
                    assert!(lane.outstanding() > 0, "depth {depth} seed {seed}: refused with nothing outstanding");
                    return;
                };
                let all = sends(&shared);
                for &(seq, _) in all[completed_upto..].iter().filter(|&&(_, signaled)| signaled) {
                    fake.complete(wc_of(qpn, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                }
                assert!(lane.wait(last, Duration::from_secs(1)).expect("last").is_success());
                for (t, _) in tokens {
                    assert!(lane.wait(t, Duration::from_secs(1)).expect("earlier").is_success());
                }
                assert_eq!(lane.outstanding(), 0);
            });
            assert!(r.is_ok() || matches!(r, Err(crate::Error::QpBroken { .. })), "depth {depth} seed {seed}: {r:?}");
        }
    }
}

/// An ordered receive lane whose receive was refused without a name (`bad_wr` NULL) and not
/// queued after all: its waits time out; once a later receive completes, `wait_next` reports
/// it gone (naming both ways a completion can be: dropped, or never queued) and moves on; the
/// later receive is then handed out in its turn.
#[test]
fn an_ordered_lanes_unnamed_refusal_that_was_not_queued_is_reported_gone_and_passed() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x6b0, 8, &cq);
    let r = scope(|s| {
        let mut rlane = s.recv_lane(&mut qp).expect("lane").ordered();
        let mut p = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
        answer_next(&shared, Answer::RefuseNull);
        rlane.post(&mut p).expect_err("refused, not named (and, here, not queued)");
        let e = rlane.wait_next(Duration::from_millis(10)).expect_err("nothing completes it");
        assert!(matches!(e, crate::Error::Timeout { .. }), "{e:?}");
        rlane.post(&mut p).expect("posted");
        let later = *recvs(&shared).last().unwrap();
        fake.complete(sys::ibv_wc { byte_len: 42, ..wc_of(0x6b0, later, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV) });
        let e = rlane.wait_next(Duration::from_millis(200)).expect_err("the refused one");
        assert!(matches!(&e, crate::Error::InvalidArgument { reason, .. } if reason.contains("never queued")), "{e:?}");
        let c = rlane.wait_next(Duration::from_secs(1)).expect("the later receive");
        assert_eq!(c.byte_len(), 42);
        assert!(p.received().is_some());
    });
    assert!(r.is_ok(), "{r:?}");
}

/// Receives posted (with tokens) before `ordered()`, one of them waited for out of order, are
/// skipped by `wait_next` as documented, their completions set aside; the ordered receives
/// after them are handed out in order whichever poller found them, and the stale entries the
/// lane had set aside never stand in for them. `wait_next` with only pre-`ordered` receives
/// outstanding says every receive posted through the ordered lane has been handed out.
#[test]
fn receives_posted_before_ordered_are_skipped_and_never_handed_out_for_later_ones() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x6c0, 4, &cq);
    let rwc =
        |seq: u64, len: u32| sys::ibv_wc { byte_len: len, ..wc_of(0x6c0, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV) };
    let r = scope(|s| {
        let mut rlane = s.recv_lane(&mut qp).expect("lane");
        let mut p = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
        let _t0 = rlane.post(&mut p).expect("0");
        let t1 = rlane.post(&mut p).expect("1");
        let _t2 = rlane.post(&mut p).expect("2");
        let ids = recvs(&shared);
        fake.complete(rwc(ids[0], 100));
        fake.complete(rwc(ids[1], 101));
        // The wait for 1 polls 0 first: kept in the lane's FIFO.
        assert_eq!(rlane.wait(t1, Duration::from_secs(1)).expect("1").byte_len(), 101);
        let mut rlane = rlane.ordered();
        assert_eq!(rlane.outstanding(), 1, "receive 2 still outstanding");
        let e = rlane.wait_next(Duration::from_secs(5)).expect_err("no ordered receive yet");
        assert!(matches!(&e, crate::Error::InvalidArgument { reason, .. } if reason.contains("ordered lane")), "{e:?}");
        for _ in 0..3 {
            rlane.post(&mut p).expect("ordered receive");
        }
        let ids = recvs(&shared);
        fake.complete(rwc(ids[2], 102));
        fake.complete(rwc(ids[3], 3));
        fake.complete(rwc(ids[4], 4));
        // 2 and 3 by the lane's own poll, 4 by another poller.
        assert_eq!(rlane.wait_next(Duration::from_secs(1)).expect("3").byte_len(), 3);
        cq.poll_and_route().unwrap();
        assert_eq!(rlane.wait_next(Duration::from_secs(1)).expect("4").byte_len(), 4);
        let e = rlane.wait_next(Duration::from_millis(10)).expect_err("5 not complete");
        assert!(matches!(e, crate::Error::Timeout { .. }), "{e:?}");
        fake.complete(rwc(ids[5], 5));
        assert_eq!(rlane.wait_next(Duration::from_secs(1)).expect("5").byte_len(), 5);
    });
    assert!(r.is_ok(), "{r:?}");
}

/// An ordered receive lane under a random mix of posts (some refused named, some unnamed and
/// queued or not), completions polled by the lane or by another poller, failed polls and
/// zero-timeout waits: `wait_next` hands every completion out exactly once, in posting order,
/// each with its own receive's length; a timeout or a failed poll never moves it on; it skips
/// only a receive whose completion is gone (never queued, or dropped), and says so.
#[test]
fn an_ordered_receive_lane_hands_out_each_completion_once_in_order_under_a_random_mix() {
    let w = World::new();
    for depth in [1u32, 2, 4, 8] {
        for seed in 1..=8u64 {
            let qpn = 0x800 + depth * 0x10 + seed as u32;
            let (cq, fake) = w.cq();
            let (mut qp, shared) = w.rc_qp(qpn, depth, &cq);
            let mut rng = Rng(seed * 0x2545_f491 + u64::from(depth));
            let r = scope_with_timeout(Duration::from_secs(1), |s| {
                let mut rlane = s.recv_lane(&mut qp).expect("lane").ordered();
                let mut p = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
                // Lane numbers posted (in order), whether the device holds each.
                let mut posted: Vec<(u64, bool)> = Vec::new();
                let mut device_next = 0usize; // next of `posted` the device completes
                let mut out = 0usize; // next of `posted` expected from wait_next
                let len_of = |seq: u64| (seq & 0xffff) as u32 + 1;
                for step in 0..300 {
                    match rng.below(8) {
                        0 | 1 => {
                            let a = match rng.below(10) {
                                0 => Some(Answer::RefuseAt(0)),
                                1 => Some(Answer::RefuseNull),
                                2 => Some(Answer::RefuseNamingOther),
                                _ => None,
                            };
                            let next_seq = LANE_BIT + posted.len() as u64;
                            let before = recvs(&shared).len();
                            if let Some(a) = a {
                                answer_next(&shared, a);
                            }
                            let res = rlane.post(&mut p);
                            let queued = recvs(&shared).len() > before;
                            // An answer a refused-as-full post did not use goes.
                            with_fake_qp(shared.as_ptr(), |f| f.answers.clear());
                            match (res, a) {
                                (Ok(()), _) => posted.push((next_seq, true)),
                                (Err(crate::Error::QueueFull { .. }), _) => {}
                                (Err(_), Some(Answer::RefuseAt(_))) => {}
                                (Err(_), _) => posted.push((next_seq, queued)),
                            }
                        }
                        2 | 3 => {
                            // The device completes the next receive it holds.
                            while device_next < posted.len() && !posted[device_next].1 {
                                device_next += 1;
                            }
                            if device_next < posted.len() {
                                let seq = posted[device_next].0;
                                fake.complete(sys::ibv_wc {
                                    byte_len: len_of(seq),
                                    ..wc_of(qpn, seq | RECV_BIT, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV)
                                });
                                device_next += 1;
                            }
                        }
                        4 => {
                            let _ = cq.poll_and_route();
                        }
                        _ => {
                            let fail = rng.below(5) == 0;
                            if fail {
                                fake.fail_next.store(true, SeqCst);
                            }
                            match rlane.wait_next(Duration::ZERO) {
                                Ok(c) => {
                                    assert!(
                                        out < posted.len(),
                                        "depth {depth} seed {seed} step {step}: handed out a receive never posted"
                                    );
                                    assert_eq!(
                                        c.byte_len(),
                                        len_of(posted[out].0),
                                        "depth {depth} seed {seed} step {step}: receive {out} handed out with another's completion"
                                    );
                                    out += 1;
                                }
                                Err(crate::Error::InvalidArgument { reason, .. }) if reason.contains("handed out") => {
                                    assert_eq!(out, posted.len(), "depth {depth} seed {seed} step {step}: {reason}");
                                }
                                Err(crate::Error::InvalidArgument { reason, .. }) => {
                                    // Skipped: must be one whose completion is really gone.
                                    assert!(out < posted.len(), "{reason}");
                                    // Gone: never queued, or at least `depth` completions came
                                    // after it (each store keeps at most `depth`).
                                    let never = !posted[out].1;
                                    let after =
                                        posted[out + 1..device_next.max(out + 1)].iter().filter(|x| x.1).count();
                                    assert!(
                                        never || after >= depth as usize,
                                        "depth {depth} seed {seed} step {step}: skipped {out} ({after} completed after it): {reason}"
                                    );
                                    out += 1;
                                }
                                Err(_) => {}
                            }
                        }
                    }
                }
                // Settle: the device completes what it holds; the rest is handed out in order.
                for &(seq, queued) in &posted[device_next..] {
                    if queued {
                        fake.complete(sys::ibv_wc {
                            byte_len: len_of(seq),
                            ..wc_of(qpn, seq | RECV_BIT, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV)
                        });
                    }
                }
                let settle_from = device_next;
                loop {
                    match rlane.wait_next(Duration::from_millis(20)) {
                        Ok(c) => {
                            assert_eq!(
                                c.byte_len(),
                                len_of(posted[out].0),
                                "depth {depth} seed {seed}: settling {out}"
                            );
                            out += 1;
                        }
                        Err(crate::Error::InvalidArgument { reason, .. }) if reason.contains("handed out") => break,
                        Err(crate::Error::InvalidArgument { reason, .. }) => {
                            let after = posted[out + 1..].iter().filter(|x| x.1).count();
                            assert!(
                                !posted[out].1 || (out < settle_from && after >= depth as usize),
                                "settling {out}: {reason}"
                            );
                            out += 1;
                        }
                        // A refused, never queued tail.
                        Err(crate::Error::Timeout { .. }) => {
                            assert!(
                                posted[out..].iter().all(|x| !x.1),
                                "depth {depth} seed {seed}: timed out at {out} of {}",
                                posted.len()
                            );
                            break;
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
            });
            assert!(r.is_ok() || matches!(r, Err(crate::Error::QpBroken { .. })), "depth {depth} seed {seed}: {r:?}");
        }
    }
}

/// The longest run of unsignaled requests the send lane lets through is `depth / 2` (on a
/// queue 8 deep: 4 unsignaled, the 5th forced signaled), as its documentation says: a run and
/// the signaled request after it fit in the queue.
#[test]
fn a_send_lanes_longest_unsignaled_run_is_half_the_queue() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x6d0, 8, &cq);
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
        for _ in 0..5 {
            lane.post_unsignaled(&mut wr).expect("posted");
        }
        let flags: Vec<bool> = sends(&shared).iter().map(|&(_, s)| s).collect();
        assert_eq!(flags, [false, false, false, false, true]);
        let (last, _) = *sends(&shared).last().unwrap();
        fake.complete(wc_of(0x6d0, last, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        cq.poll_and_route().unwrap();
        assert_eq!(lane.outstanding(), 0);
    });
    assert!(r.is_ok(), "{r:?}");
}
