//! Attacks on memory windows over the fake device: a fake provider for `ibv_alloc_mw`,
//! `ibv_bind_mw` (type 1) and `ibv_dealloc_mw`, and a post wrapper that records the windows
//! BIND_MW and LOCAL_INV name, so that the fake device knows which windows have a request in
//! flight (accepted, its completion not yet delivered by the test) and can report a window
//! deallocated under one.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use typed_verbs_sys as sys;

use super::{answer_next, fake_recv, fake_send, sends, wc_of, with_fake_qp, Answer, FakeCq, World};
use crate::access::{self, window};
use crate::cq::CqShared;
use crate::mr::Mr;
use crate::mw::{inc_rkey, Mw, PendingBind, Type1, Type2};
use crate::pd::{Pd, PdInner};
use crate::qp::{Qp, QpShared};
use crate::scope::{scope, scope_with_timeout, Completes, Scope};
use crate::transport::{RC, RTS};
use crate::wr::{BindMw, InlineSendInv, LocalInv};

// ---------------------------------------------------------------------------------------------
// The fake provider's window verbs.

/// The device's side of one window.
#[derive(Debug, Default, Clone)]
struct DevMw {
    deallocated: bool,
    /// Deallocations asked for after the first (a double free).
    extra_deallocs: u32,
    /// The window was deallocated while a request naming it was in flight.
    dealloc_in_flight: bool,
    /// Type 1 binds the provider took.
    binds: u32,
}

static MWS: Mutex<Vec<(usize, DevMw)>> = Mutex::new(Vec::new());
/// Requests naming a window in flight: (QP, wr_id, window).
static IN_FLIGHT: Mutex<Vec<(usize, u64, usize)>> = Mutex::new(Vec::new());
/// The answers of the next type 1 binds, by QP (0: accept; else the errno returned).
static BIND_ANSWERS: Mutex<Vec<(usize, VecDeque<i32>)>> = Mutex::new(Vec::new());
/// Window numbers: every window of the process gets its own (the fake devices share a tag).
static NEXT_INDEX: AtomicU32 = AtomicU32::new(0x10);

fn with_mw<R>(mw: *mut sys::ibv_mw, f: impl FnOnce(&mut DevMw) -> R) -> R {
    let mut all = MWS.lock().unwrap_or_else(|e| e.into_inner());
    let i = match all.iter().position(|(a, _)| *a == mw as usize) {
        Some(i) => i,
        None => {
            all.push((mw as usize, DevMw::default()));
            all.len() - 1
        }
    };
    f(&mut all[i].1)
}

fn dev(mw: *mut sys::ibv_mw) -> DevMw {
    with_mw(mw, |d| d.clone())
}

/// Whether the fake device deallocated window `mw` (exactly once, with no request in flight).
pub(super) fn deallocated_once(mw: *mut sys::ibv_mw) -> bool {
    let d = dev(mw);
    d.deallocated && d.extra_deallocs == 0 && !d.dealloc_in_flight
}

fn in_flight_of(mw: usize) -> bool {
    IN_FLIGHT.lock().unwrap().iter().any(|&(_, _, m)| m == mw)
}

/// The fake provider's `alloc_mw`: a zeroed `ibv_mw` (leaked: its address names one window for
/// the whole run), rkey `index << 8`.
///
/// # Safety
/// `pd` is a fake PD (its `context` the fake context).
pub(super) unsafe extern "C" fn fake_alloc_mw(pd: *mut sys::ibv_pd, type_: sys::ibv_mw_type) -> *mut sys::ibv_mw {
    // SAFETY: all-zero is a valid `ibv_mw` (integers and null pointers).
    let mw: &'static mut sys::ibv_mw = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    // SAFETY: `pd` is a valid fake PD per the contract.
    mw.context = unsafe { (*pd).context };
    mw.pd = pd;
    mw.type_ = type_;
    let index = NEXT_INDEX.fetch_add(1, SeqCst);
    mw.rkey = index << 8;
    mw.handle = index;
    with_mw(mw, |_| ());
    mw
}

/// The fake provider's `bind_mw` (type 1): as rxe, the window takes `ibv_inc_rkey` of its rkey
/// at once; the bind is in flight until the test delivers its completion.
///
/// # Safety
/// As `ibv_bind_mw` calls it.
pub(super) unsafe extern "C" fn fake_bind_mw(
    qp: *mut sys::ibv_qp,
    mw: *mut sys::ibv_mw,
    bind: *mut sys::ibv_mw_bind,
) -> i32 {
    let answer = {
        let mut all = BIND_ANSWERS.lock().unwrap();
        all.iter_mut().find(|(q, _)| *q == qp as usize).and_then(|(_, a)| a.pop_front()).unwrap_or(0)
    };
    // SAFETY: valid per the contract.
    let (wr_id, signaled) = unsafe { ((*bind).wr_id, (*bind).send_flags & sys::IBV_SEND_SIGNALED != 0) };
    let d = dev(mw);
    assert!(!d.deallocated, "bind of a deallocated window");
    // SAFETY: valid per the contract; the provider writes the new rkey (ibv_bind_mw(3)).
    unsafe { (*mw).rkey = inc_rkey((*mw).rkey) };
    with_mw(mw, |d| d.binds += 1);
    if answer != 0 {
        return answer;
    }
    IN_FLIGHT.lock().unwrap().push((qp as usize, wr_id, mw as usize));
    with_fake_qp(qp, |f| f.sends.push((wr_id, signaled)));
    0
}

