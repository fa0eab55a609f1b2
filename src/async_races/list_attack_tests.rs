//! Attacks on post lists and provider refusals over the fake device of `async_races`:
//! `Scope::post_send_list` (refused at every index, with `bad_wr` NULL, foreign, one past the
//! list's end or inside a request; lists longer than the queue or its room; a later request
//! failing its build check; forced signals across list boundaries; a random model mixing lists,
//! single and owned posts, refusals, completions delivered late, duplicated or stale, and tokens
//! waited, dropped and forgotten in any order), `SendLane::post_list` refused at every index,
//! and the receive side: scope, owned and lane receives and shared receive queue receives
//! refused with and without a name, completed in any order.

use super::*;
use crate::access::WindowBindable;
use crate::mr::Mr;
use crate::pd::PdId;
use crate::srq::Srq;
use crate::test_util::Rng;
use crate::wr::{InlineSend, Send as WrSend};
use crate::Error;

/// The QP's requests are all settled: complete, or flushed by a forced reset.
fn settled(shared: &QpShared) -> bool {
    shared.outstanding() == (0, 0)
}

/// The longest run of unsignaled requests the provider took, in order.
fn longest_unsignaled_run(sends: &[(u64, bool)]) -> usize {
    let (mut run, mut max) = (0, 0);
    for &(_, signaled) in sends {
        run = if signaled { 0 } else { run + 1 };
        max = max.max(run);
    }
    max
}

fn unsig(w: &'static World, addr: u64) -> crate::wr::Unsignaled<Write<LocalBuf<'static>, RemoteAll>> {
    Write::new(w.local(addr, 8), remote()).unsignaled()
}

// ---------------------------------------------------------------------------------------------
// Scope::post_send_list

/// A list of five signaled WRITEs refused by the provider at each index in turn (`bad_wr`
/// names it): exactly the prefix the provider took gets tokens, numbered as the provider saw
/// them; the rest come back, in order, with their own buffers; nothing else is recorded. The
/// posted requests complete, their tokens waited in reverse order, and the scope ends cleanly.
#[test]
fn a_list_refused_at_each_index_posts_exactly_the_prefix_the_provider_took() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb01, 64, &cq);
        let r = scope(|s| {
            for at in 0..5usize {
                let before = sends(&shared).len();
                let out_before = shared.sq.outstanding();
                let base = 0x10000 + 0x1000 * at as u64;
                let list: Vec<_> = (0..5u64).map(|k| Write::new(w.local(base + 64 * k, 8), remote())).collect();
                answer_next(&shared, Answer::RefuseAt(at));
                let e = s.post_send_list(&qp, list).expect_err("refused");
                assert!(matches!(e.error, Error::Verb { .. }), "{:?}", e.error);
                let took = &sends(&shared)[before..];
                assert_eq!(took.len(), at, "the provider took the prefix");
                assert_eq!((e.posted.len(), e.rejected.len()), (at, 5 - at), "refused at {at}");
                assert_eq!(shared.sq.outstanding(), out_before + at as u32, "only the prefix is recorded");
                for (k, wr) in e.rejected.into_iter().enumerate() {
                    let buf = wr.into_buffers(crate::scope::INTERNAL);
                    assert_eq!(buf.addr(), base + 64 * (at + k) as u64, "request {} handed back", at + k);
                }
                for (i, &(seq, signaled)) in took.iter().enumerate() {
                    assert!(signaled);
                    if i > 0 {
                        assert_eq!(seq, took[i - 1].0 + 1, "consecutive numbers");
                    }
                }
                if let Some(&(last, _)) = took.last() {
                    fake.complete(wc_of(0xb01, last, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                }
                for (k, t) in e.posted.into_iter().enumerate().rev() {
                    let (c, view) = s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("completes");
                    assert!(c.is_success());
                    assert_eq!(view.addr(), base + 64 * k as u64, "token {k} holds its own buffer");
                }
                assert_eq!(shared.sq.outstanding(), 0);
            }
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok(), "no reset was needed");
    });
}

/// A list of unsignaled requests on a queue 8 deep (a forced signal every 4th: runs of at most
/// 3) refused at each index: what the provider took of it never holds a run longer than 3,
/// across the lists and the refusals; an unsignaled prefix left at the tail makes the drain
/// reset the QP, which settles everything.
#[test]
fn forced_signals_hold_across_refused_unsignaled_lists() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb02, 8, &cq);
        let r = scope_with_timeout(Duration::from_millis(100), |s| {
            for round in 0..12u64 {
                let n = 1 + (round % 6) as usize;
                let list: Vec<_> = (0..n as u64).map(|k| unsig(w, 0x1000 + 8 * k)).collect();
                let answer = match round % 4 {
                    0 => Answer::Accept,
                    1 => Answer::RefuseAt((round as usize / 4) % n),
                    2 => Answer::RefuseNull,
                    _ => Answer::RefuseNamingOther,
                };
                // Free the queue first: complete up to the last signaled request taken.
                if let Some(&(seq, _)) = sends(&shared).iter().rev().find(|s| s.1) {
                    fake.complete(wc_of(0xb02, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                    cq.take_all().unwrap();
                }
                answer_next(&shared, answer);
                let res = s.post_send_list(&qp, list);
                with_fake_qp(shared.as_ptr(), |f| f.answers.clear());
                match res {
                    Ok(t) => t.into_iter().for_each(std::mem::forget),
                    Err(e) => {
                        assert!(!matches!(e.error, Error::QueueFull { .. }), "round {round}: {:?}", e.error);
                        e.posted.into_iter().for_each(std::mem::forget);
                    }
                }
                let all = sends(&shared);
                assert!(longest_unsignaled_run(&all) <= 3, "round {round}: a run of {}", longest_unsignaled_run(&all));
                assert!(shared.sq.outstanding() <= 8);
            }
        });
        assert!(r.is_ok() || matches!(r, Err(Error::QpBroken { .. })), "{r:?}");
        assert!(settled(&shared), "{:?}", shared.outstanding());
    });
}

