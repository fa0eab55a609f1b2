//! Attacks on the scope (src/scope.rs), the scatter/gather checks (src/sgl.rs) and the work
//! requests (src/wr.rs) over the fake device: hostile safe programs whose scope must not
//! return (nor unwind) while the device may still use memory one of its requests names.
//!
//! The observation after each scope: every request the scope posted is complete in the
//! library's books (`outstanding() == (0, 0)` for what the scope posted), or the QP was forced
//! to RESET (`check_usable()` fails with `QpBroken`, the books flushed).

use super::*;
use crate::pd::PdId;
use crate::wr::{FetchAdd, InlineSend, Send as WrSend};
use crate::Error;

/// The QP's requests are all settled: complete, or flushed by a forced reset.
fn settled(shared: &QpShared) -> bool {
    shared.outstanding() == (0, 0)
}

/// A post list the provider refuses with `bad_wr` NULL (rxe's doorbell: everything may be
/// queued), then the closure panics: the scope must cover all of them before unwinding.
#[test]
fn list_refused_null_then_panic_is_drained_before_the_unwind() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa01, 16, &cq);
    answer_next(&shared, Answer::RefuseNull);
    let r = quiet(|| {
        scope_with_timeout(Duration::from_millis(20), |s| {
            let e = s
                .post_send_list(
                    &qp,
                    [Write::new(w.local(0x1000, 8), remote()), Write::new(w.local(0x2000, 8), remote())],
                )
                .expect_err("refused");
            assert_eq!((e.posted.len(), e.rejected.len()), (2, 0), "everything may be queued");
            drop(e);
            panic!("hostile closure");
        })
    });
    assert!(r.is_err(), "the panic was resumed");
    assert!(settled(&shared), "scope unwound with requests outstanding: {:?}", shared.outstanding());
    assert!(shared.check_usable().is_err(), "nothing covers them: the QP had to be reset");
}

/// A post list refused at its second request: the first is posted, its token forgotten; the
/// device completes it 100 ms later. The scope must wait for it.
#[test]
fn list_refused_in_the_middle_with_forgotten_tokens_waits_for_the_posted_prefix() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa02, 16, &cq);
    answer_next(&shared, Answer::RefuseAt(1));
    let started = std::time::Instant::now();
    let mut device = None;
    let r = scope(|s| {
        let e = s
            .post_send_list(
                &qp,
                [
                    Write::new(w.local(0x1000, 8), remote()),
                    Write::new(w.local(0x2000, 8), remote()),
                    Write::new(w.local(0x3000, 8), remote()),
                ],
            )
            .expect_err("refused at 1");
        assert_eq!((e.posted.len(), e.rejected.len()), (1, 2));
        let (seq, signaled) = sends(&shared)[0];
        assert!(signaled);
        std::mem::forget(e);
        device = Some(std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            fake.complete(wc_of(0xa02, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        }));
    });
    device.unwrap().join().unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert!(started.elapsed() >= Duration::from_millis(100), "returned before the completion");
    assert!(settled(&shared));
}

/// The scope closure spawns threads (`std::thread::scope`) that post on three QPs and forget
/// their tokens; nothing completes. Every QP must be settled (reset) when the scope returns.
#[test]
fn threads_inside_a_scope_posting_on_several_qps_are_all_drained() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let qps: Vec<_> = (0..3).map(|i| w.rc_qp(0xa10 + i, 64, &cq)).collect();
    let r = scope_with_timeout(Duration::from_millis(20), |s| {
        std::thread::scope(|ts| {
            for t in 0..6 {
                let qps = &qps;
                ts.spawn(move || {
                    for k in 0..8u64 {
                        let (qp, _) = &qps[(t + k as usize) % 3];
                        let tok = s
                            .post_send(qp, Write::new(w.local(0x1000 + 64 * k, 8), remote()).unsignaled())
                            .expect("posted");
                        std::mem::forget(tok);
                    }
                });
            }
        });
    });
    assert!(matches!(r, Err(Error::QpBroken { .. })), "{r:?}");
    for (_, shared) in &qps {
        assert!(settled(shared), "QP {:#x} left outstanding: {:?}", shared.qp_num(), shared.outstanding());
    }
}