/// The fake provider's `dealloc_mw`: records a deallocation under a request in flight or a
/// second one.
///
/// # Safety
/// `mw` is one of [`fake_alloc_mw`]'s.
pub(super) unsafe extern "C" fn fake_dealloc_mw(mw: *mut sys::ibv_mw) -> i32 {
    let inflight = in_flight_of(mw as usize);
    with_mw(mw, |d| {
        if d.deallocated {
            d.extra_deallocs += 1;
        }
        d.deallocated = true;
        d.dealloc_in_flight |= inflight;
    });
    0
}

/// The post wrapper: records the window of every BIND_MW and LOCAL_INV the provider takes.
///
/// # Safety
/// As `ibv_post_send` is called.
unsafe extern "C" fn mw_send(qp: *mut sys::ibv_qp, wr: *mut sys::ibv_send_wr, bad: *mut *mut sys::ibv_send_wr) -> i32 {
    let before = with_fake_qp(qp, |f| f.sends.len());
    let mut named = Vec::new();
    let mut p = wr;
    while !p.is_null() {
        // SAFETY: a request of the caller's valid list.
        let w = unsafe { &*p };
        let mw = match w.opcode {
            // SAFETY: the union member the opcode selects.
            sys::IBV_WR_BIND_MW => unsafe { w.__bindgen_anon_2.bind_mw.mw as usize },
            // SAFETY: as above.
            sys::IBV_WR_LOCAL_INV => window_of_rkey(unsafe { w.__bindgen_anon_1.invalidate_rkey }),
            _ => 0,
        };
        named.push((w.wr_id, mw));
        p = w.next;
    }
    // SAFETY: per this function's contract.
    let ret = unsafe { fake_send(qp, wr, bad) };
    let taken = with_fake_qp(qp, |f| f.sends.len()) - before;
    let mut inflight = IN_FLIGHT.lock().unwrap();
    for &(wr_id, mw) in named[..taken].iter().filter(|(_, mw)| *mw != 0) {
        inflight.push((qp as usize, wr_id, mw));
    }
    ret
}

/// The window (allocated here) whose rkey's number is `rkey`'s.
fn window_of_rkey(rkey: u32) -> usize {
    let all = MWS.lock().unwrap();
    all.iter()
        .find(|(a, d)| {
            // SAFETY: every address here is a leaked `ibv_mw`.
            !d.deallocated && unsafe { (*(*a as *const sys::ibv_mw)).handle } == rkey >> 8
        })
        .map_or(0, |(a, _)| *a)
}

// ---------------------------------------------------------------------------------------------
// The test's side.

/// Posts a SEND_WITH_INV of `rkey` on `qp` and asserts that its build refuses it (`why`).
fn send_inv_refused<'s, 'e>(s: &'s Scope<'s, 'e>, qp: &'s Qp<RC, RTS>, rkey: u32, why: &str) {
    let e = s.post_send(qp, InlineSendInv::new(b"x", rkey)).map(drop).expect_err(why);
    assert!(is_invalid(&e.error, "ibv_post_send (SEND_WITH_INV)"), "{why}: {:?}", e.error);
}

/// An RC QP in RTS over the fake device, posting through [`mw_send`]; never destroyed.
pub(super) fn qp(w: &'static World, qp_num: u32, cq: &Arc<CqShared>) -> (Qp<RC, RTS>, Arc<QpShared>) {
    let shared =
        QpShared::try_fake_with_posts(w.raw_qp(qp_num), qp_num, 16, cq, Arc::clone(&w.pd), None, mw_send, fake_recv)
            .expect("fake QP");
    std::mem::forget(Arc::clone(&shared));
    (Qp::from_fake(Arc::clone(&shared)), shared)
}

/// A window-bindable region of `len` bytes in the world's PD.
pub(super) fn region(w: &'static World, len: usize) -> Mr<access::WindowBindable> {
    Mr::fake(&w.pd, w.raw_mr(&w.pd), len)
}

pub(super) fn pd(w: &'static World) -> Pd {
    Pd { inner: Arc::clone(&w.pd) }
}