/// A list refused with `bad_wr` NULL may be queued whole: every request gets a token, none is
/// covered. When the device completes the list's own last signaled request (it was queued),
/// every token completes, waited in any order, and the scope ends without a reset; when it
/// completes only an earlier one, the tail stays uncovered and the drain resets the QP.
#[test]
fn a_list_refused_without_a_name_is_settled_by_its_own_completion_or_a_reset() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb03, 16, &cq);
        let r = scope_with_timeout(Duration::from_millis(200), |s| {
            let before = sends(&shared).len();
            answer_next(&shared, Answer::RefuseNull);
            let list: Vec<_> = (0..4u64).map(|k| Write::new(w.local(0x1000 + 64 * k, 8), remote())).collect();
            let e = s.post_send_list(&qp, list).expect_err("refused");
            assert_eq!((e.posted.len(), e.rejected.len()), (4, 0));
            let took = sends(&shared)[before..].to_vec();
            assert_eq!(took.len(), 4);
            fake.complete(wc_of(0xb03, took[3].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            let mut toks: Vec<_> = e.posted.into_iter().map(Some).collect();
            for k in [2usize, 0, 3, 1] {
                let (c, v) =
                    s.wait(toks[k].take().unwrap(), Duration::from_secs(1)).map_err(|e| e.error).expect("done");
                assert!(c.is_success(), "{k}: {c:?}");
                assert_eq!(v.addr(), 0x1000 + 64 * k as u64);
            }
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok(), "no reset needed");
        assert!(settled(&shared));
        let started = std::time::Instant::now();
        let r = scope_with_timeout(Duration::from_secs(3), |s| {
            let before = sends(&shared).len();
            answer_next(&shared, Answer::RefuseNull);
            let list: Vec<_> = (0..4u64).map(|k| Write::new(w.local(0x1000 + 64 * k, 8), remote())).collect();
            let e = s.post_send_list(&qp, list).expect_err("refused");
            let took = sends(&shared)[before..].to_vec();
            fake.complete(wc_of(0xb03, took[1].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            let mut toks = e.posted.into_iter();
            let t0 = toks.next().unwrap();
            let t1 = toks.next().unwrap();
            let t2 = toks.next().unwrap();
            assert!(s.wait(t1, Duration::from_secs(1)).expect("request 1 completed").0.is_success());
            assert!(s.wait(t0, Duration::from_secs(1)).expect("implied by 1").0.is_success());
            let t2 = s.wait(t2, Duration::from_millis(20)).expect_err("nothing covers request 2").token;
            std::mem::forget(t2);
            drop(toks);
        });
        assert!(matches!(r, Err(Error::QpBroken { .. })), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "the drain waited out its timeout for an uncovered tail");
        assert!(settled(&shared));
    });
}

/// The provider answers with a `bad_wr` that is not one of the list's requests though it lies
/// near them: one past the list's end, inside the second request, one request before the
/// list. None of them names a request, so the whole list counts as posted (tokens for every
/// request, nothing handed back), uncovered; a `bad_wr` naming request 1 exactly still counts
/// request 0 alone.
#[test]
fn a_bad_wr_near_but_not_at_a_request_of_the_list_names_none() {
    bounded(20, || {
        let w = World::new();
        let (cq, _fake) = w.cq();
        let qpn = 0xb04;
        let shared =
            QpShared::try_fake_with_posts(w.raw_qp(qpn), qpn, 16, &cq, Arc::clone(&w.pd), None, odd_send, fake_recv)
                .expect("fake attach");
        std::mem::forget(Arc::clone(&shared));
        let qp: Qp<RC, RTS> = Qp::from_fake(Arc::clone(&shared));
        let r = scope_with_timeout(Duration::from_millis(50), |s| {
            for (i, odd) in [Odd::PastEnd, Odd::Inside, Odd::Before, Odd::At(1)].into_iter().enumerate() {
                odd_next(&shared, odd);
                let before = shared.sq.outstanding();
                let base = 0x1000 * (i as u64 + 1);
                let list: Vec<_> = (0..3u64).map(|k| Write::new(w.local(base + 64 * k, 8), remote())).collect();
                let e = s.post_send_list(&qp, list).expect_err("refused");
                let want = if odd == Odd::At(1) { 1 } else { 3 };
                assert_eq!((e.posted.len(), e.rejected.len()), (want, 3 - want), "{odd:?}");
                assert_eq!(shared.sq.outstanding() - before, want as u32, "{odd:?}");
                e.posted.into_iter().for_each(std::mem::forget);
            }
        });
        assert!(matches!(r, Err(Error::QpBroken { .. })), "{r:?}");
        assert!(settled(&shared));
    });
}

/// A list longer than the queue, or than its room beside the requests outstanding, posts
/// nothing (`QueueFull`, every request back); the list that fits is taken.
#[test]
fn a_list_longer_than_the_queue_or_its_room_posts_nothing() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb05, 4, &cq);
        let r = scope(|s| {
            let list = |n: u64| (0..n).map(|k| Write::new(w.local(0x1000 + 64 * k, 8), remote())).collect::<Vec<_>>();
            let e = s.post_send_list(&qp, list(5)).expect_err("5 > 4");
            assert!(matches!(e.error, Error::QueueFull { .. }), "{:?}", e.error);
            assert_eq!((e.posted.len(), e.rejected.len()), (0, 5));
            let two = s.post_send_list(&qp, list(2)).expect("2 fit");
            let e = s.post_send_list(&qp, list(3)).expect_err("2 + 3 > 4");
            assert!(matches!(e.error, Error::QueueFull { .. }), "{:?}", e.error);
            assert_eq!((e.posted.len(), e.rejected.len()), (0, 3));
            assert_eq!(sends(&shared).len(), 2, "nothing of the lists that do not fit reached the provider");
            let more = s.post_send_list(&qp, list(2)).expect("2 + 2 fit");
            assert_eq!(shared.sq.outstanding(), 4);
            let last = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0xb05, last, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            for t in more.into_iter().chain(two) {
                assert!(s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("done").0.is_success());
            }
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(settled(&shared));
    });
}