/// Nested scopes on one QP: the inner one cannot drain its own request and forces a reset,
/// which flushes the outer scope's request too; the outer token then hands its view back with
/// the forced flush, and the outer scope ends with nothing outstanding.
#[test]
fn an_inner_scopes_forced_reset_flushes_the_outer_scopes_request() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa20, 16, &cq);
    let r = scope_with_timeout(Duration::from_millis(20), |outer| {
        let a = outer.post_send(&qp, Write::new(w.local(0x1000, 8), remote())).expect("outer posts");
        let inner = scope_with_timeout(Duration::from_millis(20), |s| {
            let b = s.post_send(&qp, Write::new(w.local(0x2000, 8), remote()).unsignaled()).expect("inner");
            std::mem::forget(b);
        });
        assert!(matches!(inner, Err(Error::QpBroken { .. })), "{inner:?}");
        assert!(settled(&shared));
        let (c, _view) = outer.wait(a, Duration::from_millis(100)).expect("flushed");
        assert_eq!(c.source(), crate::wc::CompletionSource::ForcedReset);
        assert!(!c.is_success());
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A value the closure owns panics in its drop at the closure's normal end (no panic before),
/// with a forgotten token in flight: the scope drains before resuming the panic.
#[test]
fn a_drop_that_panics_at_the_closures_end_is_resumed_only_after_the_drain() {
    struct Boom;
    impl Drop for Boom {
        fn drop(&mut self) {
            panic!("hostile drop");
        }
    }
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa30, 16, &cq);
    let r = quiet(|| {
        scope_with_timeout(Duration::from_millis(20), |s| {
            let _boom = Boom;
            let t = s.post_send(&qp, Write::new(w.local(0x1000, 8), remote())).expect("posted");
            std::mem::forget(t);
        })
    });
    assert!(r.is_err());
    assert!(settled(&shared), "{:?}", shared.outstanding());
}

/// A receive the provider refuses with `bad_wr` NULL (maybe queued), then a panic: drained.
#[test]
fn a_receive_refused_without_a_name_then_a_panic_is_drained() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa40, 16, &cq);
    answer_next(&shared, Answer::RefuseNull);
    let r = quiet(|| {
        scope_with_timeout(Duration::from_millis(20), |s| {
            let e = s.post_recv(&qp, Recv::new(w.local_mut(0x1000, 64))).expect_err("refused");
            assert!(e.wr.is_none(), "maybe queued: nothing handed back");
            panic!("hostile");
        })
    });
    assert!(r.is_err());
    assert!(settled(&shared), "{:?}", shared.outstanding());
}

/// Inline payloads at, over and under `max_inline_data` (64 on the fake), split in pieces,
/// zero-length, and more pieces than `max_send_sge` (4).
#[test]
fn inline_payload_limits() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa50, 64, &cq);
    let at = [1u8; 64];
    let over = [1u8; 65];
    let r = scope_with_timeout(Duration::from_millis(20), |s| {
        let before = sends(&shared).len();
        let t = s.post_inline(&qp, InlineSend::new(&at)).expect("exactly max_inline_data");
        std::mem::forget(t);
        let e = s.post_inline(&qp, InlineSend::new(&over)).expect_err("over");
        assert!(matches!(e.error, Error::InlineTooLarge { len: 65, max: 64, .. }), "{:?}", e.error);
        assert!(e.wr.is_some());
        let e = s.post_inline(&qp, InlineSend::gather([&at[..32], &over[..33]])).expect_err("over in pieces");
        assert!(matches!(e.error, Error::InlineTooLarge { .. }));
        let t = s.post_inline(&qp, InlineSend::new(&[])).expect("empty");
        std::mem::forget(t);
        let five = [&at[..1], &at[..1], &at[..1], &at[..1], &at[..1]];
        let e = s.post_inline(&qp, InlineSend::gather(five)).expect_err("5 entries");
        assert!(matches!(e.error, Error::TooManySges { n: 5, max: 4, .. }), "{:?}", e.error);
        let t = s.post_inline(&qp, InlineSend::gather([&at[..1], &[], &at[..1], &at[..1], &at[..1]])).expect("4");
        std::mem::forget(t);
        assert_eq!(sends(&shared).len() - before, 3, "only the accepted ones reached the provider");
    });
    assert!(matches!(r, Err(Error::QpBroken { .. })), "{r:?}");
    assert!(settled(&shared));
}