fn answer_bind(qp: &QpShared, errno: i32) {
    let mut all = BIND_ANSWERS.lock().unwrap();
    match all.iter_mut().find(|(q, _)| *q == qp.as_ptr() as usize) {
        Some((_, a)) => a.push_back(errno),
        None => all.push((qp.as_ptr() as usize, VecDeque::from([errno]))),
    }
}

/// The device completes request `wr_id` of `qp` (its window no longer in flight first, as on
/// a device, which is done with the request when it writes the completion).
fn deliver(fake: &FakeCq, qp: &QpShared, wr_id: u64, status: u32, opcode: u32) {
    IN_FLIGHT.lock().unwrap().retain(|&(q, id, _)| !(q == qp.as_ptr() as usize && id == wr_id));
    fake.complete(wc_of(qp.qp_num(), wr_id, status, opcode));
}

/// Binds `mw` over the first 64 bytes of `mr` (remote writes) on `qp`, the fake device
/// completing the bind with `status`: what the bind's wait hands back (the window bound, or
/// handed back unbound).
pub(super) fn bind<'s, 'e, 'm: 's>(
    s: &'s Scope<'s, 'e>,
    qp: &'s Qp<RC, RTS>,
    shared: &QpShared,
    fake: &FakeCq,
    mw: Mw<Type2>,
    mr: &'m Mr<access::WindowBindable>,
    status: u32,
) -> <PendingBind<'m, Type2, window::Write> as Completes>::Output {
    let t = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::WRITE)).expect("posted");
    deliver(fake, shared, last_wr(shared), status, sys::IBV_WC_BIND_MW);
    s.wait(t, T).expect("completed").1
}

/// The device completes the last request the provider took from `qp`, a bind, with `status`.
pub(super) fn deliver_last(fake: &FakeCq, qp: &QpShared, status: u32) {
    deliver(fake, qp, last_wr(qp), status, sys::IBV_WC_BIND_MW);
}

/// The `wr_id` of the last request the provider took from `qp`.
fn last_wr(qp: &QpShared) -> u64 {
    sends(qp).last().expect("a request taken").0
}

/// A receive completion of `qp` (its receive `wr_id`) that a peer's SEND_WITH_INV of `rkey`
/// invalidated.
fn inv_wc(qp: &QpShared, wr_id: u64, rkey: u32) -> sys::ibv_wc {
    let mut wc = wc_of(qp.qp_num(), wr_id, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV);
    wc.wc_flags = sys::IBV_WC_WITH_INV;
    wc.__bindgen_anon_1.invalidated_rkey = rkey;
    wc
}

const T: Duration = Duration::from_secs(5);

fn is_invalid(e: &crate::Error, verb: &str) -> bool {
    matches!(e, crate::Error::InvalidArgument { verb: v, .. } if *v == verb)
}

// ---------------------------------------------------------------------------------------------
// The attacks.

/// The fake itself: a type 1 bind taken, completed, unbound; a type 2 bind posted, completed,
/// invalidated by LOCAL_INV; both windows deallocated once, never under a request in flight.
#[test]
fn harness_binds_and_unbinds_both_window_types() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9100, &cq);
    let mr = region(w, 4096);
    let pd = pd(w);
    let m1 = pd.alloc_mw::<Type1>().expect("type 1");
    let m2 = pd.alloc_mw::<Type2>().expect("type 2");
    let (p1, p2) = (m1.as_ptr(), m2.as_ptr());
    let (k1, k2) = (m1.raw_rkey(), m2.raw_rkey());
    let r = scope(|s| {
        let t = s.bind_mw(&qp, m1, &mr, 0, 64, window::WRITE).expect("bound");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
        let b1 = s.wait(t, T).expect("done").1.expect("bound");
        assert_eq!(b1.rkey(), inc_rkey(k1));
        let t = s.unbind_mw(&qp, b1).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
        let m1 = s.wait(t, T).expect("done").1.expect("unbound");

        let t = s.post_send(&qp, BindMw::new(m2, &mr, 64, 64, window::READ)).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
        let b2 = s.wait(t, T).expect("done").1.expect("bound");
        assert_eq!(b2.rkey(), inc_rkey(k2));
        let t = s.post_send(&qp, LocalInv::new(b2)).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_LOCAL_INV);
        let m2 = s.wait(t, T).expect("done").1.expect("invalidated");
        (m1, m2)
    });
    drop(r.expect("scope"));
    for p in [p1, p2] {
        let d = dev(p);
        assert!(d.deallocated && d.extra_deallocs == 0 && !d.dealloc_in_flight, "{d:?}");
    }
}

/// A receive posted (in the book only): its sequence number and token.
fn recv(qp: &Arc<QpShared>) -> (u64, crate::owned::OwnedToken<()>) {
    let seq = qp.rq.lock().push(true);
    (seq, crate::owned::OwnedToken::new(crate::qp::QueueArc::Recv(Arc::clone(qp)), seq, (), None))
}

