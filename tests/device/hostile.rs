//! Hostile programs, in safe code only, aimed at the promise "if it compiles in safe Rust, it
//! is sound": the device must never write memory that was freed, handed out or lent elsewhere,
//! and memory must never be freed while the device may still use it. Each test asserts the
//! correct behaviour; sentinels (bytes that must not change once a buffer is handed back) make a
//! late device write visible.
//!
//! - A window whose rkey value comes round again (256 rebinds of one type 2 window): a stale
//!   SEND_WITH_INV completion must not turn the rebound window into an "unbound" `Mw`, which
//!   would end the region's borrow while a peer can still write through it.
//! - An SRQ receive consumed by a QP that is then destroyed: its completion stays in the CQ and
//!   must still reach the SRQ's token (and a dropped token's chunk must stay parked until then).
//! - A QP forced to RESET by another thread's scope: the receives of this thread's scope come
//!   back, and the device never writes them afterwards.
//! - `Scope::flush` and then reuse of the flushed QP in the same scope.
//! - A forgotten lane, prepared READ and token: the scope returns only once the device is done.
//! - A type 2 bind whose token is dropped: the window is parked until the bind completed, then
//!   deallocated (the region deregisters, the advertised rkey is dead).
//! - A prepared receive posted twice: not handed out before its second post completed.
//! - An empty post list: refused before the provider, which walks a list from its head, sees it.
//! - A shared receive queue dropped on one thread while another thread's poll routes the
//!   receive a destroyed QP consumed from it: neither deadlocks.
//! - Invalidations rxe's kernel does not survive (a type 2 window invalidated when it is not
//!   bound): a LOCAL_INV after a peer's SEND_WITH_INV (received through the binding's QP,
//!   another QP, a destroyed QP, another context of the device), a SEND_WITH_INV to the
//!   sender's own device naming a window not bound, the same binding twice, or from a lane.

use std::sync::Barrier;
use std::time::Duration;

use typed_verbs::access::AccessSet;
use typed_verbs::access::{self, window};
use typed_verbs::mw::{Type2, WindowAdvert};
use typed_verbs::prelude::*;
use typed_verbs::wr::{BindMw, LocalInv, SendInv};

use crate::common::*;

/// An RC pair whose side `a` gives up quickly on a dead peer (timeout 10, one retry: ~30 ms on
/// rxe), so that sends towards a QP in ERR or RESET fail instead of retrying forever.
fn quick_pair(pd: &Pd, cq: &Cq, access: impl AccessSet, caps: QpCaps) -> RcPair {
    let a = pd.create_qp::<RC>(&QpConfig::new(cq).caps(caps)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(cq).caps(caps)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0x100).unwrap();
    let eb = b.endpoint(PORT, gid_index(), 0x200).unwrap();
    let a = connect_rc_with(
        a,
        access,
        &ea,
        &eb,
        |_| {},
        |rts| {
            rts.timeout = 10;
            rts.retry_cnt = 1;
            rts.rnr_retry = 1;
        },
    );
    let b = connect_rc(b, access, &eb, &ea);
    RcPair { a, b }
}

/// `e` is the refusal of a LOCAL_INV before the provider saw it, saying `why`.
fn assert_local_inv_refused(e: &Error, why: &str) {
    match e {
        Error::InvalidArgument { verb: "ibv_post_send (LOCAL_INV)", reason } => {
            assert!(reason.contains(why), "{reason}")
        }
        other => panic!("expected the LOCAL_INV refused, got {other:?}"),
    }
}

/// Binds the type 2 window `mw` to the 4 KiB region `target` through `qp`, writable.
fn bind_writable<'m>(
    qp: &Qp<RC, RTS>,
    mw: typed_verbs::mw::Mw<Type2>,
    target: &'m Mr<access::WindowBindable>,
) -> typed_verbs::mw::BoundMw<'m, Type2, window::Write> {
    scope(|s| {
        let t = s.post_send(qp, BindMw::new(mw, target, 0, 4096, window::WRITE)).unwrap();
        s.wait(t, WAIT).unwrap().1.expect("bind")
    })
    .unwrap()
}