/// Scatter/gather lists: entries of two PDs (one of them empty), more than `max_send_sge`
/// non-empty entries, more than `u32::MAX` bytes in all, misaligned atomics: refused before the
/// provider, the request handed back.
#[test]
fn lists_and_atomics_refused_before_the_provider() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa60, 64, &cq);
    let other = |addr, len| LocalBuf::from_parts(addr, len, 9, OdpTag::default(), PdId::other_dummy());
    let r = scope(|s| {
        let e = s.post_send(&qp, WrSend::new((w.local(0x1000, 8), other(0x2000, 0)))).expect_err("other PD");
        assert!(matches!(e.error, Error::InvalidArgument { .. }) && e.wr.is_some(), "{:?}", e.error);
        let e = s.post_send(&qp, WrSend::new(other(0x2000, 0))).expect_err("other PD, empty");
        assert!(e.wr.is_some());
        let e = s.post_send(&qp, WrSend::new([w.local(0x1000, 1); 5])).expect_err("5 > 4");
        assert!(matches!(e.error, Error::TooManySges { .. }) && e.wr.is_some());
        let e = s.post_send(&qp, WrSend::new([w.local(0x1000, u32::MAX), w.local(0x1000, 1)])).expect_err("> u32::MAX");
        assert!(e.wr.is_some());
        let e = s.post_send_list(&qp, [WrSend::new([w.local(0x1000, 1 << 31); 2])]).expect_err("2^32 in a list");
        assert!(e.posted.is_empty() && e.rejected.len() == 1);
        for (res, rem) in [
            (w.local_mut(0x1004, 8), remote()),
            (w.local_mut(0x1000, 16), remote()),
            (w.local_mut(0x1000, 4), remote()),
            (w.local_mut(0x1000, 8), RemoteSlice::new(0x9004, 8, 1)),
            (w.local_mut(0x1000, 8), RemoteSlice::new(0x9000, 4, 1)),
        ] {
            let e = s.post_send(&qp, FetchAdd::new(res, rem, 1)).expect_err("misaligned atomic");
            assert!(matches!(e.error, Error::InvalidArgument { .. }) && e.wr.is_some(), "{:?}", e.error);
        }
    });
    assert!(r.is_ok(), "{r:?}");
    assert!(sends(&shared).is_empty(), "something reached the provider: {:?}", sends(&shared));
}

/// A post list refused with `bad_wr` naming no request of the list (a provider's mistake),
/// an empty list, then `Scope::flush` (the fake's ERR produces no flush completions) and a
/// post after it: nothing is handed back that may be queued, the flush times out, the later
/// post is refused, and the drain settles everything.
#[test]
fn list_naming_another_request_empty_list_and_posts_after_a_flush() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa70, 16, &cq);
    answer_next(&shared, Answer::RefuseNamingOther);
    let r = scope_with_timeout(Duration::from_millis(20), |s| {
        let e = s
            .post_send_list(&qp, [Write::new(w.local(0x1000, 8), remote()), Write::new(w.local(0x2000, 8), remote())])
            .expect_err("refused");
        assert_eq!((e.posted.len(), e.rejected.len()), (2, 0));
        drop(e);
        let empty: [Write<LocalBuf<'_>, RemoteAll>; 0] = [];
        let e = s.post_send_list(&qp, empty).expect_err("empty");
        assert!(matches!(e.error, Error::InvalidArgument { .. }));
        let f = s.flush(&qp, Duration::from_millis(20));
        assert!(matches!(f, Err(Error::Timeout { .. })), "{f:?}");
        let e = s.post_send(&qp, Write::new(w.local(0x3000, 8), remote())).expect_err("after flush");
        assert!(matches!(e.error, Error::QpBroken { .. }) && e.wr.is_some());
        let e = s.post_recv(&qp, Recv::new(w.local_mut(0x4000, 8))).expect_err("after flush");
        assert!(matches!(e.error, Error::QpBroken { .. }) && e.wr.is_some());
    });
    assert!(matches!(r, Err(Error::QpBroken { .. })), "{r:?}");
    assert!(settled(&shared), "{:?}", shared.outstanding());
}

/// Two scopes on two threads share a QP; one ends with its request never completing and
/// forces a reset while the other keeps posting: a refused post of the other hands its
/// request back, a completion it collects is the reset's flush (the fake device completes
/// nothing), and nothing stays outstanding once both ended. (Whether the posts overlap the
/// reset depends on the schedule: only the outcome is checked.)
#[test]
fn a_forced_reset_racing_another_scopes_posts() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = w.rc_qp(0xa80, 64, &cq);
    std::thread::scope(|ts| {
        let other = ts.spawn(|| {
            scope_with_timeout(Duration::from_millis(50), |s| {
                let mut refused = 0;
                let mut back = 0;
                for k in 0..200u64 {
                    match s.post_send(&qp, Write::new(w.local(0x10000 + 8 * k, 8), remote())) {
                        Ok(t) => {
                            if let Ok((c, _)) = s.wait(t, Duration::from_millis(1)) {
                                assert!(!c.is_success(), "the fake completes nothing: only a flush");
                                back += 1;
                            }
                        }
                        Err(e) => {
                            assert!(e.wr.is_some(), "{:?}", e.error);
                            refused += 1;
                        }
                    }
                }
                (refused, back)
            })
        });
        let r = scope_with_timeout(Duration::from_millis(5), |s| {
            std::mem::forget(s.post_send(&qp, Write::new(w.local(0x1000, 8), remote()).unsignaled()).unwrap());
        });
        assert!(matches!(r, Err(Error::QpBroken { .. })), "{r:?}");
        match other.join().unwrap() {
            Ok((refused, back)) => assert!(refused + back <= 200, "{refused} refused, {back} flushed"),
            Err(e) => assert!(matches!(e, Error::QpBroken { .. }), "{e:?}"),
        }
    });
    assert!(settled(&shared), "{:?}", shared.outstanding());
}