/// A peer's SEND_WITH_INV of `rkey` lands on `qp` (a receive the book holds) and is decoded
/// by a poll of `cq`: its completion.
fn peer_invalidates(fake: &FakeCq, cq: &CqShared, qp: &Arc<QpShared>, rkey: u32) -> crate::wc::Completion {
    let (seq, tok) = recv(qp);
    fake.complete(inv_wc(qp, seq | crate::queue::RECV_BIT, rkey));
    cq.poll_and_route().expect("poll");
    let (c, ()) = tok.try_complete().map_err(drop).expect("the receive completed");
    assert_eq!(c.invalidated_rkey(), Some(rkey));
    c
}

/// A type 1 bind the device refuses (MW_BIND_ERR) hands the window back unbound with the rkey
/// it had before the bind; a bind after it succeeds under the next rkey. (One flushed may have
/// run: its window is deallocated and a new one handed back,
/// `own_change_attack_tests::a_type1_window_whose_bind_was_flushed_is_deallocated_and_replaced`.)
#[test]
fn a_failed_type1_bind_hands_the_window_back_unbound_with_its_old_rkey() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9110, &cq);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type1>().expect("type 1");
    let (p, k) = (mw.as_ptr(), mw.raw_rkey());
    let r = scope(|s| {
        let mut mw = mw;
        for status in [sys::IBV_WC_MW_BIND_ERR, sys::IBV_WC_MW_BIND_ERR] {
            let t = s.bind_mw(&qp, mw, &mr, 0, 64, window::WRITE).expect("posted");
            deliver(fake, &shared, last_wr(&shared), status, sys::IBV_WC_BIND_MW);
            let (c, back) = s.wait(t, T).expect("completed");
            assert!(!c.is_success());
            mw = back.expect_err("a failed bind hands the window back unbound");
            assert_eq!(mw.raw_rkey(), k, "the old rkey restored");
        }
        let t = s.bind_mw(&qp, mw, &mr, 0, 64, window::WRITE).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
        let b = s.wait(t, T).expect("completed").1.expect("bound");
        // Each failed bind restored k, so the next one steps from k again.
        assert_eq!(b.rkey(), inc_rkey(k));
        b
    });
    drop(r.expect("scope"));
    assert!(!dev(p).dealloc_in_flight && dev(p).deallocated);
}

/// A type 2 bind the device refuses (`IBV_WC_MW_BIND_ERR`: it bound nothing): the window comes
/// back unbound with its old rkey, and the rkey the bind would have given is no live binding (a
/// SEND_WITH_INV of it, to a peer on the device, is refused); the next bind takes that rkey and
/// succeeds. (One flushed may have run: its window is not bound again,
/// `memory_attack_tests::a_type2_window_whose_bind_was_flushed_is_not_bound_again`.)
#[test]
fn a_failed_type2_bind_leaves_its_rkey_unclaimable_until_the_next_bind() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9120, &cq);
    shared.set_peer_on_device_for_test(true);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let k = mw.raw_rkey();
    let r = scope(|s| {
        let mw = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_MW_BIND_ERR).expect_err("unbound");
        assert_eq!(mw.raw_rkey(), k);
        let e = s.post_send(&qp, InlineSendInv::new(b"x", inc_rkey(k))).expect_err("no live binding");
        assert!(is_invalid(&e.error, "ibv_post_send (SEND_WITH_INV)"), "{:?}", e.error);
        let e = s.post_send(&qp, InlineSendInv::new(b"x", k)).expect_err("an unbound window's rkey");
        assert!(is_invalid(&e.error, "ibv_post_send (SEND_WITH_INV)"), "{:?}", e.error);
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        assert_eq!(b.rkey(), inc_rkey(k));
        b
    });
    drop(r.expect("scope"));
}

/// A bind token dropped before its completion (type 1 and type 2): the window is parked, not
/// deallocated while the bind is in flight; the completion releases it, once, and the scope
/// returns only after that.
#[test]
fn a_dropped_bind_token_never_deallocates_the_window_under_its_bind() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9130, &cq);
    let mr = region(w, 4096);
    let m1 = pd(w).alloc_mw::<Type1>().expect("type 1");
    let m2 = pd(w).alloc_mw::<Type2>().expect("type 2");
    let (p1, p2) = (m1.as_ptr(), m2.as_ptr());
    let mut device = None;
    let r = scope(|s| {
        let t1 = s.bind_mw(&qp, m1, &mr, 0, 64, window::WRITE).expect("posted");
        let id1 = last_wr(&shared);
        let t2 = s.post_send(&qp, BindMw::new(m2, &mr, 64, 64, window::READ)).expect("posted");
        let id2 = last_wr(&shared);
        drop((t1, t2));
        cq.poll_and_route().expect("poll");
        assert!(!dev(p1).deallocated && !dev(p2).deallocated, "deallocated under its bind");
        let sh = Arc::clone(&shared);
        device = Some(std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            deliver(fake, &sh, id1, sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
            deliver(fake, &sh, id2, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_BIND_MW);
        }));
    });
    device.unwrap().join().unwrap();
    assert!(r.is_ok(), "{r:?}");
    for p in [p1, p2] {
        let d = dev(p);
        assert!(d.deallocated, "released by the completion before the scope returned: {d:?}");
        assert!(!d.dealloc_in_flight && d.extra_deallocs == 0, "{d:?}");
    }
}