/// A peer's SEND_WITH_INV invalidated a type 2 window that its owner still holds typed bound
/// (it never handed the receive completion to `BoundMw::invalidated_by`). A LOCAL_INV of it
/// would be the binding's second invalidation, which rxe (6.12 and 6.18) takes for a live
/// window: it dereferences the binding's NULL QP and the kernel crashes. It is refused before
/// the provider sees it, whether the receive completion was already collected or still sat in
/// the CQ, and the window then comes back through `invalidated_by` and binds again.
#[test]
fn a_local_invalidation_of_a_window_a_peer_invalidated_is_refused() {
    let WindowRig { pd, p, target, src, .. } = window_rig();
    let mut rbuf = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let bind = |mw| bind_writable(&p.b, mw, &target);
    let mut mw = pd.alloc_mw::<Type2>().unwrap();
    for collected_first in [true, false] {
        let bound = bind(mw);
        let rkey = bound.rkey();
        let (inv, bound) = scope(|s| {
            let rt = s.post_recv(&p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
            let t = s.post_send(&p.a, SendInv::new(src.slice(..16).unwrap(), rkey)).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
            // rxe writes the receive completion before it acknowledges the SEND: it is in the
            // CQ now, collected or not.
            let (collected, pending) =
                if collected_first { (Some(s.wait(rt, WAIT).unwrap().0), None) } else { (None, Some(rt)) };
            let refused = s.post_send(&p.b, LocalInv::new(bound)).unwrap_err();
            assert_local_inv_refused(&refused.error, "already invalidated by a peer's SEND_WITH_INV");
            let bound = refused.wr.expect("a refused request comes back").into_bound();
            let inv = match pending {
                Some(rt) => s.wait(rt, WAIT).unwrap().0,
                None => collected.expect("collected before the LOCAL_INV"),
            };
            (inv, bound)
        })
        .unwrap();
        assert_eq!(inv.invalidated_rkey(), Some(rkey), "{inv:?}");
        mw = bound.invalidated_by(&inv).expect("the peer invalidated it");
    }
    // Still usable: bound again and invalidated locally.
    let bound = bind(mw);
    let back = scope(|s| {
        let t = s.post_send(&p.b, LocalInv::new(bound)).unwrap();
        s.wait(t, WAIT).unwrap().1.is_ok()
    })
    .unwrap();
    assert!(back, "a window bound again is invalidated locally");
}

/// The peer learns a type 2 window's rkey from its advertisement, sent behind the bind on the
/// same QP, and invalidates it with SEND_WITH_INV before the bind's own completion is collected:
/// the invalidation is decoded first. The binding is watched from its post on, so a LOCAL_INV
/// is still refused (it crashed rxe's kernel: a second invalidation), and `invalidated_by`
/// takes the window back.
#[test]
fn an_invalidation_decoded_before_the_binds_completion_still_refuses_a_local_invalidation() {
    let WindowRig { pd, p, target, src, .. } = window_rig();
    let mut rbuf = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mut abuf = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mw = scope(|s| {
        let rt = s.post_recv(&p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let at = s.post_recv(&p.a, wr::Recv::new(abuf.slice_mut(..).unwrap())).unwrap();
        let mw = pd.alloc_mw::<Type2>().unwrap();
        let bt = s.post_send(&p.b, BindMw::new(mw, &target, 0, 4096, window::WRITE)).unwrap();
        let adv = s.advertise_window(&p.b, &bt).unwrap();
        assert!(s.wait(adv, WAIT).unwrap().0.is_success());
        let (c, buf) = s.wait(at, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        let mut bytes = [0u8; WindowAdvert::LEN];
        buf.read_volatile_into(&mut bytes);
        let advert = WindowAdvert::decode(&bytes).unwrap();
        let t = s.post_send(&p.a, SendInv::new(src.slice(..16).unwrap(), advert.rkey)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let (inv, _) = s.wait(rt, WAIT).unwrap();
        assert_eq!(inv.invalidated_rkey(), Some(advert.rkey), "{inv:?}");
        // Only now is the bind's completion collected.
        let bound = s.wait(bt, WAIT).unwrap().1.expect("bind");
        let refused = s.post_send(&p.b, LocalInv::new(bound)).unwrap_err();
        assert_local_inv_refused(&refused.error, "already invalidated by a peer's SEND_WITH_INV");
        let bound = refused.wr.expect("a refused request comes back").into_bound();
        bound.invalidated_by(&inv).expect("the peer's invalidation is this binding's")
    })
    .unwrap();
    // Bound again and invalidated locally: it was really unbound.
    let bound = bind_writable(&p.b, mw, &target);
    assert!(scope(|s| {
        let t = s.post_send(&p.b, LocalInv::new(bound)).unwrap();
        s.wait(t, WAIT).unwrap().1.is_ok()
    })
    .unwrap());
}

/// rxe lets a SEND_WITH_INV through any QP of the device invalidate a window: here it arrives
/// on a second QP that shares the binding QP's receive CQ, and that QP is destroyed before
/// anything polls the CQ. The completion of the destroyed QP is still decoded when the
/// LOCAL_INV's poll takes it off the CQ, so the LOCAL_INV (the binding's second invalidation,
/// which crashes rxe's kernel) is refused.
#[test]
fn an_invalidation_through_a_qp_destroyed_since_still_refuses_a_local_invalidation() {
    let WindowRig { ctx, pd, cq, p, target, src } = window_rig();
    // The sender's completions on a CQ of their own: waiting for them polls nothing of `cq`.
    let cq_sender = ctx.create_cq(1024).unwrap();
    let q = rc_pair(&pd, &cq_sender, &cq, Access::NONE, QpCaps::default());
    let bound = bind_writable(&p.b, pd.alloc_mw::<Type2>().unwrap(), &target);
    let rkey = bound.rkey();
    let chunk = pd.alloc_mr(64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap().remove(0);
    drop(q.b.post_recv_owned(wr::Recv::new(chunk)).unwrap());
    let status = scope(|s| {
        let t = s.post_send(&q.a, SendInv::new(src.slice(..16).unwrap(), rkey)).unwrap();
        s.wait(t, WAIT).unwrap().0.status()
    })
    .unwrap();
    assert_eq!(status, WcStatus::Success);
    // The receive's completion is in `cq` (rxe writes it before it acknowledges the SEND),
    // not polled; its QP goes.
    let RcPair { a: q_a, b: q_b } = q;
    drop(q_b);
    let refused = scope(|s| s.post_send(&p.b, LocalInv::new(bound)).map(drop).unwrap_err()).unwrap();
    assert_local_inv_refused(&refused.error, "already invalidated by a peer's SEND_WITH_INV");
    drop((refused, q_a));
}

/// rxe's rkeys are the device's: a SEND_WITH_INV received by a QP of another context of the
/// same device (another PD, another CQ) invalidates the window too (rxe checks neither the QP
/// nor the PD of an invalidation). The receive's completion, decoded by that context's CQ, is
/// noted for the device, so the window's own LOCAL_INV (the binding's second invalidation,
/// which crashes rxe's kernel) is refused, and `invalidated_by` takes the window back with the
/// other context's completion.
#[test]
fn an_invalidation_received_in_another_context_of_the_device_still_refuses_a_local_invalidation() {
    let WindowRig { pd, p, target, .. } = window_rig();
    let bound = bind_writable(&p.b, pd.alloc_mw::<Type2>().unwrap(), &target);
    let rkey = bound.rkey();
    // A second context of the device, with a PD, a CQ and an RC pair of its own.
    let ctx2 = open();
    let pd2 = ctx2.alloc_pd().unwrap();
    let cq2 = ctx2.create_cq(512).unwrap();
    let q = rc_pair(&pd2, &cq2, &cq2, Access::NONE, QpCaps::default());
    let mut rbuf = pd2.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mut src2 = pd2.alloc_mr(64, access::LOCAL_READ).unwrap();
    fill(&mut src2, 7);
    let (sent, inv) = scope(|s| {
        let rt = s.post_recv(&q.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&q.a, SendInv::new(src2.slice(..16).unwrap(), rkey)).unwrap();
        (s.wait(t, WAIT).unwrap().0, s.wait(rt, WAIT).unwrap().0)
    })
    .unwrap();
    assert!(sent.is_success(), "{sent:?}");
    assert!(inv.is_success(), "{inv:?}");
    assert_eq!(inv.invalidated_rkey(), Some(rkey), "the other context's receive invalidated the rkey: {inv:?}");
    let refused = scope(|s| s.post_send(&p.b, LocalInv::new(bound)).map(drop).unwrap_err()).unwrap();
    assert_local_inv_refused(&refused.error, "already invalidated by a peer's SEND_WITH_INV");
    let bound = refused.wr.expect("a refused request comes back").into_bound();
    let mw = bound.invalidated_by(&inv).expect("the other context's completion invalidated this binding");
    // The window binds again and is invalidated locally.
    let bound = bind_writable(&p.b, mw, &target);
    let back = scope(|s| {
        let t = s.post_send(&p.b, LocalInv::new(bound)).unwrap();
        s.wait(t, WAIT).unwrap().1.is_ok()
    })
    .unwrap();
    assert!(back, "a window bound again is invalidated locally");
}

/// Asserts `e` is the refusal of a SEND_WITH_INV for `why`.
fn assert_send_inv_refused(e: &Error, why: &str) {
    match e {
        Error::InvalidArgument { verb: "ibv_post_send (SEND_WITH_INV)", reason } => {
            assert!(reason.contains(why), "{reason}")
        }
        other => panic!("expected the SEND_WITH_INV refused, got {other:?}"),
    }
}

/// rxe's invalidation refuses only a window in state INVALID: a type 2 window that is not
/// bound (FREE: just allocated, or invalidated) takes it, and dereferences its NULL QP (the
/// kernel crashed on 6.12 with this program). A SEND_WITH_INV to a QP of the sender's own
/// device must name a live binding of the process's windows: here a window just allocated,
/// and the number after it, are refused.
#[test]
fn a_send_with_invalidate_of_an_unbound_type2_window_of_the_device_is_refused() {
    let WindowRig { pd, p, src, .. } = window_rig();
    let mut r1 = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mw = pd.alloc_mw::<Type2>().unwrap();
    let (refused, received) = scope(|s| {
        // A receive waits for it: without one the SEND is not executed (RNR).
        let rt = s.post_recv(&p.b, wr::Recv::new(r1.slice_mut(..).unwrap())).unwrap();
        let refused = s.post_send(&p.a, SendInv::new(src.slice(..16).unwrap(), mw.raw_rkey())).map(drop).unwrap_err();
        // So is an rkey of no window yet (the next number): a window allocated before the send
        // arrived would be FREE too.
        let next = ((mw.raw_rkey() >> 8) + 1) << 8;
        let e = s.post_send(&p.a, SendInv::new(src.slice(..16).unwrap(), next)).map(drop).unwrap_err().error;
        assert_send_inv_refused(&e, "is not bound under that rkey");
        // The receive is still usable: a plain send lands in it.
        let t = s.post_send(&p.a, wr::Send::new(src.slice(..16).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        (refused, s.wait(rt, WAIT).unwrap().0)
    })
    .unwrap();
    assert_send_inv_refused(&refused.error, "is not bound under that rkey");
    assert!(refused.wr.is_some(), "the request comes back");
    assert_eq!((received.is_success(), received.invalidated_rkey()), (true, None), "{received:?}");
    drop(mw);
}

/// The same program's SEND_WITH_INV of a bound window, twice: the second one would be the
/// binding's second invalidation (a kernel crash). It is refused, posted before or after the
/// first one's receive completion was collected, and so is a LOCAL_INV of the window while
/// the first is in flight; `invalidated_by` takes the window back.
#[test]
fn a_second_send_with_invalidate_of_one_binding_is_refused() {
    let WindowRig { pd, p, target, src, .. } = window_rig();
    let mut r1 = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mut mw = pd.alloc_mw::<Type2>().unwrap();
    for collected_first in [false, true] {
        let bound = bind_writable(&p.b, mw, &target);
        let rkey = bound.rkey();
        mw = scope(|s| {
            let rt = s.post_recv(&p.b, wr::Recv::new(r1.slice_mut(..).unwrap())).unwrap();
            let t = s.post_send(&p.a, SendInv::new(src.slice(..16).unwrap(), rkey)).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
            let (inv, rt) = if collected_first { (Some(s.wait(rt, WAIT).unwrap().0), None) } else { (None, Some(rt)) };
            let again = s.post_send(&p.a, SendInv::new(src.slice(..16).unwrap(), rkey)).map(drop).unwrap_err();
            assert_send_inv_refused(
                &again.error,
                "was already invalidated by a SEND_WITH_INV, or one of it is in flight",
            );
            let local = s.post_send(&p.b, LocalInv::new(bound)).map(drop).unwrap_err();
            // Invalidated by the peer (its receive completion decoded) or a SEND_WITH_INV of
            // this process in flight: both refusals send the window back through invalidated_by.
            assert_local_inv_refused(&local.error, "take the window back with BoundMw::invalidated_by");
            let bound = local.wr.expect("a refused request comes back").into_bound();
            let inv = match (inv, rt) {
                (Some(inv), _) => inv,
                (None, rt) => s.wait(rt.expect("the receive's token"), WAIT).unwrap().0,
            };
            bound.invalidated_by(&inv).expect("the first SEND_WITH_INV invalidated it")
        })
        .unwrap();
    }
}

/// A SEND_WITH_INV refused before the provider saw it (the send queue full) gives its claim
/// on the window back: posted again once there is room, it is let through and invalidates
/// the window.
#[test]
fn a_send_with_invalidate_refused_unposted_can_be_posted_again() {
    let WindowRig { ctx, pd, p, target, src, .. } = window_rig();
    let cq = ctx.create_cq(256).unwrap();
    let caps = QpCaps { max_send_wr: 2, ..QpCaps::default() };
    // Side a's receives complete on a CQ of their own: the SEND_WITH_INV's build polls a's
    // receive CQ empty (to see a peer's invalidation landed there), which must not collect the
    // two sends that fill a's send queue.
    let rcq = ctx.create_cq(64).unwrap();
    let a = pd.create_qp::<RC>(&QpConfig { recv_cq: &rcq, ..QpConfig::new(&cq).caps(caps) }).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps)).unwrap();
    let (ea, eb) = (a.endpoint(PORT, gid_index(), 0x1000).unwrap(), b.endpoint(PORT, gid_index(), 0x2000).unwrap());
    let q = RcPair { a: connect_rc(a, Access::NONE, &ea, &eb), b: connect_rc(b, Access::NONE, &eb, &ea) };
    let bound = bind_writable(&p.b, pd.alloc_mw::<Type2>().unwrap(), &target);
    let rkey = bound.rkey();
    let mut rbufs = pd.alloc_mr(4 * 64, access::LOCAL_RW).unwrap();
    let inv = scope(|s| {
        let mut bufs = rbufs.slice_mut(..).unwrap();
        let mut recvs = Vec::new();
        for _ in 0..3 {
            let (head, tail) = bufs.split_at(64).unwrap();
            recvs.push(s.post_recv(&q.b, wr::Recv::new(head)).unwrap());
            bufs = tail;
        }
        // Two sends fill the send queue until their completions are collected.
        let sends: Vec<_> =
            (0..2).map(|_| s.post_send(&q.a, wr::Send::new(src.slice(..16).unwrap())).unwrap()).collect();
        let full = s.post_send(&q.a, SendInv::new(src.slice(..16).unwrap(), rkey)).map(drop).unwrap_err();
        assert!(matches!(full.error, Error::QueueFull { .. }), "{:?}", full.error);
        for t in sends {
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        }
        let t = s.post_send(&q.a, full.wr.expect("handed back")).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let mut last = None;
        for r in recvs {
            last = Some(s.wait(r, WAIT).unwrap().0);
        }
        last.expect("three receives")
    })
    .unwrap();
    assert_eq!(inv.invalidated_rkey(), Some(rkey), "{inv:?}");
    bound.invalidated_by(&inv).expect("the SEND_WITH_INV posted again invalidated it");
}

/// A send lane re-posts its prepared request: a prepared SEND_WITH_INV naming a window of
/// the process on the sender's own device would invalidate it again at its second post (a
/// kernel crash), so preparing it is refused.
#[test]
fn a_send_lane_does_not_prepare_a_send_with_invalidate_of_a_window_of_the_device() {
    let WindowRig { pd, mut p, target, src, .. } = window_rig();
    let bound = bind_writable(&p.b, pd.alloc_mw::<Type2>().unwrap(), &target);
    let rkey = bound.rkey();
    let refused = scope(|s| {
        let lane = s.send_lane(&mut p.a).unwrap();
        lane.prepare(SendInv::new(src.slice(..16).unwrap(), rkey)).map(drop).unwrap_err()
    })
    .unwrap();
    assert_send_inv_refused(&refused.error, "to a peer on the sender's own device is not prepared");
    // The binding is untouched: invalidated locally.
    let back = scope(|s| {
        let t = s.post_send(&p.b, LocalInv::new(bound)).unwrap();
        s.wait(t, WAIT).unwrap().1.is_ok()
    })
    .unwrap();
    assert!(back);
}

/// The kernel's log since boot.
fn kernel_log() -> String {
    let out = std::process::Command::new("dmesg").output().expect("dmesg runs in the guest");
    assert!(out.status.success(), "dmesg: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A type 2 window bound through a QP keeps the QP: on rxe the device's window holds a
/// reference to it, which the QP's destroy waits 50 s for (`cleanup failed, err = -110` and a
/// kernel warning), then frees the QP anyway, and the window's deallocation later drops the
/// freed QP's reference again. Dropping the QPs before the window (the order of a struct that
/// declares its QP first) now destroys the QP after the window is deallocated.
#[test]
fn qps_dropped_before_their_bound_type2_window_are_destroyed_after_it() {
    let WindowRig { pd, p, target, .. } = window_rig();
    let bound = bind_writable(&p.b, pd.alloc_mw::<Type2>().unwrap(), &target);
    let before = kernel_log().matches("cleanup failed").count();
    drop(p);
    drop(bound);
    // The QPs are gone with the window: the region, which had the window, deregisters.
    target.deregister().map_err(|(e, _)| e).expect("the region deregisters once the window is gone");
    let log = kernel_log();
    assert_eq!(
        log.matches("cleanup failed").count(),
        before,
        "a QP's destroy waited for a window's reference: {}",
        log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
    );
}

/// A LOCAL_INV behind a request that fails completes with an error (the QP's flush), and
/// whether it ran is not known: rxe runs local operations without waiting for the requests
/// ahead of them to be acknowledged, and its flush reports every request of the queue as
/// failed. Had it run, a second LOCAL_INV would be the binding's second invalidation, which
/// crashes rxe's kernel. So the window comes back typed bound but can only be dropped: a second
/// LOCAL_INV, here through another QP of the PD, is refused. (On 6.12 in this arrangement the
/// first one had not run: without the refusal the second completes.)
#[test]
fn a_local_invalidation_that_failed_is_not_tried_again() {
    let WindowRig { pd, cq, p, target, src, .. } = window_rig();
    let other = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let bound = bind_writable(&p.b, pd.alloc_mw::<Type2>().unwrap(), &target);
    let rkey = bound.rkey();
    // A WRITE through a key no region has: the peer answers with an access error.
    let nowhere = RemoteSlice::<access::RemoteRw>::from_wire(0x1000, 64, rkey ^ 0x00ff_ff00);
    let (write, inv, bound) = scope(|s| {
        let w = s.post_send(&p.b, wr::Write::new(src.slice(..64).unwrap(), nowhere)).unwrap();
        let li = s.post_send(&p.b, LocalInv::new(bound)).unwrap();
        let write = s.wait(w, WAIT).unwrap().0.status();
        let (c, back) = s.wait(li, WAIT).unwrap();
        (write, c.status(), back.err())
    })
    .unwrap();
    assert_ne!(write, WcStatus::Success);
    let Some(bound) = bound else {
        // The LOCAL_INV completed before the WRITE's error: nothing to test on this run.
        assert_eq!(inv, WcStatus::Success);
        panic!("the LOCAL_INV completed successfully before the WRITE failed (WRITE {write:?})");
    };
    assert_ne!(inv, WcStatus::Success);
    let refused = scope(|s| s.post_send(&other.a, LocalInv::new(bound)).map(drop).unwrap_err()).unwrap();
    assert_local_inv_refused(&refused.error, "completed with an error after it may have run");
    drop(refused);
}

/// Sends 16 bytes of 0x11 from `qp` (towards a peer that cannot receive them) and returns the
/// completion status; the send must not succeed.
fn send_into_the_void(qp: &Qp<RC, RTS>, pd: &Pd) -> WcStatus {
    let mut src = pd.alloc_mr(16, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0x11);
    scope(|s| {
        let t = s.post_send(qp, wr::Send::new(src.slice(..).unwrap())).unwrap();
        s.wait(t, WAIT).unwrap().0.status()
    })
    .unwrap()
}

#[test]
fn a_recycled_invalidation_completion_does_not_unbind_a_rebound_window() {
    // The receiver of a SEND_WITH_INV hands `BoundMw::invalidated_by` the receive completion; it
    // compares only the rkey value. A type 2 window's rkey is `ibv_inc_rkey` of the last one:
    // 256 bindings later the value comes round. A completion kept from the first binding's
    // invalidation (`Completion` is `Copy`) must not unbind the 257th binding.
    let WindowRig { pd, p, mut target, src, .. } = window_rig();
    target.write_volatile_from(0, &[0x5a; 4096]).unwrap();
    let mut rbuf = pd.alloc_mr(64, access::LOCAL_RW).unwrap();

    let bind = |mw| bind_writable(&p.b, mw, &target);
    // Binding 0, invalidated by the peer's SEND_WITH_INV: keep that completion.
    let bound = bind(pd.alloc_mw::<Type2>().unwrap());
    let first_rkey = bound.rkey();
    let (old, _) = scope(|s| {
        let rt = s.post_recv(&p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&p.a, SendInv::new(src.slice(..16).unwrap(), first_rkey)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        s.wait(rt, WAIT).unwrap()
    })
    .unwrap();
    assert_eq!(old.invalidated_rkey(), Some(first_rkey), "{old:?}");
    let mut mw = bound.invalidated_by(&old).expect("the first binding was invalidated");
    // Bindings 1..=255, each invalidated locally.
    for _ in 1..256 {
        let bound = bind(mw);
        mw = scope(|s| {
            let t = s.post_send(&p.b, LocalInv::new(bound)).unwrap();
            s.wait(t, WAIT).unwrap().1.expect("local invalidation")
        })
        .unwrap();
    }
    // Binding 256: the rkey value of binding 0 again, bound, never invalidated.
    let bound = bind(mw);
    assert_eq!(bound.rkey(), first_rkey, "the rkey value came round");
    let remote = bound.remote(..).unwrap();
    let mw = match bound.invalidated_by(&old) {
        Err(still_bound) => {
            drop(still_bound);
            return;
        }
        Ok(mw) => mw,
    };
    // The window is typed unbound and the region is no longer borrowed, but a peer still
    // writes through the rkey, and the region cannot be deregistered.
    let status = scope(|s| {
        let t = s.post_send(&p.a, wr::Write::new(src.slice(..64).unwrap(), remote.slice(0, 64).unwrap())).unwrap();
        s.wait(t, WAIT).unwrap().0.status()
    })
    .unwrap();
    let mut seen = [0u8; 64];
    target.read_volatile_into(0, &mut seen).unwrap();
    let dereg = target.deregister().map(|()| "deregistered").map_err(|(e, mr)| {
        std::mem::forget(mr); // a window is bound to it: never freed
        e
    });
    drop(mw);
    panic!(
        "a stale SEND_WITH_INV completion unbound a live window: a peer WRITE through its rkey then \
         completed with {status:?} (target byte 0 now {:#x}), and deregistering the no-longer-borrowed \
         region gave {dereg:?}",
        seen[0]
    );
}

#[test]
fn an_srq_receive_consumed_by_a_destroyed_qp_still_completes_on_its_token() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let srq = pd.create_srq(16).unwrap();
    let caps = QpCaps { max_recv_wr: 0, max_recv_sge: 0, ..QpCaps::default() };
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps).srq(&srq)).unwrap();
    let (ea, eb) = (a.endpoint(PORT, gid_index(), 1).unwrap(), b.endpoint(PORT, gid_index(), 2).unwrap());
    let a = connect_rc(a, Access::NONE, &ea, &eb);
    let b = connect_rc(b, Access::NONE, &eb, &ea);
    // Two receives, each the only chunk of its region: the first kept, the second dropped.
    let chunk = |fill: u8| {
        let mut c = pd.alloc_mr(64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap().remove(0);
        c.as_mut_slice().fill(fill);
        c
    };
    let kept = srq.post_recv_owned(wr::Recv::new(chunk(0x5a))).unwrap();
    let dropped = srq.post_recv_owned(wr::Recv::new(chunk(0x5a))).unwrap();
    drop(dropped);
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    for tag in [1u8, 2] {
        src.as_mut_slice().fill(tag);
        scope(|s| {
            let t = s.post_send(&a, wr::Send::new(src.slice(..).unwrap())).unwrap();
            // The send completed: the receive on b's side is complete on the device, its
            // completion sits in the CQ, unpolled by anyone but this wait.
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        })
        .unwrap();
    }
    // b is destroyed with its receive completions (the SRQ's) still in the CQ.
    drop(b);
    let (c, buf) = kept.wait(WAIT).expect("the SRQ receive's completion reaches its token");
    assert!(c.is_success(), "{c:?}");
    assert!(buf.as_slice().iter().all(|&x| x == 1), "the first message landed in the kept receive");
    // The dropped token's receive completed too: nothing is outstanding on the SRQ.
    assert_eq!(srq.outstanding(), 0);
    // A new QP on the CQ finds nothing stale.
    let fresh = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    assert_eq!(cq.progress().unwrap(), 0);
    drop((fresh, a));
}

#[test]
fn a_forced_reset_by_another_threads_scope_never_lets_the_device_write_a_handed_back_buffer() {
    let r = rig();
    let p = quick_pair(&r.pd, &r.cq, Access::NONE, QpCaps::default());
    let mut dst = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    dst.as_mut_slice().fill(0x5a);
    let src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let posted = Barrier::new(2);
    let (mine, theirs) = std::thread::scope(|t| {
        let mine = t.spawn(|| {
            scope(|s| {
                let rt = s.post_recv(&p.b, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
                posted.wait();
                let (c, _buf) = s.wait(rt, WAIT).unwrap();
                c.status()
            })
        });
        let theirs = t.spawn(|| {
            posted.wait();
            // An unsignaled send ends this scope: its drain flushes and resets the shared QP.
            scope(|s| drop(s.post_send(&p.b, wr::Send::new(src.slice(..8).unwrap()).unsignaled()).unwrap()))
        });
        (mine.join().unwrap(), theirs.join().unwrap())
    });
    assert!(matches!(theirs, Err(Error::QpBroken { .. })), "{theirs:?}");
    let status = mine.expect("this thread's scope drained its own receive");
    assert_eq!(status, WcStatus::WrFlushErr, "the receive came back by the flush");
    // The peer's message must not reach the handed-back buffer.
    assert_ne!(send_into_the_void(&p.a, &r.pd), WcStatus::Success);
    std::thread::sleep(Duration::from_millis(100));
    assert!(dst.as_slice().iter().all(|&x| x == 0x5a), "the device wrote a buffer it had handed back");
}

#[test]
fn a_flushed_qp_refuses_posts_until_it_is_reset_and_never_writes_a_handed_back_buffer() {
    let r = rig();
    let p = quick_pair(&r.pd, &r.cq, Access::NONE, QpCaps::default());
    let mut dst = r.pd.alloc_mr(128, access::LOCAL_RW).unwrap();
    dst.as_mut_slice().fill(0x5a);
    let src = r.pd.alloc_mr(16, access::LOCAL_READ).unwrap();
    // A receive posted on the flushed QP would not be flushed by rxe 6.12 (it would stay posted
    // on the QP in ERR): the QP refuses it, and the scope ends with nothing outstanding.
    let ended = scope_with_timeout(Duration::from_secs(2), |s| {
        let (first, second) = dst.slice_mut(..).unwrap().split_at(64).unwrap();
        let t = s.post_recv(&p.b, wr::Recv::new(first)).unwrap();
        s.flush(&p.b, WAIT).unwrap();
        let (c, first) = s.wait(t, WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::WrFlushErr);
        // The QP is in ERR, its type still says RTS: every post is refused, the request handed back.
        let refused = s.post_recv(&p.b, wr::Recv::new(second)).map(drop).expect_err("a receive on the flushed QP");
        assert!(matches!(refused.error, Error::QpBroken { .. }), "{:?}", refused.error);
        assert!(refused.wr.is_some(), "the refused receive is handed back");
        let refused = s.post_send(&p.b, wr::Send::new(src.slice(..).unwrap())).map(drop).expect_err("a send");
        assert!(matches!(refused.error, Error::QpBroken { .. }), "{:?}", refused.error);
        let refused = p.b.post_send_owned(wr::InlineSend::new(b"x")).map(drop).expect_err("an owned send");
        assert!(matches!(refused.error, Error::QpBroken { .. }), "{:?}", refused.error);
        // A message for the flushed QP lands nowhere.
        assert_ne!(send_into_the_void(&p.a, &r.pd), WcStatus::Success);
        let mut seen = [0u8; 64];
        first.read_volatile_into(&mut seen);
        assert_eq!(seen, [0x5a; 64], "the device wrote a flushed receive buffer");
    });
    assert!(matches!(ended, Ok(())), "nothing was left outstanding: {ended:?}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(dst.as_slice().iter().all(|&x| x == 0x5a), "the device wrote a receive buffer of a flushed QP");
    // Reset, the QP takes posts again.
    let b = p.b.reset().map_err(|e| e.error).unwrap();
    let b = b.to_init(&ConnectedInit::new(PORT, Access::NONE)).map_err(|e| e.error).unwrap();
    let taken = scope(|s| {
        let t = s.post_recv(&b, wr::Recv::new(dst.slice_mut(..64).unwrap())).unwrap();
        s.flush(&b, WAIT).unwrap();
        s.wait(t, WAIT).unwrap().0.status()
    });
    assert_eq!(taken.unwrap(), WcStatus::WrFlushErr, "the receive posted after the reset, then flushed");
}

#[test]
// Forgetting is the attack: the guarantee must not depend on whether a type has a `Drop` impl
// today (the lane and its token have none).
#[allow(clippy::forget_non_drop)]
fn a_forgotten_lane_read_has_finished_when_its_scope_returns() {
    const LEN: usize = 1 << 20;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_read(), QpCaps::default());
    let mut remote = r.pd.alloc_mr(LEN, access::REMOTE_READ_ONLY).unwrap();
    fill(&mut remote, 3);
    let mut local = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut read = lane.prepare(wr::Read::new(local.slice_mut(..).unwrap(), remote.remote(..).unwrap())).unwrap();
        let t = lane.post(&mut read).unwrap();
        std::mem::forget(t);
        std::mem::forget(read);
        std::mem::forget(lane);
    })
    .expect("a signaled READ drains");
    // The scope returned: the device is done with `local`, all of it.
    assert!(local.as_slice() == remote.as_slice(), "the scope returned before the READ finished");
    fill(&mut remote, 99);
    std::thread::sleep(Duration::from_millis(100));
    assert!(local.as_slice() != remote.as_slice(), "the device read into `local` after its scope returned");
}

#[test]
fn a_dropped_type2_bind_token_parks_its_window_until_the_bind_completed() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let caps = QpCaps { max_inline_data: 64, ..QpCaps::default() };
    let p = rc_pair(&pd, &cq, &cq, Access::NONE.remote_write(), caps);
    let target = pd.alloc_mr(4096, access::WINDOW_BINDABLE).unwrap();
    let mut advert_buf = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let advert = scope(|s| {
        let rt = s.post_recv(&p.a, wr::Recv::new(advert_buf.slice_mut(..).unwrap())).unwrap();
        let mw = pd.alloc_mw::<Type2>().unwrap();
        let t = s.post_send(&p.b, BindMw::new(mw, &target, 0, 4096, window::WRITE)).unwrap();
        let adv = s.advertise_window(&p.b, &t).unwrap();
        drop(t);
        // Nothing polled the CQ since the bind was posted: its completion is not known yet,
        // so the dropped token's window is parked with the QP, not released.
        assert_eq!(p.b.parked_buffers(), 1, "the window of a bind not known complete is parked");
        assert!(s.wait(adv, WAIT).unwrap().0.is_success());
        let (c, buf) = s.wait(rt, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        let mut bytes = [0u8; WindowAdvert::LEN];
        buf.read_volatile_into(&mut bytes);
        WindowAdvert::decode(&bytes).unwrap()
    })
    .unwrap();
    // The advertisement was sent after the bind on its QP: the bind completed first, so the
    // parked window was released and deallocated by then (at the latest, by the scope's drain).
    let _ = cq.progress();
    assert_eq!(p.b.parked_buffers(), 0);
    let remote = advert.remote::<window::Write>().unwrap();
    let src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let status = scope(|s| {
        let t = s.post_send(&p.a, wr::Write::new(src.slice(..).unwrap(), remote.slice(0, 64).unwrap())).unwrap();
        s.wait(t, WAIT).unwrap().0.status()
    })
    .unwrap();
    assert_eq!(status, WcStatus::RemAccessErr, "the deallocated window's rkey is dead");
    target.deregister().map_err(|(e, _)| e).expect("no window is left bound to the region");
}

#[test]
fn a_prepared_receive_posted_twice_is_not_handed_out_before_its_second_post_completed() {
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(16, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(1);
    let mut src2 = r.pd.alloc_mr(16, access::LOCAL_READ).unwrap();
    src2.as_mut_slice().fill(2);
    let mut dst = r.pd.alloc_mr(16, access::LOCAL_RW).unwrap();
    scope(|s| {
        let mut recv = s.recv_lane(&mut p.b).unwrap();
        let mut prepared = recv.prepare(wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let t1 = recv.post(&mut prepared).unwrap();
        let t2 = recv.post(&mut prepared).unwrap();
        let sent = s.post_send(&p.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(sent, WAIT).unwrap().0.is_success());
        assert!(recv.wait(t1, WAIT).unwrap().is_success());
        // The first post completed, the second may still be written by the device.
        assert!(prepared.received().is_none(), "handed out while its second post is outstanding");
        let prepared = prepared.into_inner().expect_err("its second post is outstanding");
        let sent = s.post_send(&p.a, wr::Send::new(src2.slice(..).unwrap())).unwrap();
        assert!(s.wait(sent, WAIT).unwrap().0.is_success());
        assert!(recv.wait(t2, WAIT).unwrap().is_success());
        let mut got = [0u8; 16];
        prepared.received().expect("both posts completed").read_volatile_into(&mut got);
        assert_eq!(got, [2; 16]);
    })
    .unwrap();
}

#[test]
fn an_empty_post_list_is_refused_and_the_queue_goes_on() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut msg = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    fill(&mut msg, 7);
    let mut into = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let Err(err) = s.post_send_list(&p.a, std::iter::empty::<wr::Send<LocalBuf<'_>>>()) else {
            panic!("an empty post list must be refused");
        };
        assert_invalid(&err.error, "ibv_post_send", "an empty post list");
        assert!(err.posted.is_empty() && err.rejected.is_empty());
        assert_eq!(p.a.outstanding(), (0, 0), "nothing was posted");
        // The queue still takes requests: a SEND and its receive complete.
        let rt = s.post_recv(&p.b, wr::Recv::new(into.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&p.a, wr::Send::new(msg.slice(..).unwrap())).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        let (c, _) = s.wait(rt, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!(c.byte_len(), 64);
    })
    .unwrap();
    assert_eq!(into.as_slice(), msg.as_slice());
}

/// A QP attached to a shared receive queue consumes a receive (its token dropped: the 64 MiB
/// chunk is parked with the SRQ) and is destroyed before anything polls its CQ. One thread
/// then polls the CQ, which routes that completion to the SRQ through the destroyed QP's
/// record (releasing the chunk: a deregistration that keeps the thread there a while); the
/// other drops the last handle of the SRQ the moment its receive is no longer outstanding, so
/// that the routing's reference may be the SRQ's last, and its drop runs inside the routing.
/// The poll must return (it deadlocked when the routing held the CQ's list of destroyed QPs,
/// which the SRQ's drop locks to retire itself).
#[test]
fn an_srq_dropped_while_a_poll_routes_a_destroyed_qps_receive_does_not_deadlock() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let cq_s = ctx.create_cq(64).unwrap();
    let srq = pd.create_srq(4).unwrap();
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 0, max_recv_sge: 0, ..QpCaps::default() };
    let r = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps).srq(&srq)).unwrap();
    let s_caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, max_recv_sge: 1, ..caps };
    let s = pd.create_qp::<RC>(&QpConfig::new(&cq_s).caps(s_caps)).unwrap();
    let (es, er) = (s.endpoint(PORT, gid_index(), 11).unwrap(), r.endpoint(PORT, gid_index(), 13).unwrap());
    let (s, r) = (connect_rc(s, Access::NONE, &es, &er), connect_rc(r, Access::NONE, &er, &es));
    let chunk = pd.alloc_mr(64 << 20, access::LOCAL_RW).unwrap().into_chunks(64 << 20).unwrap().remove(0);
    drop(srq.post_recv_owned(wr::Recv::new(chunk)).unwrap());
    let mut src = pd.alloc_mr(8, access::LOCAL_READ).unwrap();
    fill(&mut src, 3);
    scope(|sc| {
        let t = sc.post_send(&s, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(sc.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    // r consumed the receive; its completion stays in `cq` (rxe) after r is destroyed.
    drop(r);
    assert_eq!(srq.outstanding(), 1);
    let dropper = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while srq.outstanding() != 0 && start.elapsed() < WAIT {
            std::hint::spin_loop();
        }
        drop(srq);
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let poller = cq.clone();
    std::thread::spawn(move || {
        let _ = tx.send(poller.progress().map_err(|e| e.to_string()));
    });
    let polled = rx.recv_timeout(Duration::from_secs(20));
    dropper.join().unwrap();
    assert_eq!(
        polled,
        Ok(Ok(1)),
        "the poll did not return: the SRQ's drop waited on the CQ's list of destroyed QPs, which the routing held"
    );
}

/// A region split into chunks too small for the list of chunks to be allocated (256 MiB in
/// 1-byte chunks: a 6 GiB list in a VM of 2 GiB) is refused with a typed error, not an
/// allocation failure, which would abort the process.
#[test]
fn chunks_whose_list_cannot_be_allocated_are_refused_not_an_abort() {
    let r = rig();
    let mr = r.pd.alloc_mr(256 << 20, access::LOCAL_RW).unwrap();
    match mr.into_chunks(1) {
        Err(Error::InvalidArgument { verb: "Mr::into_chunks", reason }) => {
            assert!(reason.contains("cannot be allocated"), "{reason}")
        }
        other => panic!("expected a typed refusal, got {:?}", other.map(|c| c.len())),
    }
    // A list that fits is made as before.
    let chunks = r.pd.alloc_mr(256 << 20, access::LOCAL_RW).unwrap().into_chunks(1 << 20).unwrap();
    assert_eq!(chunks.len(), 256);
}
