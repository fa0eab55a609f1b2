//! Hostile programs against memory windows whose bind failed after it may have run, over the
//! fake device: the window handed back must not be one the device may still hold bound to a
//! region whose borrow ended.

use super::mw_attack_tests::{bind, deallocated_once, pd, qp, region};
use super::*;
use crate::mw::Type2;

/// A type 2 bind that completes flushed may have run (rxe executes a BIND_MW without waiting
/// for the requests ahead of it, and flushes its completion all the same): the window may be
/// bound to the region, whose borrow ends with the bind's result. A window still allocated then
/// keeps the device from deregistering the region (IBTA 10.6.7.2.6; rxe: EINVAL), which leaks
/// owned memory and aborts the process for borrowed memory (`Pd::with_registered`), with no
/// `mem::forget` in the program. So that window is deallocated at once (unbinding it wherever it
/// is) and a new window of the same PD handed back, which binds as any unbound window.
#[test]
fn a_type2_window_whose_bind_was_flushed_is_deallocated_and_replaced() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9d01, &cq);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let old = mw.as_ptr();
    let base = Arc::strong_count(&shared);
    let r = scope(|s| {
        let mw = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_WR_FLUSH_ERR).expect_err("failed");
        assert!(deallocated_once(old), "the window that may be bound is deallocated by the bind's result");
        assert_ne!(mw.as_ptr(), old, "a new window is handed back");
        assert!(!mw.maybe_bound(), "the new window was never bound");
        assert!(mw.same_pd(mr.pd()), "of the same PD");
        assert_eq!(Arc::strong_count(&shared), base, "the deallocated window let its QP go");
        let fresh = mw.as_ptr();
        let bound = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("the new window binds");
        assert_eq!(bound.mw().as_ptr(), fresh);
        bound.into_mw()
    });
    drop(r.expect("scope"));
}

/// A bind the device refused (`IBV_WC_MW_BIND_ERR`) bound nothing: the same window comes back,
/// not deallocated, and binds again.
#[test]
fn a_type2_window_whose_bind_was_refused_comes_back_itself() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9d02, &cq);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let p = mw.as_ptr();
    let r = scope(|s| {
        let mw = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_MW_BIND_ERR).expect_err("refused");
        assert_eq!(mw.as_ptr(), p, "the same window");
        assert!(!deallocated_once(p) && !mw.maybe_bound());
        let bound = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("binds again");
        assert_eq!(bound.mw().as_ptr(), p);
        bound.into_mw()
    });
    drop(r.expect("scope"));
    assert!(deallocated_once(p), "deallocated once, when dropped");
}

/// The type 1 analogue (`ibv_bind_mw`, `Scope::bind_mw`): a bind that completes flushed may have
/// run, leaving the window bound to the region (whose borrow ends with the scope) under the
/// rkey `ibv_inc_rkey(k)`. Handing the window back with `k` restored would let the region's
/// deregistration meet it, and the next bind of it would give `ibv_inc_rkey(k)` again, the key
/// the device may already hold for the range the failed bind named (a peer told it by
/// `Scope::advertise_window` would reach the new range). It is deallocated and a new window
/// handed back instead; a bind the device refused (`IBV_WC_MW_BIND_ERR`) hands back the window
/// itself with `k`.
#[test]
fn a_type1_window_whose_bind_was_flushed_is_deallocated_and_replaced() {
    use super::mw_attack_tests::deliver_last;
    use crate::access::window;
    use crate::mw::{inc_rkey, Type1};
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9d03, &cq);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type1>().expect("type 1");
    let (old, k) = (mw.as_ptr(), mw.raw_rkey());
    let r = scope(|s| {
        let t = s.bind_mw(&qp, mw, &mr, 0, 64, window::WRITE).expect("posted");
        deliver_last(fake, &shared, sys::IBV_WC_WR_FLUSH_ERR);
        let mw = s.wait(t, Duration::from_secs(5)).expect("completed").1.expect_err("failed");
        assert!(deallocated_once(old), "the window that may be bound is deallocated by the bind's result");
        assert_ne!(mw.as_ptr(), old, "a new window is handed back");
        let (fresh, k2) = (mw.as_ptr(), mw.raw_rkey());
        assert_ne!(inc_rkey(k2), inc_rkey(k), "its next bind does not give the key the old one may hold");
        let t = s.bind_mw(&qp, mw, &mr, 0, 64, window::WRITE).expect("posted");
        deliver_last(fake, &shared, sys::IBV_WC_MW_BIND_ERR);
        let mw = s.wait(t, Duration::from_secs(5)).expect("completed").1.expect_err("refused");
        assert_eq!((mw.as_ptr(), mw.raw_rkey()), (fresh, k2), "refused: the window itself, its rkey restored");
        assert!(!deallocated_once(fresh));
        mw
    });
    drop(r.expect("scope"));
}