/// A bind token forgotten (`mem::forget`) before its completion: the window is leaked, never
/// deallocated; the scope still waits for the bind's completion.
#[test]
fn a_forgotten_bind_token_leaks_the_window_and_the_scope_waits_for_the_bind() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9140, &cq);
    let mr = region(w, 4096);
    let m1 = pd(w).alloc_mw::<Type1>().expect("type 1");
    let p1 = m1.as_ptr();
    let mut device = None;
    let started = std::time::Instant::now();
    let r = scope(|s| {
        let t1 = s.bind_mw(&qp, m1, &mr, 0, 64, window::WRITE).expect("posted");
        let id1 = last_wr(&shared);
        std::mem::forget(t1);
        let sh = Arc::clone(&shared);
        device = Some(std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            deliver(fake, &sh, id1, sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
        }));
    });
    device.unwrap().join().unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert!(started.elapsed() >= Duration::from_millis(50), "the scope waited for the bind");
    assert!(!dev(p1).deallocated, "a forgotten token's window is leaked, not deallocated");
    assert!(shared.check_usable().is_ok());
}

/// A peer's SEND_WITH_INV of a binding has arrived: its receive completion is on the CQ of
/// the very QP this process sends on, not polled yet. A LOCAL_INV of the binding on that QP is
/// refused (its build polls the QP's receive CQ first). This process's own SEND_WITH_INV of
/// the same rkey, to a peer on the device, is a second invalidation of the binding, which
/// DESIGN.md says crashes rxe's kernel: it must be refused the same way.
#[test]
fn a_send_with_invalidate_of_a_binding_whose_invalidation_waits_on_the_cq_is_refused() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9150, &cq);
    shared.set_peer_on_device_for_test(true);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let r = scope(|s| {
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        let k = b.rkey();
        // The peer's SEND_WITH_INV arrives on this QP's receive queue; nobody polled yet.
        let (seq, tok) = recv(&shared);
        fake.complete(inv_wc(&shared, seq | crate::queue::RECV_BIT, k));
        let sent = s.post_send(&qp, InlineSendInv::new(b"x", k));
        let refused = sent.as_ref().err().map(|e| is_invalid(&e.error, "ibv_post_send (SEND_WITH_INV)"));
        // A LOCAL_INV in the same state (for comparison) is refused.
        let e = s.post_send(&qp, LocalInv::new(b)).map(drop).expect_err("refused: invalidated by the peer");
        assert!(is_invalid(&e.error, "ibv_post_send (LOCAL_INV)"), "{:?}", e.error);
        let (c, ()) = tok.try_complete().map_err(drop).expect("decoded by the LOCAL_INV's poll");
        let _ = e.wr.expect("handed back").into_bound().invalidated_by(&c).expect("unbound by the peer");
        if let Ok(t) = sent {
            deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND);
            let _ = s.wait(t, T);
        }
        refused
    });
    assert_eq!(
        r.expect("scope"),
        Some(true),
        "a second invalidation of one binding (its first still undecoded on the CQ) was posted"
    );
}

/// LOCAL_INV and this process's SEND_WITH_INV of one binding exclude each other while either
/// is in flight; after the LOCAL_INV succeeded the rkey is no live binding.
#[test]
fn a_local_invalidation_and_a_send_with_invalidate_of_one_binding_exclude_each_other() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9160, &cq);
    shared.set_peer_on_device_for_test(true);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let r = scope(|s| {
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        let k = b.rkey();
        let t = s.post_send(&qp, LocalInv::new(b)).expect("posted");
        let inv = last_wr(&shared);
        send_inv_refused(s, &qp, k, "a LOCAL_INV is in flight");
        deliver(fake, &shared, inv, sys::IBV_WC_SUCCESS, sys::IBV_WC_LOCAL_INV);
        let mw = s.wait(t, T).expect("completed").1.expect("unbound");
        send_inv_refused(s, &qp, k, "unbound now");
        mw
    });
    drop(r.expect("scope"));
}