/// A list whose later request fails its own check (memory of another PD, more entries than
/// `max_send_sge`, an inline payload above `max_inline_data`): nothing reaches the provider,
/// nothing is recorded, every request comes back in order.
#[test]
fn a_list_whose_later_request_fails_its_check_posts_nothing() {
    bounded(20, || {
        let w = World::new();
        let (cq, _fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb06, 16, &cq);
        let other = |addr, len| LocalBuf::from_parts(addr, len, 9, OdpTag::default(), PdId::other_dummy());
        let big = [1u8; 65];
        let small = [1u8; 8];
        let r = scope(|s| {
            let e = s
                .post_send_list(
                    &qp,
                    [
                        WrSend::new([w.local(0x1000, 8), w.local(0x1100, 8)]),
                        WrSend::new([w.local(0x2000, 8), other(0x3000, 8)]),
                    ],
                )
                .expect_err("another PD");
            assert!(matches!(e.error, Error::InvalidArgument { .. }), "{:?}", e.error);
            assert_eq!((e.posted.len(), e.rejected.len()), (0, 2));
            let e = s
                .post_send_list(
                    &qp,
                    [
                        WrSend::new([
                            w.local(0x1000, 8),
                            w.local(0x1000, 8),
                            w.local(0x1000, 0),
                            w.local(0x1000, 8),
                            w.local(0x1000, 8),
                        ]),
                        WrSend::new([w.local(0x1000, 8); 5]),
                    ],
                )
                .expect_err("5 entries");
            assert!(matches!(e.error, Error::TooManySges { .. }), "{:?}", e.error);
            assert_eq!((e.posted.len(), e.rejected.len()), (0, 2));
            let e = s
                .post_send_list(&qp, [InlineSend::new(&small), InlineSend::new(&small), InlineSend::new(&big)])
                .expect_err("65 > 64 inline");
            assert!(matches!(e.error, Error::InlineTooLarge { .. }), "{:?}", e.error);
            assert_eq!((e.posted.len(), e.rejected.len()), (0, 3));
            assert!(sends(&shared).is_empty(), "something reached the provider: {:?}", sends(&shared));
            assert_eq!(shared.sq.outstanding(), 0);
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok());
    });
}

/// A randomized model of one QP's send queue under post lists (all signaled or all unsignaled),
/// single scope posts and owned posts, the provider accepting or refusing (at an index, `bad_wr`
/// NULL, foreign), a device that executes in order and delivers completions of signaled
/// requests late, duplicated or stale, and tokens waited (timeout 0), dropped and forgotten in
/// any order. After every step: the tokens a list returned are exactly the requests the
/// provider took; the provider never holds more than the queue's depth (a slot is free once a
/// completion covering it was polled) nor a run of unsignaled requests longer than depth/2 - 1;
/// a successful wait is for a request a polled completion covers. After the scope: settled.
#[test]
fn a_scope_under_a_random_mix_of_lists_refusals_and_completions_keeps_its_promises() {
    bounded(120, || {
        let w = World::new();
        // What the mix exercised: lists cut short with a prefix posted, lists kept whole after an
        // unnamed refusal, successful waits, duplicated completions.
        let (mut cut, mut kept_whole, mut waited, mut dups) = (0, 0, 0, 0);
        for (k, depth) in [1u32, 2, 3, 4, 6, 8, 16].into_iter().enumerate() {
            for seed in 1..=5u64 {
                let qpn = 0xc00 + (k as u32) * 0x10 + seed as u32;
                let (cq, fake) = w.cq();
                let (qp, shared) = w.rc_qp(qpn, depth, &cq);
                let se = (depth / 2).max(1) as usize;
                let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(depth) | 1);
                let r = scope_with_timeout(Duration::from_millis(100), |s| {
                    // Indices (into `sends`) of the completions pushed to the CQ, in order.
                    let mut pushed: Vec<usize> = Vec::new();
                    let mut executed = 0usize;
                    let mut tokens: Vec<(crate::scope::Token<'_, LocalBuf<'static>>, u64)> = Vec::new();
                    let mut owned = Vec::new();
                    let mut owned_taken = 0usize;
                    for step in 0..300 {
                        let before = sends(&shared).len();
                        let answer = match rng.below(10) {
                            0 => Some(Answer::RefuseNull),
                            1 => Some(Answer::RefuseNamingOther),
                            2 | 3 => Some(Answer::RefuseAt(0)),
                            _ => None,
                        };
                        match rng.below(12) {
                            0..=3 => {
                                let n = 1 + rng.below(depth as u64) as usize;
                                let answer = match answer {
                                    Some(Answer::RefuseAt(_)) => Some(Answer::RefuseAt(rng.below(n as u64) as usize)),
                                    a => a,
                                };
                                if let Some(a) = answer {
                                    answer_next(&shared, a);
                                }
                                let posted = if rng.below(2) == 0 {
                                    let list: Vec<_> = (0..n as u64)
                                        .map(|i| Write::new(w.local(0x1000 + 8 * i, 8), remote()))
                                        .collect();
                                    s.post_send_list(&qp, list).unwrap_or_else(|e| e.posted)
                                } else {
                                    let list: Vec<_> = (0..n as u64).map(|i| unsig(w, 0x1000 + 8 * i)).collect();
                                    s.post_send_list(&qp, list).unwrap_or_else(|e| e.posted)
                                };
                                with_fake_qp(shared.as_ptr(), |f| f.answers.clear());
                                let took = sends(&shared)[before..].to_vec();
                                assert_eq!(
                                    posted.len(),
                                    took.len(),
                                    "step {step}: tokens for exactly what the provider took"
                                );
                                match answer {
                                    Some(Answer::RefuseAt(i)) if i > 0 && took.len() == i => cut += 1,
                                    Some(Answer::RefuseNull | Answer::RefuseNamingOther) if took.len() == n => {
                                        kept_whole += 1
                                    }
                                    _ => {}
                                }
                                for (t, (seq, _)) in posted.into_iter().zip(took) {
                                    tokens.push((t, seq));
                                }
                            }
                            4 | 5 => {
                                if let Some(a) = answer {
                                    answer_next(&shared, a);
                                }
                                let res = if rng.below(2) == 0 {
                                    s.post_send(&qp, Write::new(w.local(0x2000, 8), remote()))
                                        .map_err(|e| e.wr.is_some())
                                } else {
                                    s.post_send(&qp, unsig(w, 0x2000)).map_err(|e| e.wr.is_some())
                                };
                                with_fake_qp(shared.as_ptr(), |f| f.answers.clear());
                                let took = sends(&shared).len() - before;
                                match res {
                                    Ok(t) => tokens.push((t, sends(&shared).last().unwrap().0)),
                                    Err(back) => assert_eq!(back, took == 0, "step {step}: handed back iff not taken"),
                                }
                            }
                            6 => {
                                if let Some(a) = answer {
                                    answer_next(&shared, a);
                                }
                                let res = qp.post_send_owned(Write::new(w.local(0x3000, 8), remote()).unsignaled());
                                with_fake_qp(shared.as_ptr(), |f| f.answers.clear());
                                owned_taken += sends(&shared).len() - before;
                                if let Ok(t) = res {
                                    owned.push(t);
                                }
                            }
                            7 | 8 => {
                                // The device executes up to the next signaled request it holds.
                                let all = sends(&shared);
                                if let Some(i) = (executed..all.len()).find(|&i| all[i].1) {
                                    fake.complete(wc_of(qpn, all[i].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                                    pushed.push(i);
                                    executed = i + 1;
                                } else if let Some(&i) = pushed.last() {
                                    // A duplicate of the last completion (stale once polled).
                                    fake.complete(wc_of(qpn, all[i].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                                    pushed.push(i);
                                    dups += 1;
                                }
                            }
                            9 | 10 if !tokens.is_empty() => {
                                let i = rng.below(tokens.len() as u64) as usize;
                                let (t, seq) = tokens.swap_remove(i);
                                match rng.below(4) {
                                    0 => drop(t),
                                    1 => std::mem::forget(t),
                                    _ => match s.wait(t, Duration::ZERO) {
                                        Ok((c, _)) => {
                                            assert!(c.is_success(), "step {step}: {c:?}");
                                            let polled = pushed.len() - fake.left();
                                            let all = sends(&shared);
                                            let covered = pushed[..polled].iter().map(|&p| all[p].0).max();
                                            assert!(
                                                covered.is_some_and(|c| c >= seq),
                                                "step {step}: request {seq} handed back, polled completions cover up to {covered:?}"
                                            );
                                            waited += 1;
                                        }
                                        Err(e) => tokens.push((e.token, seq)),
                                    },
                                }
                            }
                            _ => {
                                let _ = cq.take_all();
                            }
                        }
                        // The provider's view.
                        let all = sends(&shared);
                        let polled = pushed.len() - fake.left();
                        let freed = pushed[..polled].iter().max().map_or(0, |&p| p + 1);
                        assert!(
                            all.len() - freed <= depth as usize,
                            "step {step}: the provider holds {} requests on a queue {depth} deep",
                            all.len() - freed
                        );
                        let run = longest_unsignaled_run(&all);
                        assert!(run < se.max(1), "step {step}: a run of {run} unsignaled requests, depth {depth}");
                    }
                    tokens.into_iter().for_each(|(t, _)| std::mem::forget(t));
                    // The device executes what it holds up to its last signaled request (the
                    // rest, an unsignaled tail, the drain's reset settles).
                    let all = sends(&shared);
                    if let Some(i) = (executed..all.len()).rev().find(|&i| all[i].1) {
                        fake.complete(wc_of(qpn, all[i].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                    }
                    (owned, owned_taken)
                });
                // The scope's own requests are settled: after a reset nothing is outstanding;
                // otherwise only owned requests may be.
                match r {
                    Ok((owned, owned_taken)) => {
                        assert!(
                            shared.sq.outstanding() as usize <= owned_taken,
                            "depth {depth} seed {seed}: {} outstanding, {owned_taken} owned",
                            shared.sq.outstanding()
                        );
                        drop(owned);
                    }
                    Err(Error::QpBroken { .. }) => assert!(settled(&shared), "{:?}", shared.outstanding()),
                    Err(e) => panic!("depth {depth} seed {seed}: {e:?}"),
                }
            }
        }
        assert!(cut > 20 && kept_whole > 20 && waited > 50 && dups > 20, "{cut} {kept_whole} {waited} {dups}");
    });
}

// ---------------------------------------------------------------------------------------------
// SendLane::post_list

/// A lane's list of 4 (signaled every 2nd: requests 1 and 3) refused at each index in turn:
/// the provider's prefix is posted, the rest not; a prefix whose last request is signaled is
/// covered (its completion settles the lane, no reset), an unsignaled one is an uncovered tail
/// that a later signaled request covers. A list that does not fit the queue's room posts
/// nothing.
#[test]
fn a_lanes_list_refused_at_each_index_posts_and_covers_exactly_the_prefix() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xb10, 8, &cq);
        let r = scope_with_timeout(Duration::from_secs(3), |s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let wrs: Vec<_> = (0..4).map(|i| Read::new(w.local_mut(0x1000 + i * 64, 64), remote())).collect();
            let mut list = lane.prepare_list(wrs, 2).expect("list");
            let mut one = lane.prepare(Write::new(w.local(0x5000, 8), remote())).expect("prepared");
            for at in 0..4usize {
                let before = sends(&shared).len();
                answer_next(&shared, Answer::RefuseAt(at));
                lane.post_list(&mut list).expect_err("refused");
                let took = sends(&shared)[before..].to_vec();
                assert_eq!(took.len(), at);
                assert_eq!(lane.outstanding(), at as u64, "at {at}: exactly the prefix is posted");
                match took.iter().rposition(|t| t.1) {
                    Some(j) => {
                        fake.complete(wc_of(0xb10, took[j].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
                        cq.take_all().unwrap();
                        assert_eq!(lane.outstanding(), (at - j - 1) as u64, "at {at}: covered up to {j}");
                    }
                    None => assert_eq!(lane.outstanding(), at as u64),
                }
                if lane.outstanding() > 0 {
                    let t = lane.post(&mut one).expect("posted");
                    let seq = sends(&shared).last().unwrap().0;
                    fake.complete(wc_of(0xb10, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                    assert!(lane.wait(t, Duration::from_secs(1)).expect("done").is_success());
                }
                assert_eq!(lane.outstanding(), 0);
            }
            // The queue 8 deep: two lists fill it, the third does not fit and posts nothing.
            let t1 = lane.post_list(&mut list).expect("4");
            let t2 = lane.post_list(&mut list).expect("8");
            let before = sends(&shared).len();
            let e = lane.post_list(&mut list).expect_err("12 > 8");
            assert!(matches!(e, Error::QueueFull { .. }), "{e:?}");
            assert_eq!(sends(&shared).len(), before);
            let last = sends(&shared).last().unwrap().0;
            fake.complete(wc_of(0xb10, last, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
            assert!(lane.wait(t2, Duration::from_secs(1)).expect("done").is_success());
            assert!(lane.wait(t1, Duration::from_secs(1)).expect("implied").is_success());
            list.into_inner().expect("all complete");
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok(), "no reset was needed");
    });
}

/// A lane's list refused with `bad_wr` naming no request of the list (a provider's mistake)
/// counts every request posted and none covered: the list is not handed back before a later
/// signaled request covers it.
#[test]
fn a_lanes_list_refused_naming_another_request_keeps_the_whole_list() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xb11, 8, &cq);
        let r = scope(|s| {
            let mut lane = s.send_lane(&mut qp).expect("lane");
            let wrs: Vec<_> = (0..3).map(|i| Read::new(w.local_mut(0x1000 + i * 64, 64), remote())).collect();
            let mut list = lane.prepare_list(wrs, 1).expect("list");
            answer_next(&shared, Answer::RefuseNamingOther);
            lane.post_list(&mut list).expect_err("refused");
            assert_eq!(lane.outstanding(), 3);
            let list = list.into_inner().expect_err("may be queued");
            // The device completes the list's first signaled request: 2 and 3 still may run.
            let took = sends(&shared);
            fake.complete(wc_of(0xb11, took[0].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
            cq.take_all().unwrap();
            assert_eq!(lane.outstanding(), 2);
            let list = list.into_inner().expect_err("still may be written");
            fake.complete(wc_of(0xb11, took[2].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
            cq.take_all().unwrap();
            assert_eq!(lane.outstanding(), 0);
            list.into_inner().expect("complete");
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok());
    });
}

// ---------------------------------------------------------------------------------------------
// Receives

/// Scope receives: one refused naming it (back at once, not recorded), one refused with
/// `bad_wr` NULL (kept, uncovered), one refused naming another request (kept); three taken.
/// The device completes the taken ones in reverse order, then the two kept ones (they were
/// queued after all): every token gets its own completion, and the scope ends without a reset.
#[test]
fn scope_receives_refused_every_way_then_completed_in_any_order() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb20, 8, &cq);
        let r = scope_with_timeout(Duration::from_secs(3), |s| {
            answer_next(&shared, Answer::RefuseAt(0));
            let e = s.post_recv(&qp, Recv::new(w.local_mut(0x1000, 64))).expect_err("named");
            assert!(e.wr.is_some());
            assert_eq!(shared.rq.outstanding(), 0);
            answer_next(&shared, Answer::RefuseNull);
            let e = s.post_recv(&qp, Recv::new(w.local_mut(0x2000, 64))).expect_err("NULL");
            assert!(e.wr.is_none());
            answer_next(&shared, Answer::RefuseNamingOther);
            let e = s.post_recv(&qp, Recv::new(w.local_mut(0x3000, 64))).expect_err("other");
            assert!(e.wr.is_none());
            assert_eq!(shared.rq.outstanding(), 2, "both kept");
            let toks: Vec<_> = (0..3u64)
                .map(|k| s.post_recv(&qp, Recv::new(w.local_mut(0x4000 + 64 * k, 64))).expect("taken"))
                .collect();
            // Receive numbers: 0 (NULL), 1 (other), 2..5 the tokens'.
            for seq in [4u64, 3, 2] {
                fake.complete(recv_wc(0xb20, seq, sys::IBV_WC_SUCCESS));
            }
            for (k, t) in toks.into_iter().enumerate().rev() {
                let (c, v) = s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("own completion");
                assert!(c.is_success());
                assert_eq!(v.addr(), 0x4000 + 64 * k as u64);
            }
            assert_eq!(shared.rq.outstanding(), 2, "later receives complete nothing of the kept ones");
            fake.complete(recv_wc(0xb20, 1, sys::IBV_WC_SUCCESS));
            fake.complete(recv_wc(0xb20, 0, sys::IBV_WC_SUCCESS));
            cq.take_all().unwrap();
            assert_eq!(shared.rq.outstanding(), 0);
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok(), "no reset was needed");
        assert!(settled(&shared));
    });
}

/// Owned receives into chunks: one refused with `bad_wr` NULL is parked with the queue (no
/// request back); later receives completing (in any order) do not release it, nor does a
/// duplicate of theirs; its own completion does. One refused naming it is handed back with
/// its chunk and nothing is parked.
#[test]
fn an_owned_receive_refused_without_a_name_is_parked_until_its_own_completion() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb21, 8, &cq);
        let mut chunks = fake_region(w, 4096).into_chunks(256).expect("chunks").into_iter();
        answer_next(&shared, Answer::RefuseAt(0));
        let e = qp.post_recv_owned(Recv::new(chunks.next().unwrap())).expect_err("named");
        assert!(e.wr.is_some(), "not queued: handed back");
        assert_eq!((shared.rq.outstanding(), shared.rq.parked()), (0, 0));
        answer_next(&shared, Answer::RefuseNull);
        let e = qp.post_recv_owned(Recv::new(chunks.next().unwrap())).expect_err("NULL");
        assert!(e.wr.is_none());
        assert_eq!((shared.rq.outstanding(), shared.rq.parked()), (1, 1), "kept with the queue");
        let t1 = qp.post_recv_owned(Recv::new(chunks.next().unwrap())).expect("taken");
        let t2 = qp.post_recv_owned(Recv::new(chunks.next().unwrap())).expect("taken");
        fake.complete(recv_wc(0xb21, 2, sys::IBV_WC_SUCCESS));
        fake.complete(recv_wc(0xb21, 1, sys::IBV_WC_SUCCESS));
        fake.complete(recv_wc(0xb21, 2, sys::IBV_WC_SUCCESS));
        assert!(t1.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("1").0.is_success());
        assert!(t2.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("2").0.is_success());
        cq.take_all().unwrap();
        assert_eq!(shared.rq.parked(), 1, "the refused receive's chunk released by another's completion");
        fake.complete(recv_wc(0xb21, 0, sys::IBV_WC_SUCCESS));
        cq.take_all().unwrap();
        assert_eq!((shared.rq.outstanding(), shared.rq.parked()), (0, 0));
    });
}

/// Shared receive queue receives refused every way: named (handed back, not recorded), `bad_wr`
/// NULL and foreign (kept with the SRQ, parked), then taken ones completed in reverse order by
/// a QP on the SRQ: the kept chunks are released only by their own completions.
#[test]
fn srq_receives_refused_every_way_are_kept_until_their_own_completion() {
    bounded(20, || {
        let w = World::new();
        // SAFETY: the world's fake context is leaked and only this test's; its `post_srq_recv`
        // (what the inline `ibv_post_srq_recv` calls) becomes this module's fake.
        unsafe { (*w.ctxp).ops.post_srq_recv = Some(fake_srq_recv) };
        let (cq, fake) = w.cq();
        let srq = w.srq(4);
        let _qp = w.posting_qp(0xb22, 4, &cq, Some(Arc::clone(&srq)));
        let handle = Srq { shared: Arc::clone(&srq) };
        let mut chunks = fake_region(w, 4096).into_chunks(256).expect("chunks").into_iter();
        srq_answer_next(w, Answer::RefuseAt(0));
        let e = handle.post_recv_owned(Recv::new(chunks.next().unwrap())).expect_err("named");
        assert!(e.wr.is_some());
        assert_eq!((srq.rq.outstanding(), srq.rq.parked()), (0, 0));
        srq_answer_next(w, Answer::RefuseNull);
        handle.post_recv_owned(Recv::new(chunks.next().unwrap())).expect_err("NULL");
        srq_answer_next(w, Answer::RefuseNamingOther);
        handle.post_recv_owned(Recv::new(chunks.next().unwrap())).expect_err("other");
        assert_eq!((srq.rq.outstanding(), srq.rq.parked()), (2, 2), "both kept");
        let t2 = handle.post_recv_owned(Recv::new(chunks.next().unwrap())).expect("taken");
        let t3 = handle.post_recv_owned(Recv::new(chunks.next().unwrap())).expect("taken");
        let e = handle.post_recv_owned(Recv::new(chunks.next().unwrap())).expect_err("full: 4 outstanding");
        assert!(matches!(e.error, Error::QueueFull { .. }) && e.wr.is_some(), "{:?}", e.error);
        fake.complete(recv_wc(0xb22, 3, sys::IBV_WC_SUCCESS));
        fake.complete(recv_wc(0xb22, 2, sys::IBV_WC_SUCCESS));
        assert!(t2.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("2").0.is_success());
        assert!(t3.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("3").0.is_success());
        assert_eq!(srq.rq.parked(), 2, "kept chunks released by other receives' completions");
        fake.complete(recv_wc(0xb22, 1, sys::IBV_WC_SUCCESS));
        fake.complete(recv_wc(0xb22, 0, sys::IBV_WC_WR_FLUSH_ERR));
        srq.poll().unwrap();
        assert_eq!((srq.rq.outstanding(), srq.rq.parked()), (0, 0));
    });
}

/// A receive-lane post refused with `bad_wr` naming another request (a provider's mistake)
/// stays posted: the buffer is not readable before the receive completes.
#[test]
fn a_receive_lane_post_refused_naming_another_request_is_kept() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (mut qp, shared) = w.rc_qp(0xb23, 8, &cq);
        let r = scope(|s| {
            let mut rlane = s.recv_lane(&mut qp).expect("lane");
            let mut p = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
            answer_next(&shared, Answer::RefuseNamingOther);
            rlane.post(&mut p).expect_err("refused");
            assert_eq!(rlane.outstanding(), 1);
            assert!(p.received().is_none(), "possibly queued");
            let seq = *recvs(&shared).last().unwrap();
            fake.complete(wc_of(0xb23, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
            cq.take_all().unwrap();
            assert!(p.received().is_some());
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok());
    });
}

// ---------------------------------------------------------------------------------------------
// Fakes of this suite

/// A region of `len` bytes over a fake registration of the world's PD.
fn fake_region(w: &'static World, len: usize) -> Mr<WindowBindable> {
    Mr::fake(&w.pd, w.raw_mr(&w.pd), len)
}

/// How [`odd_send`] refuses a list: `bad_wr` one past its last request, inside its second
/// request, one request before its first, or exactly at request `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Odd {
    PastEnd,
    Inside,
    Before,
    At(usize),
}

static ODD: Mutex<Vec<(usize, VecDeque<Odd>)>> = Mutex::new(Vec::new());

fn odd_next(qp: &QpShared, odd: Odd) {
    let mut all = ODD.lock().unwrap();
    let addr = qp.as_ptr() as usize;
    match all.iter_mut().find(|(a, _)| *a == addr) {
        Some((_, q)) => q.push_back(odd),
        None => all.push((addr, VecDeque::from([odd]))),
    }
}

/// A provider whose `ibv_post_send` refuses as [`odd_next`] said (the requests before the
/// named one taken; all of them otherwise), recording what it took as [`fake_send`] does.
///
/// # Safety
/// As `ibv_post_send` is called.
unsafe extern "C" fn odd_send(qp: *mut sys::ibv_qp, wr: *mut sys::ibv_send_wr, bad: *mut *mut sys::ibv_send_wr) -> i32 {
    let mut list = Vec::new();
    let mut p = wr;
    while !p.is_null() {
        list.push(p);
        // SAFETY: a request of the caller's valid list.
        p = unsafe { (*p).next };
    }
    let odd = {
        let mut all = ODD.lock().unwrap();
        all.iter_mut().find(|(a, _)| *a == qp as usize).and_then(|(_, q)| q.pop_front())
    };
    let size = std::mem::size_of::<sys::ibv_send_wr>();
    let (taken, named) = match odd {
        None => (list.len(), None),
        Some(Odd::At(i)) => (i, Some(list[i])),
        Some(Odd::PastEnd) => (list.len(), Some(list[list.len() - 1].wrapping_add(1))),
        Some(Odd::Inside) => (list.len(), Some(list[1].cast::<u8>().wrapping_add(size / 2).cast())),
        Some(Odd::Before) => (list.len(), Some(list[0].wrapping_sub(1))),
    };
    with_fake_qp(qp, |f| {
        for &w in &list[..taken] {
            // SAFETY: as above.
            let w = unsafe { &*w };
            f.sends.push((w.wr_id, w.send_flags & sys::IBV_SEND_SIGNALED != 0));
        }
    });
    match named {
        None => 0,
        Some(n) => {
            // SAFETY: the caller's valid out-pointer.
            unsafe { *bad = n };
            libc::EINVAL
        }
    }
}

static SRQ_ANSWERS: Mutex<Vec<(usize, VecDeque<Answer>)>> = Mutex::new(Vec::new());

/// The next answer of the fake `post_srq_recv` of the world `w`'s SRQs (one per test).
fn srq_answer_next(w: &World, a: Answer) {
    let mut all = SRQ_ANSWERS.lock().unwrap();
    let addr = w.ctxp as usize;
    match all.iter_mut().find(|(x, _)| *x == addr) {
        Some((_, q)) => q.push_back(a),
        None => all.push((addr, VecDeque::from([a]))),
    }
}

/// The fake provider's `ibv_post_srq_recv` of one receive: takes it, or refuses it as
/// [`srq_answer_next`] said.
///
/// # Safety
/// As `ibv_post_srq_recv` is called with one request.
unsafe extern "C" fn fake_srq_recv(
    srq: *mut sys::ibv_srq,
    wr: *mut sys::ibv_recv_wr,
    bad: *mut *mut sys::ibv_recv_wr,
) -> i32 {
    let a = {
        let mut all = SRQ_ANSWERS.lock().unwrap();
        // SAFETY: the caller's valid SRQ, of a fake context.
        let ctx = unsafe { (*srq).context } as usize;
        all.iter_mut().find(|(x, _)| *x == ctx).and_then(|(_, q)| q.pop_front())
    };
    let (named, ret) = match a.unwrap_or(Answer::Accept) {
        Answer::Accept => return 0,
        Answer::RefuseAt(_) => (wr, libc::ENOMEM),
        Answer::RefuseNull => (std::ptr::null_mut(), libc::EINVAL),
        Answer::RefuseNamingOther => (other_request(), libc::EINVAL),
    };
    // SAFETY: the caller's valid out-pointer.
    unsafe { *bad = named };
    ret
}

/// The completions of a list's requests when one of them fails: the device reports an error
/// for request 1 (unsignaled: an error always completes), then flushes 2 and 3, then repeats
/// the flush of 2 (stale). Waited out of order, request 0 reads an implied success, 1 its
/// error, 2 and 3 their flushes: no token reads success for a request the device failed or
/// flushed, and the scope ends without a reset.
#[test]
fn a_lists_error_and_flushes_reach_their_own_tokens_whatever_the_order_of_waits() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb30, 16, &cq);
        let r = scope(|s| {
            let list: Vec<_> = (0..4u64).map(|k| unsig(w, 0x1000 + 64 * k)).collect();
            let toks = s.post_send_list(&qp, list).expect("taken");
            let took = sends(&shared);
            assert_eq!(took.len(), 4);
            assert!(!took[1].1, "request 1 unsignaled");
            fake.complete(wc_of(0xb30, took[1].0, sys::IBV_WC_REM_ACCESS_ERR, sys::IBV_WC_RDMA_WRITE));
            fake.complete(wc_of(0xb30, took[2].0, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RDMA_WRITE));
            fake.complete(wc_of(0xb30, took[3].0, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RDMA_WRITE));
            fake.complete(wc_of(0xb30, took[2].0, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RDMA_WRITE));
            let mut toks: Vec<_> = toks.into_iter().map(Some).collect();
            let mut got = [None; 4];
            for k in [3usize, 1, 0, 2] {
                let (c, v) =
                    s.wait(toks[k].take().unwrap(), Duration::from_secs(1)).map_err(|e| e.error).expect("done");
                assert_eq!(v.addr(), 0x1000 + 64 * k as u64);
                got[k] = Some(c.status());
            }
            let ok = |k: usize| got[k].unwrap() == crate::wc::WcStatus::Success;
            assert!(ok(0), "{got:?}");
            assert!(!ok(1) && !ok(2) && !ok(3), "a failed or flushed request read success: {got:?}");
            assert_eq!(got[1].unwrap(), crate::wc::WcStatus::from_raw(sys::IBV_WC_REM_ACCESS_ERR), "{got:?}");
            assert_eq!(got[2], got[3], "{got:?}");
        });
        assert!(r.is_ok(), "{r:?}");
        assert!(shared.check_usable().is_ok());
        assert!(settled(&shared));
    });
}