/// Two SEND_WITH_INV of one binding: the second is refused, and so is a LOCAL_INV, until the
/// first's receive completion is decoded; then the window comes back through it, and a third
/// is refused (a stale rkey).
#[test]
fn a_binding_is_invalidated_once_then_handed_back_by_its_invalidation() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9170, &cq);
    let (_rqp, rshared) = qp_pair(w, 0x9171, &cq);
    shared.set_peer_on_device_for_test(true);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let r = scope(|s| {
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        let k = b.rkey();
        let t1 = s.post_send(&qp, InlineSendInv::new(b"x", k)).expect("the first");
        send_inv_refused(s, &qp, k, "the second");
        let e = s.post_send(&qp, LocalInv::new(b)).map(drop).expect_err("sent here");
        let b = e.wr.expect("handed back").into_bound();
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND);
        s.wait(t1, T).expect("sent");
        // It arrives at the receiving QP (of this process, on the device).
        let c = peer_invalidates(fake, &cq, &rshared, k);
        let mw = b.invalidated_by(&c).expect("unbound by it");
        send_inv_refused(s, &qp, k, "stale");
        mw
    });
    drop(r.expect("scope"));
}

fn qp_pair(w: &'static World, qp_num: u32, cq: &Arc<CqShared>) -> (Qp<RC, RTS>, Arc<QpShared>) {
    qp(w, qp_num, cq)
}

/// After a LOCAL_INV and a rebind (rkey k + 1), a SEND_WITH_INV of the stale rkey k is
/// refused, and an old invalidating completion of k does not unbind the new binding.
#[test]
fn a_stale_rkey_after_a_rebind_invalidates_nothing() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9180, &cq);
    shared.set_peer_on_device_for_test(true);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let r = scope(|s| {
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        let k = b.rkey();
        let old = peer_invalidates(fake, &cq, &shared, k);
        let mw = b.invalidated_by(&old).expect("invalidated");
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        assert_eq!(b.rkey(), inc_rkey(k));
        send_inv_refused(s, &qp, k, "stale");
        let b = b.invalidated_by(&old).expect_err("the old completion names the old rkey");
        let t = s.post_send(&qp, LocalInv::new(b)).expect("the new binding is live");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_LOCAL_INV);
        s.wait(t, T).expect("completed").1.expect("unbound")
    });
    drop(r.expect("scope"));
}

/// 256 bindings of one type 2 window wrap its rkey around (`ibv_inc_rkey` steps the low
/// byte): the binding under the first rkey again is not unbound by the first binding's
/// invalidating completion, and its LOCAL_INV is let through.
#[test]
fn an_rkey_wrapped_around_is_not_unbound_by_the_first_bindings_invalidation() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9190, &cq);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let r = scope(|s| {
        let mut mw = mw;
        let mut first = None;
        for i in 0..=256u32 {
            let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
            if i == 256 {
                let (c, k) = first.expect("the first binding's invalidation");
                assert_eq!(b.rkey(), k, "wrapped around");
                let b = b.invalidated_by(&c).expect_err("an older binding's invalidation");
                let t = s.post_send(&qp, LocalInv::new(b)).expect("live");
                deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_LOCAL_INV);
                return s.wait(t, T).expect("completed").1.expect("unbound");
            }
            let c = peer_invalidates(fake, &cq, &shared, b.rkey());
            first.get_or_insert((c, b.rkey()));
            mw = b.invalidated_by(&c).expect("invalidated");
        }
        unreachable!()
    });
    drop(r.expect("scope"));
}

/// A window of another PD than the region's, or than the QP's: refused before the provider,
/// the window handed back.
#[test]
fn a_window_of_another_pd_is_refused_before_the_provider() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = qp(w, 0x91a0, &cq);
    let mr = region(w, 4096);
    // A second PD of the fake context.
    // SAFETY: a zeroed `ibv_pd`, leaked, of the fake context.
    let rawpd: &'static mut sys::ibv_pd = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    rawpd.context = w.ctx.ctx.as_ptr();
    let other = Arc::new(PdInner { pd: std::ptr::NonNull::from(rawpd), ctx: Arc::clone(&w.ctx) });
    std::mem::forget(Arc::clone(&other));
    let other_pd = Pd { inner: Arc::clone(&other) };
    let m1 = other_pd.alloc_mw::<Type1>().expect("type 1");
    let m2 = other_pd.alloc_mw::<Type2>().expect("type 2");
    let other_mr: Mr<access::WindowBindable> = Mr::fake(&other, w.raw_mr(&other), 4096);
    let (p1, p2) = (m1.as_ptr(), m2.as_ptr());
    let before = sends(&shared).len();
    let r = scope(|s| {
        let e = s.bind_mw(&qp, m1, &mr, 0, 64, window::WRITE).map(drop).expect_err("another PD");
        assert!(is_invalid(&e.error, "ibv_bind_mw"), "{:?}", e.error);
        let m1 = e.wr.expect("handed back");
        // Window and region of one PD, the QP's another.
        let e = s.bind_mw(&qp, m1, &other_mr, 0, 64, window::WRITE).map(drop).expect_err("another PD");
        assert!(is_invalid(&e.error, "ibv_bind_mw"), "{:?}", e.error);
        let e = s.post_send(&qp, BindMw::new(m2, &mr, 0, 64, window::WRITE)).map(drop).expect_err("another PD");
        assert!(is_invalid(&e.error, "ibv_post_send (BIND_MW)"), "{:?}", e.error);
        let m2 = e.wr.expect("handed back").into_window();
        let e = s.post_send(&qp, BindMw::new(m2, &other_mr, 0, 64, window::WRITE)).map(drop).expect_err("QP's PD");
        assert!(is_invalid(&e.error, "ibv_post_send"), "{:?}", e.error);
        e.wr.expect("handed back").into_window()
    });
    drop(r.expect("scope"));
    assert_eq!(sends(&shared).len(), before, "nothing reached the provider");
    assert_eq!((dev(p1).binds, dev(p2).binds), (0, 0));
}

/// Threads racing SEND_WITH_INV of one binding: exactly one is let through.
#[test]
fn threads_invalidating_one_binding_let_exactly_one_invalidation_through() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x91b0, &cq);
    shared.set_peer_on_device_for_test(true);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let r = scope(|s| {
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        let k = b.rkey();
        let go = std::sync::Barrier::new(8);
        let accepted = std::thread::scope(|ts| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    ts.spawn(|| {
                        go.wait();
                        crate::mw::claim_remote_invalidation(shared.device_tag(), k).is_ok()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).filter(|&ok| ok).count()
        });
        assert_eq!(accepted, 1);
        send_inv_refused(s, &qp, k, "claimed");
        b
    });
    drop(r.expect("scope"));
}

/// A LOCAL_INV that completed with an error (flushed: it may have run) is never posted again,
/// nor a SEND_WITH_INV of the binding; the window can only be dropped.
#[test]
fn a_failed_local_invalidation_is_not_tried_again() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x91c0, &cq);
    shared.set_peer_on_device_for_test(true);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let p = mw.as_ptr();
    let r = scope(|s| {
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        let k = b.rkey();
        let t = s.post_send(&qp, LocalInv::new(b)).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_LOCAL_INV);
        let b = s.wait(t, T).expect("completed").1.expect_err("still typed bound");
        assert_eq!(b.rkey(), k);
        let e = s.post_send(&qp, LocalInv::new(b)).map(drop).expect_err("not again");
        assert!(is_invalid(&e.error, "ibv_post_send (LOCAL_INV)"), "{:?}", e.error);
        let e2 = s.post_send(&qp, InlineSendInv::new(b"x", k)).map(drop).expect_err("nor by a send");
        assert!(is_invalid(&e2.error, "ibv_post_send (SEND_WITH_INV)"), "{:?}", e2.error);
        e.wr.expect("handed back").into_bound()
    });
    drop(r.expect("scope"));
    assert!(dev(p).deallocated && !dev(p).dealloc_in_flight);
}

/// A type 1 bind the provider refused (`ibv_bind_mw` has no `bad_wr`: it may be queued): the
/// window is kept, not handed back nor deallocated while the QP may run it; the scope's drain
/// resets the QP, then lets it go.
#[test]
fn a_refused_type1_bind_keeps_the_window_until_the_qp_is_reset() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = qp(w, 0x91d0, &cq);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type1>().expect("type 1");
    let p = mw.as_ptr();
    answer_bind(&shared, libc::ENOMEM);
    let r = scope_with_timeout(Duration::from_millis(200), |s| {
        let e = s.bind_mw(&qp, mw, &mr, 0, 64, window::WRITE).map(drop).expect_err("refused");
        assert!(e.wr.is_none(), "it may be queued: kept");
        assert!(!dev(p).deallocated);
    });
    assert!(matches!(r, Err(crate::Error::QpBroken { .. })), "{r:?}");
    assert!(dev(p).deallocated, "let go after the reset");
}

/// A peer told the new rkey (advertise_window) invalidates the binding before the bind's own
/// completion was collected: the LOCAL_INV is refused, and the window comes back through that
/// invalidation.
#[test]
fn an_invalidation_decoded_before_the_binds_completion_counts() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x91e0, &cq);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let k = inc_rkey(mw.raw_rkey());
    let r = scope(|s| {
        let t = s.post_send(&qp, BindMw::new(mw, &mr, 0, 64, window::WRITE)).expect("posted");
        let id = last_wr(&shared);
        let c = peer_invalidates(fake, &cq, &shared, k);
        deliver(fake, &shared, id, sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
        let b = s.wait(t, T).expect("completed").1.expect("bound");
        let e = s.post_send(&qp, LocalInv::new(b)).map(drop).expect_err("invalidated by the peer");
        assert!(is_invalid(&e.error, "ibv_post_send (LOCAL_INV)"), "{:?}", e.error);
        e.wr.expect("back").into_bound().invalidated_by(&c).expect("unbound by it")
    });
    drop(r.expect("scope"));
}