/// SEND_WITH_INVs to a peer on the QP's own device in post lists claim the bindings they
/// invalidate when built: a list whose later request fails its check (inline too large, or a
/// second invalidation of the same binding) gives every claim back; a list the provider
/// refuses at its second request keeps the first one's claim (posted) and gives the second's
/// back (certainly not posted).
#[test]
fn send_with_invalidate_claims_in_a_list_are_given_back_exactly_for_what_was_not_posted() {
    use crate::access::window;
    use crate::mw::{claim_remote_invalidation, release_remote_claim, Type2};
    use crate::wr::{BindMw, InlineSendInv};
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xb40, 16, &cq);
        shared.set_peer_on_device_for_test(true);
        let tag = shared.device_tag();
        let free = |k: u32| match claim_remote_invalidation(tag, k) {
            Ok(()) => {
                release_remote_claim(tag, k);
                true
            }
            Err(_) => false,
        };
        let mr = fake_region(w, 4096);
        let pd = crate::pd::Pd { inner: Arc::clone(&w.pd) };
        let big = [0u8; 65];
        let r = scope_with_timeout(Duration::from_millis(300), |s| {
            let mut bound = Vec::new();
            for off in [0u64, 64] {
                let mw = pd.alloc_mw::<Type2>().expect("type 2");
                let t = s.post_send(&qp, BindMw::new(mw, &mr, off, 64, window::WRITE)).expect("posted");
                fake.complete(wc_of(0xb40, sends(&shared).last().unwrap().0, sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW));
                bound.push(s.wait(t, Duration::from_secs(1)).expect("completed").1.expect("bound"));
            }
            let (k1, k2) = (bound[0].rkey(), bound[1].rkey());
            assert!(free(k1) && free(k2));
            let before = sends(&shared).len();
            let e = s
                .post_send_list(&qp, [InlineSendInv::new(b"x", k1), InlineSendInv::new(&big, k2)])
                .expect_err("inline too large");
            assert!(matches!(e.error, Error::InlineTooLarge { .. }), "{:?}", e.error);
            assert!(free(k1), "the first request's claim kept though nothing was posted");
            let e = s
                .post_send_list(&qp, [InlineSendInv::new(b"x", k1), InlineSendInv::new(b"y", k1)])
                .expect_err("a second invalidation of k1");
            assert!(matches!(e.error, Error::InvalidArgument { .. }), "{:?}", e.error);
            assert!(free(k1), "the first request's claim kept though nothing was posted");
            assert_eq!(sends(&shared).len(), before, "nothing reached the provider");
            answer_next(&shared, Answer::RefuseAt(1));
            let e = s
                .post_send_list(&qp, [InlineSendInv::new(b"x", k1), InlineSendInv::new(b"y", k2)])
                .expect_err("refused at 1");
            assert_eq!((e.posted.len(), e.rejected.len()), (1, 1));
            assert!(!free(k1), "the posted invalidation's claim given back");
            assert!(free(k2), "the refused invalidation's claim kept");
            fake.complete(wc_of(0xb40, sends(&shared).last().unwrap().0, sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND));
            for t in e.posted {
                assert!(s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("done").0.is_success());
            }
            bound
        });
        drop(r.expect("scope"));
    });
}