/// A type 2 binding keeps the QP its bind went through until it is certainly unbound (a
/// LOCAL_INV succeeded) or deallocated; a failed bind may have run: its window is deallocated
/// then (a new one handed back), which lets the QP go.
#[test]
fn a_type2_binding_holds_its_qp_until_it_is_certainly_unbound() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x91f0, &cq);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let base = Arc::strong_count(&shared);
    let r = scope(|s| {
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        assert_eq!(Arc::strong_count(&shared), base + 1, "held by the binding");
        let t = s.post_send(&qp, LocalInv::new(b)).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_LOCAL_INV);
        let mw = s.wait(t, T).expect("completed").1.expect("unbound");
        assert_eq!(Arc::strong_count(&shared), base, "let go once certainly unbound");
        let mw = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_WR_FLUSH_ERR).expect_err("failed");
        assert_eq!(Arc::strong_count(&shared), base, "a failed bind may have run: its window is deallocated");
        mw
    });
    drop(r.expect("scope"));
    assert_eq!(Arc::strong_count(&shared), base, "the deallocation lets it go");
}

/// A SEND_WITH_INV the provider refused naming it (certainly not posted) gives its claim back:
/// the binding can be invalidated again. One it refused without naming it (it may be queued)
/// keeps the claim: neither a LOCAL_INV nor another SEND_WITH_INV of the binding is let
/// through; the window can only be dropped.
#[test]
fn a_refused_send_with_invalidate_gives_its_claim_back_only_when_certainly_not_posted() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9200, &cq);
    shared.set_peer_on_device_for_test(true);
    let mr = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type2>().expect("type 2");
    let p = mw.as_ptr();
    let r = scope_with_timeout(Duration::from_millis(300), |s| {
        let b = bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound");
        let k = b.rkey();
        answer_next(&shared, Answer::RefuseAt(0));
        let e = s.post_send(&qp, InlineSendInv::new(b"x", k)).map(drop).expect_err("refused");
        assert!(e.wr.is_some(), "certainly not posted");
        answer_next(&shared, Answer::RefuseNull);
        let e = s.post_send(&qp, InlineSendInv::new(b"x", k)).map(drop).expect_err("refused, maybe queued");
        assert!(e.wr.is_none(), "kept");
        send_inv_refused(s, &qp, k, "claimed");
        let e = s.post_send(&qp, LocalInv::new(b)).map(drop).expect_err("claimed");
        assert!(is_invalid(&e.error, "ibv_post_send (LOCAL_INV)"), "{:?}", e.error);
        drop(e.wr.expect("back").into_bound());
    });
    assert!(matches!(r, Err(crate::Error::QpBroken { .. })), "the maybe-queued send is reset: {r:?}");
    assert!(dev(p).deallocated);
}

/// A type 1 rebind that fails hands the window back on its old range with its old rkey, still
/// watched; one that succeeds retires the old rkey (no live binding) and watches the new one.
#[test]
fn a_type1_rebind_retires_exactly_the_binding_it_replaces() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9210, &cq);
    let mr = region(w, 4096);
    let mr2 = region(w, 4096);
    let mw = pd(w).alloc_mw::<Type1>().expect("type 1");
    let tag = shared.device_tag();
    let claim = |k| match crate::mw::claim_remote_invalidation(tag, k) {
        Err(crate::Error::InvalidArgument { reason, .. }) => reason,
        other => panic!("{other:?}"),
    };
    let r = scope(|s| {
        let t = s.bind_mw(&qp, mw, &mr, 0, 64, window::WRITE).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
        let b = s.wait(t, T).expect("completed").1.expect("bound");
        let k = b.rkey();
        let t = s.rebind_mw(&qp, b, &mr2, 0, 128, window::READ).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_MW_BIND_ERR, sys::IBV_WC_BIND_MW);
        let b = s.wait(t, T).expect("completed").1.expect_err("failed: the old binding");
        assert_eq!(b.rkey(), k);
        assert!(claim(k).contains("type 1"), "still watched as a live type 1 binding");
        assert!(claim(inc_rkey(k)).contains("not bound"), "the failed rebind's rkey is none");
        let t = s.rebind_mw(&qp, b, &mr2, 0, 128, window::READ).expect("posted");
        deliver(fake, &shared, last_wr(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_BIND_MW);
        let b = s.wait(t, T).expect("completed").1.expect("rebound");
        assert_eq!(b.rkey(), inc_rkey(k));
        assert!(claim(k).contains("not bound"), "the old rkey retired");
        assert!(claim(b.rkey()).contains("type 1"));
        b
    });
    drop(r.expect("scope"));
}
