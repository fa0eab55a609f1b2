//! Races that a real device cannot be made to produce on demand, run deterministically over a
//! fake device (test only) under the real `CqShared`, `ChannelShared`, `QpShared`, `SrqShared`,
//! `OwnedCompletion`, scope and lane code: a completion that lands between a future's poll and
//! its arming, a QP attached to a shared receive queue at the instant a future registers its
//! waker, wakers that panic inside a dispatch or a future's own poll; and, with a provider
//! whose posts the tests take or refuse as they say, scopes, owned tokens and lanes sharing a
//! QP while its completions land in an order the test chooses.
//!
//! The fake: an `ibv_context` whose `ops.poll_cq` / `ops.req_notify_cq` are this module's
//! functions (what `CqShared` calls, as it calls a provider's), a completion channel whose
//! descriptor is a pipe the fake writes `ib_uverbs_comp_event_desc`s into (what the real
//! `ibv_get_cq_event` reads), and an arming that, as the verbs say, makes only the next
//! completion added after it produce one event. Its other operations succeed and do nothing
//! (a QP's modify and destroy). The context and the CQs are never destroyed (leaked on
//! purpose).
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context as Cx, Poll, RawWaker, RawWakerVTable, Wake, Waker};

use typed_verbs_sys as sys;

use crate::access::RemoteAll;
use crate::channel::CompChannel;
use crate::cq::CqShared;
use crate::device::ContextInner;
use crate::mr::{LocalBuf, LocalBufMut, OdpTag, RemoteSlice};
use crate::owned::{OwnedCompletion, OwnedToken};
use crate::pd::PdInner;
use crate::qp::{Qp, QpShared, QueueArc};
use crate::queue::{LANE_BIT, RECV_BIT};
use crate::scope::{scope, scope_with_timeout};
use crate::srq::SrqShared;
use crate::transport::{RC, RTS};
use crate::wr::{Read, Recv, SendRequest, Write};
use std::time::Duration;

type Hook = Box<dyn FnOnce() + Send>;

/// The device's side of one CQ.
pub(crate) struct FakeCq {
    entries: Mutex<VecDeque<sys::ibv_wc>>,
    /// Armed at the device: the next completion added produces one event.
    armed: AtomicBool,
    /// The last arming asked for solicited completions only: as on a provider that keeps the
    /// last arming's kind, the next completion produces an event only if it is solicited (here:
    /// an error completion, which always is).
    solicited_only: AtomicBool,
    arms: AtomicUsize,
    event_fd: i32,
    raw: *mut sys::ibv_cq,
    /// Runs inside the next `ibv_req_notify_cq`, before the arming takes effect: what happens
    /// meanwhile on other threads / on the wire.
    on_arm: Mutex<Option<Hook>>,
    /// Other queues keep the CQ busy: a poll that finds no entry gets completions of a QP
    /// number nothing registered instead (routed nowhere), never an empty CQ.
    busy: AtomicBool,
    /// Calls of `poll_cq`.
    polls: AtomicUsize,
    /// The next `poll_cq` fails (returns -1, as a provider's failed poll), taking nothing.
    fail_next: AtomicBool,
    /// The next `req_notify_cq` fails (EIO), arming nothing.
    fail_next_arm: AtomicBool,
}

// SAFETY: `raw` is the address of a leaked `ibv_cq`, only written into the event descriptor;
// every other field is `Send + Sync`.
unsafe impl Send for FakeCq {}
// SAFETY: as above.
unsafe impl Sync for FakeCq {}

impl FakeCq {
    /// The device adds a completion.
    pub(crate) fn complete(&self, wc: sys::ibv_wc) {
        let solicited = wc.status != sys::IBV_WC_SUCCESS;
        self.entries.lock().unwrap().push_back(wc);
        if (solicited || !self.solicited_only.load(SeqCst)) && self.armed.swap(false, SeqCst) {
            let desc: u64 = self.raw as u64;
            // SAFETY: writes the 8 bytes of `desc` (an `ib_uverbs_comp_event_desc`'s
            // `cq_handle`, the handle the real `ibv_get_cq_event` reads back as the CQ) into the
            // pipe's write end, open for the whole test (leaked).
            let n = unsafe { libc::write(self.event_fd, (&desc as *const u64).cast(), 8) };
            assert_eq!(n, 8);
        }
    }
    pub(crate) fn left(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

/// The fake provider's `poll_cq`.
///
/// # Safety
/// `cq` is one of [`World::cq`]'s (its `cq_context` a leaked `FakeCq`), `wc` has room for `n`
/// entries: as `ibv_poll_cq` is called.
unsafe extern "C" fn fake_poll(cq: *mut sys::ibv_cq, n: i32, wc: *mut sys::ibv_wc) -> i32 {
    // SAFETY: per this function's contract.
    let f = unsafe { &*((*cq).cq_context as *const FakeCq) };
    f.polls.fetch_add(1, SeqCst);
    if f.fail_next.swap(false, SeqCst) {
        return -1;
    }
    let mut e = f.entries.lock().unwrap();
    if e.is_empty() && f.busy.load(SeqCst) {
        e.extend(std::iter::repeat_n(send_wc(0x7fff, 0, sys::IBV_WC_SUCCESS), n as usize));
    }
    let mut i = 0;
    while i < n && !e.is_empty() {
        // SAFETY: `i < n`, within the caller's array.
        unsafe { *wc.add(i as usize) = e.pop_front().unwrap() };
        i += 1;
    }
    i
}

/// The fake provider's `req_notify_cq`.
///
/// # Safety
/// `cq` is one of [`World::cq`]'s.
unsafe extern "C" fn fake_arm(cq: *mut sys::ibv_cq, solicited: i32) -> i32 {
    // SAFETY: per this function's contract.
    let f = unsafe { &*((*cq).cq_context as *const FakeCq) };
    if f.fail_next_arm.swap(false, SeqCst) {
        return libc::EIO;
    }
    let hook = f.on_arm.lock().unwrap().take();
    if let Some(h) = hook {
        h();
    }
    f.arms.fetch_add(1, SeqCst);
    f.solicited_only.store(solicited != 0, SeqCst);
    f.armed.store(true, SeqCst);
    0
}

/// The fake device's verbs (`ContextInner::verbs`), in place of what libibverbs dispatches
/// through a context's private operations: moves (a drain's forced ERR and RESET), destroys and
/// deregistrations succeed; completion and asynchronous events are read from the fake's pipes
/// as libibverbs reads them from the kernel's descriptors.
pub(crate) static FAKE_VERBS: crate::device::Verbs = crate::device::Verbs {
    modify_qp: fake_modify_qp,
    destroy_qp: fake_destroy_qp,
    destroy_srq: fake_destroy_srq,
    destroy_cq: fake_destroy_cq,
    dereg_mr: fake_dereg_mr,
    get_cq_event: fake_get_cq_event,
    get_async_event: fake_get_async_event,
};

unsafe extern "C" fn fake_modify_qp(
    _: *mut sys::ibv_qp,
    _: *mut sys::ibv_qp_attr,
    _: std::ffi::c_int,
) -> std::ffi::c_int {
    0
}

unsafe extern "C" fn fake_destroy_qp(_: *mut sys::ibv_qp) -> std::ffi::c_int {
    0
}

unsafe extern "C" fn fake_destroy_srq(_: *mut sys::ibv_srq) -> std::ffi::c_int {
    0
}

unsafe extern "C" fn fake_destroy_cq(_: *mut sys::ibv_cq) -> std::ffi::c_int {
    0
}

unsafe extern "C" fn fake_dereg_mr(_: *mut sys::ibv_mr) -> std::ffi::c_int {
    0
}

/// `ibv_get_cq_event` as libibverbs' (`verbs.c`): one 8-byte descriptor read from the
/// channel's descriptor names the CQ, whose `cq_context` is handed out with it; -1 (errno set
/// by the read) if none is there.
///
/// # Safety
/// `ch` is a live channel; `cq` and `cq_context` are valid out-pointers; every descriptor
/// written to the channel names a live `ibv_cq` (`FakeCq::complete`).
unsafe extern "C" fn fake_get_cq_event(
    ch: *mut sys::ibv_comp_channel,
    cq: *mut *mut sys::ibv_cq,
    cq_context: *mut *mut std::ffi::c_void,
) -> std::ffi::c_int {
    let mut handle = 0u64;
    // SAFETY: per this function's contract; the read writes at most 8 bytes into `handle`.
    unsafe {
        if libc::read((*ch).fd, (&mut handle as *mut u64).cast(), 8) != 8 {
            return -1;
        }
        *cq = handle as *mut sys::ibv_cq;
        *cq_context = (**cq).cq_context;
    }
    0
}

/// `ibv_get_async_event` as libibverbs' (`device.c`): one `ib_uverbs_async_event_desc` (the
/// element as 64 bits, the event type, 32 reserved bits) read from the context's `async_fd`,
/// the element stored as the member its type names; -1 (errno set by the read) if none is there.
///
/// # Safety
/// `ctx` is a live context; `event` a valid out-pointer.
unsafe extern "C" fn fake_get_async_event(
    ctx: *mut sys::ibv_context,
    event: *mut sys::ibv_async_event,
) -> std::ffi::c_int {
    let mut desc = [0u64; 2];
    // SAFETY: per this function's contract; the read writes at most 16 bytes into `desc`.
    let (element, event_type) = unsafe {
        if libc::read((*ctx).async_fd, desc.as_mut_ptr().cast(), 16) != 16 {
            return -1;
        }
        (desc[0], desc[1] as u32)
    };
    // SAFETY: `event` is a valid out-pointer (this function's contract).
    let e = unsafe { &mut *event };
    e.event_type = event_type;
    match event_type {
        sys::IBV_EVENT_CQ_ERR => e.element.cq = element as *mut sys::ibv_cq,
        sys::IBV_EVENT_QP_FATAL
        | sys::IBV_EVENT_QP_REQ_ERR
        | sys::IBV_EVENT_QP_ACCESS_ERR
        | sys::IBV_EVENT_COMM_EST
        | sys::IBV_EVENT_SQ_DRAINED
        | sys::IBV_EVENT_PATH_MIG
        | sys::IBV_EVENT_PATH_MIG_ERR
        | sys::IBV_EVENT_QP_LAST_WQE_REACHED => e.element.qp = element as *mut sys::ibv_qp,
        sys::IBV_EVENT_SRQ_ERR | sys::IBV_EVENT_SRQ_LIMIT_REACHED => e.element.srq = element as *mut sys::ibv_srq,
        sys::IBV_EVENT_WQ_FATAL => e.element.wq = element as *mut sys::ibv_wq,
        _ => e.element.port_num = element as std::ffi::c_int,
    }
    0
}

/// `e` is an `InvalidArgument` of `verb` whose reason contains `what`.
#[track_caller]
pub(crate) fn invalid(e: &crate::Error, verb: &str, what: &str) {
    match e {
        crate::Error::InvalidArgument { verb: v, reason } => {
            assert_eq!(*v, verb, "{e}");
            assert!(reason.contains(what), "{what:?} not in {reason:?}");
        }
        other => panic!("expected InvalidArgument of {verb} ({what}), got {other:?}"),
    }
}

pub(crate) struct World {
    ctxp: *mut sys::ibv_context,
    chp: *mut sys::ibv_comp_channel,
    write_fd: i32,
    pub(crate) ctx: Arc<ContextInner>,
    pub(crate) pd: Arc<PdInner>,
    pub(crate) ch: CompChannel,
}

// SAFETY: the raw pointers name leaked fake objects, only read; the rest is `Send + Sync`.
unsafe impl Send for World {}
// SAFETY: as above.
unsafe impl Sync for World {}

impl World {
    pub(crate) fn new() -> &'static World {
        World::with_atomics(true)
    }

    /// A fake device that reports atomic operations (`atomic_cap`) or not.
    pub(crate) fn with_atomics(atomics: bool) -> &'static World {
        World::with_device(0, u16::MAX, crate::device::DeviceAttr::fake(0, atomics))
    }

    /// A fake device context numbered `id` (`ContextInner::id`) of the device tagged `tag`
    /// (`ContextInner::tag`), with the attributes `attr`.
    pub(crate) fn with_device(id: u64, tag: u16, attr: crate::device::DeviceAttr) -> &'static World {
        // SAFETY: zeroed C structs (all-zero is a valid value of each: pointers null, a zeroed
        // pthread mutex and condition are their static initialisers), leaked for the test;
        // `pipe2` with a valid out-array.
        unsafe {
            let vctx: &'static mut sys::verbs_context = Box::leak(Box::new(std::mem::zeroed()));
            vctx.context.ops.poll_cq = Some(fake_poll);
            vctx.context.ops.req_notify_cq = Some(fake_arm);
            // Memory windows: `ibv_alloc_mw`, `ibv_bind_mw` and `ibv_dealloc_mw` are inline
            // verbs calling these (mw_attack_tests' fake provider).
            vctx.context.ops.alloc_mw = Some(mw_attack_tests::fake_alloc_mw);
            vctx.context.ops.bind_mw = Some(mw_attack_tests::fake_bind_mw);
            vctx.context.ops.dealloc_mw = Some(mw_attack_tests::fake_dealloc_mw);
            let ctxp: *mut sys::ibv_context = &mut vctx.context;
            let mut fds = [0i32; 2];
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC), 0);
            let chp: *mut sys::ibv_comp_channel =
                Box::leak(Box::new(sys::ibv_comp_channel { context: ctxp, fd: fds[0], refcnt: 0 }));
            let ctx = Arc::new(ContextInner {
                ctx: NonNull::new(ctxp).unwrap(),
                name: "fake0".into(),
                identity: crate::device::DeviceIdentity::Name("fake0".into()),
                tag,
                id,
                cqs: Mutex::new(Vec::new()),
                // What libibverbs dispatches through the private operations (`priv`, left null:
                // nothing reaches them).
                verbs: &FAKE_VERBS,
                attr,
            });
            std::mem::forget(Arc::clone(&ctx));
            // A zeroed `ibv_pd` of the fake context (leaked): what `ibv_alloc_mw` reads its
            // context from.
            let rawpd: &'static mut sys::ibv_pd = Box::leak(Box::new(std::mem::zeroed()));
            rawpd.context = ctxp;
            let pd = Arc::new(PdInner { pd: NonNull::from(rawpd), ctx: Arc::clone(&ctx) });
            std::mem::forget(Arc::clone(&pd));
            let ch = CompChannel::fake(NonNull::new(chp).unwrap(), fds[0], Arc::clone(&ctx));
            std::mem::forget(ch.clone());
            Box::leak(Box::new(World { ctxp, chp, write_fd: fds[1], ctx, pd, ch }))
        }
    }

    /// A CQ reporting to the channel (a handle leaked: never destroyed).
    pub(crate) fn cq(&'static self) -> (Arc<CqShared>, &'static FakeCq) {
        let (cq, fake) = self.droppable_cq();
        std::mem::forget(Arc::clone(&cq));
        (cq, fake)
    }

    /// As [`World::cq`], the returned `Arc` the CQ's last handle: its drop destroys it (the
    /// fake context's operations do nothing).
    pub(crate) fn droppable_cq(&'static self) -> (Arc<CqShared>, &'static FakeCq) {
        self.droppable_cq_holding(1 << 20)
    }

    /// As [`World::droppable_cq`], a CQ of `cqe` entries: the room its QPs reserve.
    fn droppable_cq_holding(&'static self, cqe: u32) -> (Arc<CqShared>, &'static FakeCq) {
        self.fake_cq_on(&self.ch, self.chp, self.write_fd, cqe)
    }

    /// A CQ of `cqe` entries on the channel `ch` (its C object `chp`; `write_fd` the write end
    /// of its pipe), whose last `Arc` destroys it (`FAKE_VERBS`' destroy, which succeeds).
    pub(crate) fn fake_cq_on(
        &'static self,
        ch: &CompChannel,
        chp: *mut sys::ibv_comp_channel,
        write_fd: i32,
        cqe: u32,
    ) -> (Arc<CqShared>, &'static FakeCq) {
        // SAFETY: a zeroed `ibv_cq` (a valid value), leaked, pointing at the fake context and
        // channel and at its `FakeCq`, also leaked: `CqShared` calls the fake provider with it.
        unsafe {
            let raw: &'static mut sys::ibv_cq = Box::leak(Box::new(std::mem::zeroed()));
            raw.context = self.ctxp;
            raw.channel = chp;
            let fake: &'static FakeCq = Box::leak(Box::new(FakeCq {
                entries: Mutex::new(VecDeque::new()),
                armed: AtomicBool::new(false),
                solicited_only: AtomicBool::new(false),
                arms: AtomicUsize::new(0),
                event_fd: write_fd,
                raw,
                on_arm: Mutex::new(None),
                busy: AtomicBool::new(false),
                polls: AtomicUsize::new(0),
                fail_next: AtomicBool::new(false),
                fail_next_arm: AtomicBool::new(false),
            }));
            raw.cq_context = (fake as *const FakeCq).cast_mut().cast();
            let cq =
                CqShared::fake(NonNull::from(&mut *raw), Arc::clone(&self.ctx), Some(Arc::clone(ch.shared())), cqe);
            ch.attach_fake(&cq);
            (cq, fake)
        }
    }

    pub(crate) fn qp(
        &'static self,
        qp_num: u32,
        depth: u32,
        cq: &Arc<CqShared>,
        srq: Option<Arc<SrqShared>>,
    ) -> Arc<QpShared> {
        let qp = QpShared::fake(self.raw_qp(qp_num), qp_num, depth, cq, Arc::clone(&self.pd), srq);
        std::mem::forget(Arc::clone(&qp));
        qp
    }

    /// A leaked `ibv_qp` of the fake context: its verbs (modify, destroy) are `FAKE_VERBS`',
    /// which succeed.
    fn raw_qp(&'static self, qp_num: u32) -> NonNull<sys::ibv_qp> {
        // SAFETY: all-zero is a valid `ibv_qp` (pointers null).
        let raw: &'static mut sys::ibv_qp = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
        raw.qp_num = qp_num;
        raw.context = self.ctxp;
        NonNull::from(raw)
    }

    pub(crate) fn srq(&'static self, max_wr: u32) -> Arc<SrqShared> {
        let s = self.destroyable_srq(max_wr);
        std::mem::forget(Arc::clone(&s));
        s
    }

    /// A fake SRQ whose last `Arc` destroys it (`FAKE_VERBS`' destroy, which succeeds).
    fn destroyable_srq(&'static self, max_wr: u32) -> Arc<SrqShared> {
        // SAFETY: all-zero is a valid `ibv_srq`; leaked.
        let raw: &'static mut sys::ibv_srq = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
        raw.context = self.ctxp;
        SrqShared::fake(NonNull::from(raw), max_wr, Arc::clone(&self.pd))
    }
}

pub(crate) fn send_wc(qp_num: u32, seq: u64, status: u32) -> sys::ibv_wc {
    sys::ibv_wc { wr_id: seq, status, opcode: sys::IBV_WC_SEND, qp_num, ..Default::default() }
}

pub(crate) fn recv_wc(qp_num: u32, seq: u64, status: u32) -> sys::ibv_wc {
    sys::ibv_wc { wr_id: seq | RECV_BIT, status, opcode: sys::IBV_WC_RECV, qp_num, byte_len: 8, ..Default::default() }
}

/// A buffer that records (in its own counter) being dropped or handed back before the fake
/// device finished its request (`device_done`), and every drop (the attack suites').
pub(crate) struct Watch {
    pub(crate) device_done: Arc<AtomicBool>,
    pub(crate) early: Arc<AtomicUsize>,
    pub(crate) drops: Arc<AtomicUsize>,
}
impl Drop for Watch {
    fn drop(&mut self) {
        if !self.device_done.load(SeqCst) {
            self.early.fetch_add(1, SeqCst);
        }
        self.drops.fetch_add(1, SeqCst);
    }
}
impl crate::scope::sealed::Sealed for Watch {}
impl crate::scope::Completes for Watch {
    type Output = Watch;
    fn complete(self, _: &crate::wc::Completion, _: crate::scope::sealed::Internal) -> Watch {
        if !self.device_done.load(SeqCst) {
            self.early.fetch_add(1, SeqCst);
        }
        self
    }
    fn into_parked(self, _: crate::scope::sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        Some(Box::new(self))
    }
}

/// Runs `f` on a thread of its own and returns what it returns (or resumes its panic); a hang
/// fails the test after `secs` seconds.
pub(crate) fn bounded<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("hung (deadlock?) after {secs} s"),
    }
}

/// A send request posted (in the book only; the fake device is told separately).
pub(crate) fn post_send(qp: &Arc<QpShared>, signaled: bool) -> OwnedToken<()> {
    let seq = qp.sq.lock().push(signaled);
    OwnedToken::new(QueueArc::Send(Arc::clone(qp)), seq, (), None)
}

pub(crate) fn post_recv(qp: &Arc<QpShared>) -> OwnedToken<()> {
    let seq = qp.rq.lock().push(true);
    OwnedToken::new(QueueArc::Recv(Arc::clone(qp)), seq, (), None)
}

pub(crate) fn post_srq_recv(srq: &Arc<SrqShared>) -> (u64, OwnedToken<()>) {
    let seq = srq.rq.lock().push(true);
    (seq, OwnedToken::new(QueueArc::Srq(Arc::clone(srq)), seq, (), None))
}

#[derive(Default)]
pub(crate) struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}
impl Count {
    pub(crate) fn get(&self) -> usize {
        self.0.load(SeqCst)
    }
}

/// A waker whose wake panics (e.g. an executor's `tx.send(task).expect(..)` after the
/// executor is gone).
pub(crate) struct PanicWake;
impl Wake for PanicWake {
    fn wake(self: Arc<Self>) {
        panic!("hostile waker: the executor is gone");
    }
}

type Out = <OwnedCompletion<()> as Future>::Output;

pub(crate) fn poll(f: &mut OwnedCompletion<()>, w: &Waker) -> Poll<Out> {
    Pin::new(f).poll(&mut Cx::from_waker(w))
}

/// A waker that runs `hook` the first time it is cloned (the clone `register_waker` keeps),
/// then counts wakes: used to place another thread's action at that instant.
struct Hooked {
    count: AtomicUsize,
    hook: Mutex<Option<Hook>>,
}
static HOOKED: RawWakerVTable = RawWakerVTable::new(h_clone, h_wake, h_wake_by_ref, h_drop);
// The vtable's functions: `p` is always an `Arc<Hooked>` turned into a raw pointer by
// `hooked` or `h_clone`, owning one count (the waker's).

/// The waker's clone: runs the hook once, then adds a count.
///
/// # Safety
/// `p` is a waker's pointer from `hooked` or `h_clone`: an `Arc<Hooked>` owning one count.
unsafe fn h_clone(p: *const ()) -> RawWaker {
    // SAFETY: see above; the count is given back with `forget` below.
    let a = unsafe { Arc::from_raw(p.cast::<Hooked>()) };
    let hook = a.hook.lock().unwrap().take();
    if let Some(h) = hook {
        h();
    }
    let b = Arc::clone(&a);
    std::mem::forget(a);
    RawWaker::new(Arc::into_raw(b).cast(), &HOOKED)
}
/// The waker's wake: counts it and releases the waker's count.
///
/// # Safety
/// `p` is a waker's pointer from `hooked` or `h_clone` (an `Arc<Hooked>`), owning one count, which this call consumes.
unsafe fn h_wake(p: *const ()) {
    // SAFETY: see above; `wake` consumes the waker's count.
    let a = unsafe { Arc::from_raw(p.cast::<Hooked>()) };
    a.count.fetch_add(1, SeqCst);
}
/// The waker's wake by reference: counts it.
///
/// # Safety
/// `p` is a waker's pointer from `hooked` or `h_clone` (an `Arc<Hooked>`), borrowed for the call.
unsafe fn h_wake_by_ref(p: *const ()) {
    // SAFETY: see above; borrowed while the waker lives.
    unsafe { (*p.cast::<Hooked>()).count.fetch_add(1, SeqCst) };
}
/// The waker's drop: releases its count.
///
/// # Safety
/// `p` is a waker's pointer from `hooked` or `h_clone` (an `Arc<Hooked>`), owning one count, which this call consumes.
unsafe fn h_drop(p: *const ()) {
    // SAFETY: see above; the waker's count is released.
    drop(unsafe { Arc::from_raw(p.cast::<Hooked>()) });
}
fn hooked(hook: Hook) -> (Waker, Arc<Hooked>) {
    let a = Arc::new(Hooked { count: AtomicUsize::new(0), hook: Mutex::new(Some(hook)) });
    // SAFETY: the vtable's functions keep the contract of `RawWaker` for an `Arc<Hooked>`
    // (clone adds a count, wake and drop release one).
    let w = unsafe { Waker::from_raw(RawWaker::new(Arc::into_raw(Arc::clone(&a)).cast(), &HOOKED)) };
    (w, a)
}

fn quiet<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
}

/// The harness itself: a future waits, its completion arrives, the event is dispatched, the
/// future is woken and resolves with the device's completion.
#[test]
fn a_waiting_future_is_woken_by_dispatch() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x11, 64, &cq, None);
    let mut f = post_send(&qp, true).into_future();
    let wake = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wake));
    assert!(poll(&mut f, &waker).is_pending());
    assert_eq!(fake.arms.load(SeqCst), 1, "armed once");
    fake.complete(send_wc(0x11, 0, sys::IBV_WC_SUCCESS));
    let d = w.ch.dispatch().unwrap();
    assert_eq!((d.events, d.completions), (1, 1));
    assert_eq!(wake.get(), 1);
    match poll(&mut f, &waker) {
        Poll::Ready(Ok((c, ()))) => assert!(c.is_success()),
        other => panic!("{other:?}"),
    }
}

/// `Cq::set_await_polls`: a future that misses polls the CQ again at each of its next polls,
/// waking its own task, and counts itself a waiter of no CQ and arms nothing until the polls
/// are over; the poll after the last one waits as a future without polls waits at its first.
/// A completion that lands meanwhile is taken by a poll: no arming, no event.
#[test]
fn a_future_that_polls_before_sleeping_arms_nothing_and_waits_on_no_cq_until_its_polls_are_over() {
    const POLLS: u32 = 3;
    let w = World::new();
    let (cq, fake) = w.cq();
    let handle = crate::cq::Cq { inner: Arc::clone(&cq) };
    handle.set_await_polls(POLLS);
    let qp = w.qp(0x21, 64, &cq, None);
    let wake = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wake));
    let mut f = post_send(&qp, true).into_future();
    // The first poll misses; it and the next POLLS - 1 wake the task (POLLS polls after the first).
    for i in 0..POLLS as usize {
        let polls_before = fake.polls.load(SeqCst);
        assert!(poll(&mut f, &waker).is_pending(), "poll {i}");
        assert!(fake.polls.load(SeqCst) > polls_before, "poll {i} polled the CQ");
        assert_eq!(wake.get(), i + 1, "poll {i} woke its own task");
        assert_eq!((fake.arms.load(SeqCst), cq.waiters.load(SeqCst)), (0, 0), "poll {i}: no arming, no waiter");
    }
    assert!(poll(&mut f, &waker).is_pending());
    assert_eq!(wake.get(), POLLS as usize, "the last poll waits: it does not wake itself");
    assert_eq!((fake.arms.load(SeqCst), cq.waiters.load(SeqCst)), (1, 1), "it waits: armed, counted");
    fake.complete(send_wc(0x21, 0, sys::IBV_WC_SUCCESS));
    assert_eq!(w.ch.dispatch().unwrap().completions, 1);
    assert!(matches!(poll(&mut f, &waker), Poll::Ready(Ok((c, ()))) if c.is_success()));
    assert_eq!(cq.waiters.load(SeqCst), 0, "no waiter left");

    // A completion that lands while the next future polls is taken by its next poll.
    let arms = fake.arms.load(SeqCst);
    let mut g = post_send(&qp, true).into_future();
    assert!(poll(&mut g, &waker).is_pending());
    fake.complete(send_wc(0x21, 1, sys::IBV_WC_SUCCESS));
    assert!(matches!(poll(&mut g, &waker), Poll::Ready(Ok((c, ()))) if c.is_success()));
    assert_eq!((fake.arms.load(SeqCst), cq.waiters.load(SeqCst)), (arms, 0), "no arming for it");
}

/// An SRQ receive into ODP memory verified for RC, refused because the SRQ is full, records
/// nothing: a UC QP may still attach (the transport is recorded only for a receive the
/// provider may have queued). With UC attached, the same receive is refused at its check.
#[test]
fn an_odp_srq_receive_refused_as_queue_full_leaves_other_transports_free_to_attach() {
    let w = World::new();
    let srq = w.srq(2);
    let _outstanding = [post_srq_recv(&srq), post_srq_recv(&srq)];
    let handle = crate::srq::Srq { shared: Arc::clone(&srq) };
    let odp = OdpTag::verified(sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_SRQ_RECV, false);
    let buf = || LocalBufMut::from_parts(0x1000, 64, 9, odp, w.pd.id());
    let refused = handle.post_recv_owned(Recv::new(buf())).expect_err("the SRQ is full");
    assert!(matches!(refused.error, crate::Error::QueueFull { .. }), "{:?}", refused.error);
    assert!(refused.wr.is_some(), "not posted: handed back");
    srq.attach_transport(sys::IBV_QPT_UC, "UC").expect("no ODP receive was posted: UC attaches");
    let refused = handle.post_recv_owned(Recv::new(buf())).expect_err("UC is attached");
    assert!(refused.error.to_string().contains("IBV_ODP_SUPPORT_SRQ_RECV"), "{}", refused.error);
}

/// An SRQ counts its attached QPs by transport until each is destroyed: an ODP receive
/// verified for UC is refused at its check while an RC QP is attached (two here: one left
/// after the first is destroyed), and passes it once the last is destroyed (then refused only
/// because the SRQ is full). An RC QP whose attach fails after its transport was counted (no
/// room on its CQ for the SRQ's depth) leaves nothing counted either.
#[test]
fn an_srq_stops_counting_a_qps_transport_once_the_qp_is_destroyed_or_its_attach_failed() {
    let w = World::new();
    let (cq, _) = w.cq();
    let srq = w.srq(1);
    let _outstanding = post_srq_recv(&srq);
    let handle = crate::srq::Srq { shared: Arc::clone(&srq) };
    let odp = OdpTag::verified(sys::IBV_QPT_UC, sys::IBV_ODP_SUPPORT_SRQ_RECV, false);
    let post = || {
        let buf = LocalBufMut::from_parts(0x1000, 64, 9, odp, w.pd.id());
        let refused = handle.post_recv_owned(Recv::new(buf)).expect_err("refused, at its check or as the SRQ is full");
        assert!(refused.wr.is_some(), "not posted: handed back");
        refused.error
    };
    let rc_attached = |e: &crate::Error| {
        let e = e.to_string();
        e.contains("IBV_ODP_SUPPORT_SRQ_RECV") && e.contains("mask 0x4")
    };
    let full = |e: &crate::Error| matches!(e, crate::Error::QueueFull { .. });
    let first = w.posting_qp(0x5c0, 4, &cq, Some(Arc::clone(&srq)));
    let second = w.posting_qp(0x5c1, 4, &cq, Some(Arc::clone(&srq)));
    let e = post();
    assert!(rc_attached(&e), "{e}");
    drop(first);
    let e = post();
    assert!(rc_attached(&e), "one RC QP is left: {e}");
    drop(second);
    let e = post();
    assert!(full(&e), "no QP is left: the check passes: {e:?}");
    // A CQ of 2 entries: the QP's 2 and the SRQ's 1 do not fit.
    let (small, _) = w.droppable_cq_holding(2);
    let Err(e) = w.try_posting_qp(0x5c2, 1, &small, Some(Arc::clone(&srq))) else {
        panic!("a QP attached to a CQ without room for it and the SRQ");
    };
    assert!(e.to_string().contains("needs 3 more"), "{e}");
    let e = post();
    assert!(full(&e), "the QP whose attach failed is not counted: {e:?}");
}

/// A QP number is reused (rxe hands them out cyclically) while the destroyed QP's completion
/// is still in the CQ, and the poll that would take it off fails: the new QP's registration is
/// refused, the destroyed QP stays recorded, and the next registration takes its completion off
/// before the number is routed to a live QP again. Registered anyway, the new QP's first
/// request would read as complete from the destroyed QP's completion of the same number, and
/// its buffers would come back while the device still uses them. The destroyed QP's room on
/// the CQ is freed once, by the drain that succeeds: a CQ of 20 with a live QP's 8 and the new
/// QP's 8 reserved has no room for another 8.
#[test]
fn a_qp_reusing_a_number_is_not_registered_while_the_destroyed_qps_completions_cannot_be_taken_off() {
    let w = World::new();
    let (cq, fake) = w.droppable_cq_holding(20);
    let _live = w.posting_qp(9, 4, &cq, None);
    let a = w.posting_qp(5, 4, &cq, None);
    let ta = post_send(&a, true);
    fake.complete(send_wc(5, 0, sys::IBV_WC_SUCCESS));
    drop((ta, a));
    fake.fail_next.store(true, SeqCst);
    let Err(e) = w.try_posting_qp(5, 4, &cq, None) else {
        panic!("registered while the destroyed QP's completion could not be taken off the CQ");
    };
    assert!(matches!(e, crate::Error::Verb { verb: crate::Verb::PollCq, .. }), "{e:?}");
    assert_eq!(fake.left(), 1, "the destroyed QP's completion is still in the CQ");
    let b = w.posting_qp(5, 4, &cq, None);
    assert_eq!(fake.left(), 0, "taken off by the next registration");
    let tb = post_send(&b, true);
    cq.poll_and_route().unwrap();
    let tb = tb.try_complete().map(drop).expect_err("nothing completed B's request");
    fake.complete(send_wc(5, 0, sys::IBV_WC_SUCCESS));
    cq.poll_and_route().unwrap();
    assert!(tb.try_complete().is_ok_and(|(c, ())| c.is_success()), "its own completion completes it");
    let Err(e) = w.try_posting_qp(7, 4, &cq, None) else {
        panic!("the destroyed QP's room was freed twice");
    };
    assert!(e.to_string().contains("16 are reserved") && e.to_string().contains("needs 8 more"), "{e}");
}

/// The program arms a CQ that a future waits on for solicited completions only
/// (`Cq::req_notify(true)`). On a provider that keeps the last arming (the fake), that replaces
/// the library's arming for any completion: the library counts its arming gone and, futures
/// waiting, serves the CQ in the same call, which arms it for any completion again, so the
/// future's send completion, which is not solicited, still produces the event that wakes it,
/// with no dispatch in between. (A library that kept counting the CQ armed would get no event,
/// and the future would never be woken.)
#[test]
fn a_solicited_only_arming_by_the_program_does_not_strand_a_waiting_future() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x1f, 64, &cq, None);
    let mut f = post_send(&qp, true).into_future();
    let wake = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wake));
    assert!(poll(&mut f, &waker).is_pending());
    assert_eq!(fake.arms.load(SeqCst), 1, "armed once, for any completion");
    crate::cq::Cq { inner: Arc::clone(&cq) }.req_notify(true).unwrap();
    assert_eq!(fake.arms.load(SeqCst), 3, "the program's arming, then the library's again");
    assert!(fake.armed.load(SeqCst) && !fake.solicited_only.load(SeqCst), "armed for any completion again");
    fake.complete(send_wc(0x1f, 0, sys::IBV_WC_SUCCESS));
    let d = w.ch.dispatch().unwrap();
    assert_eq!((d.events, d.completions), (1, 1), "the send completion produced the event");
    assert_eq!(wake.get(), 1, "the future is woken");
    match poll(&mut f, &waker) {
        Poll::Ready(Ok((c, ()))) => assert!(c.is_success()),
        other => panic!("{other:?}"),
    }
}

/// The same arming with no future waiting arms nothing more, and leaves the next future that
/// waits to arm the CQ for any completion itself.
#[test]
fn a_solicited_only_arming_with_no_future_waiting_leaves_the_arming_to_the_next_one() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x1e, 64, &cq, None);
    crate::cq::Cq { inner: Arc::clone(&cq) }.req_notify(true).unwrap();
    assert_eq!(fake.arms.load(SeqCst), 1, "the program's arming alone");
    assert!(fake.solicited_only.load(SeqCst));
    let mut f = post_send(&qp, true).into_future();
    let wake = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wake));
    assert!(poll(&mut f, &waker).is_pending());
    assert_eq!(fake.arms.load(SeqCst), 2, "the waiting future armed the CQ");
    assert!(!fake.solicited_only.load(SeqCst), "for any completion");
    fake.complete(send_wc(0x1e, 0, sys::IBV_WC_SUCCESS));
    let d = w.ch.dispatch().unwrap();
    assert_eq!((d.events, d.completions), (1, 1));
    assert_eq!(wake.get(), 1, "the future is woken");
}

/// A waker that panics inside `CompChannel::dispatch` (future H's) comes out of it only once
/// its work is done: the CQ is re-armed, so another future G on it, whose completion arrives
/// afterwards, is woken by the next dispatch. (A panic that left the CQ unarmed and out of the
/// channel's list would leave G never woken.)
#[test]
fn a_waker_that_panics_in_dispatch_leaves_the_cq_armed_for_the_other_futures() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x12, 64, &cq, None);
    let mut h = post_send(&qp, true).into_future();
    let mut g = post_send(&qp, true).into_future();
    let hw = Waker::from(Arc::new(PanicWake));
    let gw_count = Arc::new(Count::default());
    let gw = Waker::from(Arc::clone(&gw_count));
    assert!(poll(&mut h, &hw).is_pending());
    assert!(poll(&mut g, &gw).is_pending());
    fake.complete(send_wc(0x12, 0, sys::IBV_WC_SUCCESS));
    assert!(quiet(|| w.ch.dispatch()).is_err(), "H's waker panicked out of dispatch");
    assert!(fake.armed.load(SeqCst) && cq.armed.load(SeqCst), "re-armed before the wakers ran");
    fake.complete(send_wc(0x12, 1, sys::IBV_WC_SUCCESS));
    let d = w.ch.dispatch().unwrap();
    assert_eq!((d.events, d.completions, d.more), (1, 1, false));
    assert_eq!(gw_count.get(), 1, "G woken by the next dispatch");
    assert!(matches!(poll(&mut g, &gw), Poll::Ready(Ok(_))));
    drop(h);
}

/// Makes the next arming of `fake`'s CQ, while it is under way (after the library's `armed`
/// swap, before it takes effect): a future G on another thread starts waiting (it sees `armed`
/// set, so it does not arm), then requests 0..20 of QP `qp_num` complete (before the arming
/// took effect: no event). With `h`, a future H starts waiting first, with a waker that panics.
fn g_waits_then_20_land_while_armed(
    fake: &'static FakeCq,
    g: &Arc<Mutex<Option<OwnedCompletion<()>>>>,
    g_wakes: &Arc<Count>,
    qp_num: u32,
    h: Option<&Arc<Mutex<Option<OwnedCompletion<()>>>>>,
) {
    let (g, g_wakes, h) = (Arc::clone(g), Arc::clone(g_wakes), h.map(Arc::clone));
    *fake.on_arm.lock().unwrap() = Some(Box::new(move || {
        std::thread::spawn(move || {
            if let Some(h) = h {
                let hw = Waker::from(Arc::new(PanicWake));
                assert!(poll(h.lock().unwrap().as_mut().unwrap(), &hw).is_pending(), "H waits");
            }
            let waker = Waker::from(g_wakes);
            assert!(poll(g.lock().unwrap().as_mut().unwrap(), &waker).is_pending(), "G waits");
        })
        .join()
        .unwrap();
        for seq in 0..20 {
            fake.complete(send_wc(qp_num, seq, sys::IBV_WC_SUCCESS));
        }
    }));
}

/// The channel's next dispatch serves the 4 completions left in the CQ (no event: they fire
/// none), and so wakes G, which then resolves.
fn the_next_dispatch_serves_the_4_left_and_g(w: &World, g: &Mutex<Option<OwnedCompletion<()>>>, g_wakes: &Count) {
    let d = w.ch.dispatch().unwrap();
    assert_eq!((d.events, d.completions, d.more), (0, 4, false), "the next dispatch serves the CQ");
    assert_eq!(g_wakes.get(), 1, "G is woken");
    let waker = Waker::from(Arc::new(Count::default()));
    assert!(matches!(poll(g.lock().unwrap().as_mut().unwrap(), &waker), Poll::Ready(Ok(_))));
}

/// A future F whose own completion is taken in a poll that leaves completions in the CQ (its
/// post-arm poll came back full: 20 completions landed between its poll and its arming, so
/// they fire no event) resolves, and hands the CQ to the channel's next dispatch: G, waiting
/// on the same CQ (it saw F's arming and did not arm), is woken by it. (Otherwise G would wait
/// until an unrelated completion fired the arming.)
#[test]
fn a_future_resolving_with_completions_left_hands_the_cq_to_the_next_dispatch() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x13, 64, &cq, None);
    let mut tokens: Vec<_> = (0..20).map(|_| post_send(&qp, true)).collect();
    let g_token = tokens.pop().unwrap(); // request 19
    let mut f = tokens.remove(0).into_future(); // request 0
    let g = Arc::new(Mutex::new(Some(g_token.into_future())));
    let g_wakes = Arc::new(Count::default());
    g_waits_then_20_land_while_armed(fake, &g, &g_wakes, 0x13, None);
    let fw = Waker::from(Arc::new(Count::default()));
    match poll(&mut f, &fw) {
        Poll::Ready(Ok((c, ()))) => assert!(c.is_success()),
        other => panic!("F resolves: {other:?}"),
    }
    assert_eq!(fake.left(), 4, "requests 16..=19 are still in the CQ");
    assert_eq!(fake.arms.load(SeqCst), 1, "armed once, by F: G saw `armed` set and did not arm");
    the_next_dispatch_serves_the_4_left_and_g(w, &g, &g_wakes);
    drop(tokens);
}

/// A future waiting on a shared receive queue reads the SRQ's CQs again after it registered
/// its waker: a QP attached on another thread at the instant of the registration (which woke
/// nobody: no waker was registered yet) is seen, its CQ armed, and a receive completing there
/// wakes the future. (Otherwise the future would wait on the earlier CQs only.)
#[test]
fn an_srq_attach_racing_a_futures_registration_is_waited_on() {
    let w = World::new();
    let (cq1, _fake1) = w.cq();
    let (cq2, fake2) = w.cq();
    let srq = w.srq(64);
    let _qp1 = w.qp(0x21, 64, &cq1, Some(Arc::clone(&srq)));
    let (seq, token) = post_srq_recv(&srq);
    let mut f = token.into_future();
    // The instant `register_waker` keeps the waker (its clone): another thread creates a QP on
    // cq2 that takes receives from the SRQ.
    let (waker, state) = {
        let srq = Arc::clone(&srq);
        let cq2 = Arc::clone(&cq2);
        hooked(Box::new(move || {
            std::thread::spawn(move || {
                let _qp2 = w.qp(0x22, 64, &cq2, Some(srq));
            })
            .join()
            .unwrap();
        }))
    };
    assert!(poll(&mut f, &waker).is_pending());
    assert_eq!(srq.cqs().len(), 2, "the SRQ completes on cq1 and cq2 now");
    assert_eq!(fake2.arms.load(SeqCst), 1, "the future armed cq2 too");
    // A message arrives on QP 0x22 and consumes the SRQ receive: its completion is on cq2.
    fake2.complete(recv_wc(0x22, seq, sys::IBV_WC_SUCCESS));
    let d = w.ch.dispatch().unwrap();
    assert_eq!((d.events, d.completions), (1, 1));
    assert_eq!(state.count.load(SeqCst), 1, "the future is woken");
    assert!(matches!(poll(&mut f, &waker), Poll::Ready(Ok(_))));
}

/// The same future, the attach before its first wait: it waits on both CQs from the start.
#[test]
fn an_srq_attach_before_the_wait_is_served() {
    let w = World::new();
    let (cq1, _fake1) = w.cq();
    let (cq2, fake2) = w.cq();
    let srq = w.srq(64);
    let _qp1 = w.qp(0x31, 64, &cq1, Some(Arc::clone(&srq)));
    let (seq, token) = post_srq_recv(&srq);
    let mut f = token.into_future();
    let count = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&count));
    assert!(poll(&mut f, &waker).is_pending());
    let _qp2 = w.qp(0x32, 64, &cq2, Some(Arc::clone(&srq)));
    assert_eq!(count.get(), 1, "woken by the attach");
    assert!(poll(&mut f, &waker).is_pending());
    fake2.complete(recv_wc(0x32, seq, sys::IBV_WC_SUCCESS));
    let d = w.ch.dispatch().unwrap();
    assert_eq!(d.events, 1);
    assert_eq!(count.get(), 2);
    assert!(matches!(poll(&mut f, &waker), Poll::Ready(Ok(_))));
}

/// F's poll takes F's own completion (an error) and wakes H, whose waker panics out of F's
/// poll. F keeps what it took: polled again, it resolves with the device's status. (Otherwise
/// the completion would be lost with the unwinding stack, and the request, counted complete,
/// would read as a success implied by a later one.)
#[test]
fn a_send_completion_taken_in_a_poll_that_unwinds_keeps_its_status() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x41, 64, &cq, None);
    let mut h = post_send(&qp, false).into_future(); // unsignaled, request 0
    let mut f = post_send(&qp, true).into_future(); // signaled, request 1
    let hw = Waker::from(Arc::new(PanicWake));
    assert!(poll(&mut h, &hw).is_pending(), "H waits");
    // F's request fails on the device (its completion covers H's, before it).
    fake.complete(send_wc(0x41, 1, sys::IBV_WC_REM_ACCESS_ERR));
    let fw = Waker::from(Arc::new(Count::default()));
    assert!(quiet(|| poll(&mut f, &fw)).is_err(), "H's waker panicked out of F's poll");
    match poll(&mut f, &fw) {
        Poll::Ready(Ok((c, ()))) => {
            assert_eq!(c.status(), crate::wc::WcStatus::RemAccessErr, "{c:?}");
            assert_eq!(c.source(), crate::wc::CompletionSource::Own);
        }
        other => panic!("{other:?}"),
    }
    drop(h);
}

/// The same on a receive queue, where the request would never have resolved.
#[test]
fn a_receive_completion_taken_in_a_poll_that_unwinds_is_delivered() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x42, 64, &cq, None);
    let mut h = post_recv(&qp).into_future(); // request 0
    let mut f = post_recv(&qp).into_future(); // request 1
    let hw = Waker::from(Arc::new(PanicWake));
    assert!(poll(&mut h, &hw).is_pending(), "H waits");
    fake.complete(recv_wc(0x42, 0, sys::IBV_WC_SUCCESS)); // H's, routed by F's poll
    fake.complete(recv_wc(0x42, 1, sys::IBV_WC_SUCCESS)); // F's, taken by F's poll
    let fw = Waker::from(Arc::new(Count::default()));
    assert!(quiet(|| poll(&mut f, &fw)).is_err(), "H's waker panicked out of F's poll");
    match poll(&mut f, &fw) {
        Poll::Ready(Ok((c, ()))) => assert!(c.is_success() && c.byte_len() == 8, "{c:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.left(), 0);
    drop(h);
}

/// As `a_future_resolving_with_completions_left_hands_the_cq_to_the_next_dispatch`, but F's
/// own completion is not among those its poll took: F wakes itself and is dropped before it
/// polls again (a `select!` or a timeout). The rest of the CQ, G's completion among it, still
/// goes to the next dispatch. (Otherwise it would wait for an unrelated completion.)
#[test]
fn a_future_dropped_with_completions_left_does_not_strand_them() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x14, 64, &cq, None);
    let mut tokens: Vec<_> = (0..20).map(|_| post_send(&qp, true)).collect();
    let mut f = tokens.pop().unwrap().into_future(); // request 19
    let g = Arc::new(Mutex::new(Some(tokens.pop().unwrap().into_future()))); // request 18
    let g_wakes = Arc::new(Count::default());
    g_waits_then_20_land_while_armed(fake, &g, &g_wakes, 0x14, None);
    let f_wakes = Arc::new(Count::default());
    assert!(poll(&mut f, &Waker::from(Arc::clone(&f_wakes))).is_pending(), "F's is among the 4 left");
    assert_eq!(f_wakes.get(), 1, "F woke itself to poll the rest");
    assert_eq!(fake.left(), 4);
    drop(f);
    the_next_dispatch_serves_the_4_left_and_g(w, &g, &g_wakes);
    drop(tokens);
}

/// A waker's clone is the program's code, and may poll the CQ (a `static` CQ's `progress` from
/// an executor's clone): a future registering such a waker clones it before the queue's waker
/// list is locked, so the routing of a completion of the same queue, which wakes under that
/// lock, does not deadlock (cloned under it, the poll would hang with the CQ's routing lock
/// held, and every other poller of the CQ with it).
#[test]
fn a_waker_whose_clone_polls_the_cq_does_not_deadlock_the_registration() {
    use std::time::Duration;
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x31, 64, &cq, None);
    let mut f0 = post_send(&qp, true).into_future(); // request 0
    let mut f1 = post_send(&qp, true).into_future(); // request 1
    let f0_wakes = Arc::new(Count::default());
    let f0_waker = Waker::from(Arc::clone(&f0_wakes));
    assert!(poll(&mut f0, &f0_waker).is_pending());
    assert!(poll(&mut f1, &Waker::from(Arc::new(Count::default()))).is_pending());
    // Request 0 completes at the device; nobody has polled it.
    fake.complete(send_wc(0x31, 0, sys::IBV_WC_SUCCESS));
    let routed = Arc::new(Mutex::new(None));
    let (hostile, _) = {
        let (cq, routed) = (Arc::clone(&cq), Arc::clone(&routed));
        hooked(Box::new(move || *routed.lock().unwrap() = Some(cq.poll_and_route().map_err(|e| e.to_string()))))
    };
    // On another thread, bounded: a deadlock fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let pending = poll(&mut f1, &hostile).is_pending();
        let _ = tx.send(pending);
        std::mem::forget(f1);
    });
    let Ok(pending) = rx.recv_timeout(Duration::from_secs(10)) else {
        // Not dropped: its drop would wait for the deadlocked list's lock.
        std::mem::forget(f0);
        panic!("the registration deadlocked (the waker's clone polled the CQ under the waker list's lock)");
    };
    assert!(pending, "request 1 has not completed");
    assert_eq!(*routed.lock().unwrap(), Some(Ok(1)), "the clone's poll routed request 0's completion");
    assert_eq!(f0_wakes.get(), 1, "request 0's future is woken");
    assert!(matches!(poll(&mut f0, &f0_waker), Poll::Ready(Ok(_))));
    // And the CQ is still usable by another poller.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cq.poll_and_route().is_ok());
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true), "the CQ's routing lock was left held");
}

/// A reset wakes the futures of the requests it flushed only once its clean-up is done: a waker
/// that panics (an executor that is gone) cannot cut it short. Its panic comes out at the end,
/// and the stale completions are off the CQ and the QP takes posts again. (Woken in the middle,
/// the panic would come out of the send queue's wake and skip the receive queue's graves, both
/// CQs' stale completions and the end of `broken`.)
#[test]
fn a_waker_that_panics_in_a_resets_wake_leaves_the_reset_done() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x41, 64, &cq, None);
    let mut f = post_send(&qp, true).into_future();
    assert!(poll(&mut f, &Waker::from(Arc::new(PanicWake))).is_pending());
    qp.mark_broken();
    // A completion the device produced before the reset: stale after it.
    fake.complete(send_wc(0x41, 0, sys::IBV_WC_WR_FLUSH_ERR));
    assert!(quiet(|| qp.fake_after_reset()).is_err(), "the waker's panic comes out");
    assert_eq!(fake.left(), 0, "the stale completion is off the CQ");
    assert!(qp.check_usable().is_ok(), "the QP takes posts again");
    assert!(matches!(poll(&mut f, &Waker::from(Arc::new(Count::default()))), Poll::Ready(Ok(_))));
}

/// A QP on a shared receive queue is being dropped: its last `Arc` is gone, and its drop has
/// not yet recorded it as retired (a window of a few instructions on another thread). A
/// receive it took from the SRQ, polled in that window, still completes the SRQ's request:
/// the CQ's route of the QP names the SRQ. (Dropped, the completion would leave the receive
/// pending for ever, its wait timing out although the data had landed, and the SRQ a slot of
/// its depth short.)
#[test]
fn an_srq_receive_of_a_qp_in_its_drop_window_reaches_the_srq() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let srq = w.srq(8);
    let _live = w.qp(0x51, 8, &cq, Some(Arc::clone(&srq)));
    // QP 0x52's route, its `Weak` dead: the window between its last `Arc` and its drop's record.
    cq.register(0x52, std::sync::Weak::new(), Some(Arc::downgrade(&srq)), 0).unwrap();
    let (seq, token) = post_srq_recv(&srq);
    fake.complete(recv_wc(0x52, seq, sys::IBV_WC_SUCCESS));
    cq.poll_and_route().unwrap();
    assert_eq!(fake.left(), 0);
    assert!(!srq.rq.is_pending(seq), "the SRQ's request is complete");
    let (c, ()) = token.wait(std::time::Duration::from_millis(50)).map_err(|e| e.error).expect("delivered");
    assert!(c.is_success());
}

/// A request carrying a device capability (`IpCsum`) is built only for a QP of the context that
/// reported it: one of another context is refused before the provider sees it, as the other
/// objects that meet (here the fake device's QP, whose context id is 0).
#[test]
fn a_capability_of_another_context_is_refused_when_the_request_is_built() {
    use crate::device::IpCsum;
    use crate::transport::RAW_PACKET;
    use crate::wr::SendRequest;
    let w = World::new();
    let (cq, _fake) = w.cq();
    let qp = w.qp(0x51, 8, &cq, None);
    let empty: &[u8] = &[];
    let mine = crate::wr::InlineSend::new(empty).ip_csum(IpCsum::<RAW_PACKET>::of_context(0));
    assert!(crate::scope::build_checked::<RAW_PACKET, _>(&qp, &mine).is_ok());
    let other = crate::wr::InlineSend::new(empty).ip_csum(IpCsum::<RAW_PACKET>::of_context(7));
    match crate::scope::build_checked::<RAW_PACKET, _>(&qp, &other) {
        Err(crate::Error::InvalidArgument { verb: "ibv_post_send", reason }) => {
            assert!(reason.contains("another device context"), "{reason}")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // Under another flag wrapper too.
    let wrapped = crate::wr::InlineSend::new(empty).ip_csum(IpCsum::<RAW_PACKET>::of_context(7)).solicited();
    assert!(crate::scope::build_checked::<RAW_PACKET, _>(&qp, &wrapped).is_err());
}

/// On a device without atomic operations (`atomic_cap` `IBV_ATOMIC_NONE`; the fake device
/// made with `World::with_atomics(false)`), atomic requests are refused when they are built,
/// before the provider sees them, as are a QP granted remote atomics and a region registered
/// with REMOTE_ATOMIC; the same requests build on a device with them, and other requests
/// build on both.
#[test]
fn atomics_are_refused_on_a_device_without_them() {
    use crate::access::RemoteAll;
    use crate::mr::{LocalBuf, LocalBufMut, OdpTag, RemoteSlice};
    use crate::transport::RC;
    use crate::wr::{CompareSwap, FetchAdd, SendRequest, Write};
    for atomics in [true, false] {
        let w = World::with_atomics(atomics);
        let (cq, _fake) = w.cq();
        let qp = w.qp(0x52, 8, &cq, None);
        let pd = w.pd.id();
        let result = || LocalBufMut::from_parts(0x1000, 8, 1, OdpTag::default(), pd);
        let remote = RemoteSlice::<RemoteAll>::from_wire(0x2000, 8, 2);
        let refused = |r: crate::Result<()>, what: &str| match (atomics, r) {
            (true, Ok(())) => {}
            (false, Err(crate::Error::Unsupported { verb, what: why, .. })) => {
                assert_eq!(verb.name(), "ibv_post_send", "{what}");
                assert!(why.contains("atomic_cap"), "{what}: {why}");
            }
            (_, r) => panic!("{what} with atomics {atomics}: {r:?}"),
        };
        refused(crate::scope::build_checked::<RC, _>(&qp, &FetchAdd::new(result(), remote, 1)).map(drop), "FetchAdd");
        refused(
            crate::scope::build_checked::<RC, _>(&qp, &CompareSwap::new(result(), remote, 1, 2)).map(drop),
            "CompareSwap",
        );
        let src = LocalBuf::from_parts(0x3000, 8, 3, OdpTag::default(), pd);
        assert!(crate::scope::build_checked::<RC, _>(&qp, &Write::new(src, remote)).is_ok(), "a WRITE builds");
        // Under flag wrappers too.
        let wrapped = FetchAdd::new(result(), remote, 1).unsignaled().fence();
        refused(crate::scope::build_checked::<RC, _>(&qp, &wrapped).map(drop), "a wrapped FetchAdd");
        if atomics {
            continue;
        }
        // Refused before any call into the (fake) provider: a QP granted remote atomics, and a
        // region registered with REMOTE_ATOMIC.
        let mut init = sys::ibv_qp_attr { qp_access_flags: sys::IBV_ACCESS_REMOTE_ATOMIC, ..Default::default() };
        init.port_num = 1;
        let attr = crate::qp::CmAttr { attr: init, mask: sys::IBV_QP_ACCESS_FLAGS | sys::IBV_QP_PORT };
        match qp.modify(sys::IBV_QPS_INIT, &attr, "RESET", "INIT") {
            Err(crate::Error::Unsupported { verb, .. }) => assert_eq!(verb.name(), "ibv_modify_qp"),
            other => panic!("a QP granted remote atomics: {other:?}"),
        }
        let pd = crate::pd::Pd { inner: Arc::clone(&w.pd) };
        match pd.alloc_mr(64, crate::access::REMOTE_ALL) {
            Err(crate::Error::Unsupported { verb, .. }) => assert_eq!(verb.name(), "ibv_reg_mr"),
            other => panic!("a region with REMOTE_ATOMIC: {:?}", other.map(|m| m.len())),
        }
        std::mem::forget(pd);
    }
}

/// `create_ah_from_wc` refuses a receive completion polled from a CQ of another device than
/// the PD's before `ibv_init_ah_from_wc` sees it (the GRH's destination would be looked up in
/// the wrong device's GID table): the completion names the device that decoded it.
#[test]
fn an_address_handle_from_a_completion_of_another_device_is_refused() {
    let w = World::new();
    let pd = crate::pd::Pd { inner: Arc::clone(&w.pd) };
    let recv = sys::ibv_wc { opcode: sys::IBV_WC_RECV, qp_num: 0x52, ..Default::default() };
    let other = crate::wc::Completion::from_raw(&recv, crate::cq::WcFlagsQuirk::None, w.ctx.tag - 1);
    assert!(other.is_success() && other.opcode() == crate::wc::WcOpcode::Recv);
    match pd.create_ah_from_wc(1, &other, &[0; 40]) {
        Err(crate::Error::InvalidArgument { verb: "ibv_create_ah_from_wc", reason }) => {
            assert!(reason.contains("another device than the PD's (fake0)"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// A dropped token's parked buffer whose drop panics, released by a poll in the middle of a
/// batch: the rest of the batch is routed all the same (the panic comes out at the end). A
/// panic left there lost the error completion of the next request, polled off the CQ with it,
/// and a later completion then made that failed request read as implied successful.
#[test]
fn a_parked_buffer_whose_drop_panics_does_not_cut_a_batch_short() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x49, 64, &cq, None);
    let seq0 = qp.sq.lock().push(true);
    drop(OwnedToken::new(QueueArc::Send(Arc::clone(&qp)), seq0, crate::scope::PanickingDrop, None));
    assert_eq!(qp.sq.parked(), 1);
    let mut f1 = post_send(&qp, true).into_future();
    let count = Arc::new(Count::default());
    let wk = Waker::from(Arc::clone(&count));
    assert!(poll(&mut f1, &wk).is_pending());
    fake.complete(send_wc(0x49, seq0, sys::IBV_WC_SUCCESS));
    fake.complete(send_wc(0x49, seq0 + 1, sys::IBV_WC_REM_ACCESS_ERR));
    let routed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cq.poll_and_route()));
    assert!(routed.is_err(), "the buffer's panic comes out of the poll");
    assert_eq!((fake.left(), qp.sq.parked()), (0, 0));
    assert_eq!(count.get(), 1, "the failed request's future was woken");
    match poll(&mut f1, &wk) {
        Poll::Ready(Ok((c, ()))) => assert_eq!(c.status(), crate::wc::WcStatus::RemAccessErr, "{c:?}"),
        other => panic!("{:?}", other.is_ready()),
    }
}

/// The same panicking drop inside a dispatch of two CQs' events: the other CQ is served (and
/// its future woken) before the panic comes out; it was left unserved and unarmed, its future
/// never woken.
#[test]
fn a_parked_buffer_whose_drop_panics_in_a_dispatch_leaves_no_cq_unserved() {
    let w = World::new();
    let (cqa, fa) = w.cq();
    let (cqb, fb) = w.cq();
    let qa = w.qp(0x4a, 64, &cqa, None);
    let qb = w.qp(0x4b, 64, &cqb, None);
    let seq0 = qa.sq.lock().push(true);
    drop(OwnedToken::new(QueueArc::Send(Arc::clone(&qa)), seq0, crate::scope::PanickingDrop, None));
    let mut f = post_send(&qa, true).into_future();
    let mut g = post_send(&qb, true).into_future();
    let (cf, cg) = (Arc::new(Count::default()), Arc::new(Count::default()));
    let (wf, wg) = (Waker::from(Arc::clone(&cf)), Waker::from(Arc::clone(&cg)));
    assert!(poll(&mut f, &wf).is_pending());
    assert!(poll(&mut g, &wg).is_pending());
    fa.complete(send_wc(0x4a, seq0, sys::IBV_WC_SUCCESS));
    fa.complete(send_wc(0x4a, seq0 + 1, sys::IBV_WC_SUCCESS));
    fb.complete(send_wc(0x4b, 0, sys::IBV_WC_SUCCESS));
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.ch.dispatch()));
    assert!(served.is_err(), "the buffer's panic comes out of the dispatch");
    assert_eq!((cf.get(), cg.get()), (1, 1), "both CQs' futures woken");
    assert!(poll(&mut f, &wf).is_ready() && poll(&mut g, &wg).is_ready());
    assert!(fa.armed.load(SeqCst) && fb.armed.load(SeqCst), "both CQs armed again");
}

// The fake provider's posts: scopes, owned tokens and lanes posting through the real code, the
// provider taking or refusing each post as the test says, and the device completing what the
// test lands in the fake CQ.

/// What the fake provider answers to a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Accept,
    /// Refuses, naming the request at this index of the list in `bad_wr` (the ones before it
    /// are taken).
    RefuseAt(usize),
    /// Refuses after taking the whole list, `bad_wr` left NULL (rxe's failed doorbell).
    RefuseNull,
    /// Refuses after taking the whole list, `bad_wr` naming a request that is not one of the
    /// list's (a provider's mistake).
    RefuseNamingOther,
}

/// What [`Answer::RefuseNamingOther`] names: no request of any list (only its address is
/// used).
fn other_request<T>() -> *mut T {
    static OTHER: [u64; 32] = [0; 32];
    std::ptr::addr_of!(OTHER).cast_mut().cast()
}

/// The provider's side of one fake QP.
#[derive(Default)]
struct FakeQp {
    /// The answers to the next posts, in order (then `Accept`).
    answers: VecDeque<Answer>,
    /// `(wr_id, signaled)` of every send request taken.
    sends: Vec<(u64, bool)>,
    /// The `wr_id` of every receive taken.
    recvs: Vec<u64>,
}

/// The fake QPs, by the address of their `ibv_qp`.
static FAKE_QPS: Mutex<Vec<(usize, FakeQp)>> = Mutex::new(Vec::new());

fn with_fake_qp<R>(qp: *mut sys::ibv_qp, f: impl FnOnce(&mut FakeQp) -> R) -> R {
    let mut all = FAKE_QPS.lock().unwrap_or_else(|e| e.into_inner());
    let i = match all.iter().position(|(a, _)| *a == qp as usize) {
        Some(i) => i,
        None => {
            all.push((qp as usize, FakeQp::default()));
            all.len() - 1
        }
    };
    f(&mut all[i].1)
}

/// The fake provider's `ibv_post_send`: takes the list, or refuses it as told.
///
/// # Safety
/// As `ibv_post_send` is called: `wr` starts a valid list, `bad` is a valid out-pointer.
unsafe extern "C" fn fake_send(
    qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_send_wr,
    bad: *mut *mut sys::ibv_send_wr,
) -> i32 {
    let mut list = Vec::new();
    let mut p = wr;
    while !p.is_null() {
        list.push(p);
        // SAFETY: `p` is a request of the caller's valid list.
        p = unsafe { (*p).next };
    }
    with_fake_qp(qp, |f| {
        let answer = f.answers.pop_front().unwrap_or(Answer::Accept);
        let taken = match answer {
            Answer::RefuseAt(i) => i,
            Answer::Accept | Answer::RefuseNull | Answer::RefuseNamingOther => list.len(),
        };
        for &w in &list[..taken] {
            // SAFETY: as above.
            let w = unsafe { &*w };
            f.sends.push((w.wr_id, w.send_flags & sys::IBV_SEND_SIGNALED != 0));
        }
        let (named, ret) = match answer {
            Answer::Accept => return 0,
            Answer::RefuseAt(i) => (list[i], libc::ENOMEM),
            Answer::RefuseNull => (std::ptr::null_mut(), libc::EINVAL),
            Answer::RefuseNamingOther => (other_request(), libc::EINVAL),
        };
        // SAFETY: `bad` is the caller's valid out-pointer.
        unsafe { *bad = named };
        ret
    })
}

/// The fake provider's `ibv_post_recv` of one receive: takes it, or refuses it as told.
///
/// # Safety
/// As `ibv_post_recv` is called with one request.
unsafe extern "C" fn fake_recv(
    qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_recv_wr,
    bad: *mut *mut sys::ibv_recv_wr,
) -> i32 {
    with_fake_qp(qp, |f| {
        let (named, ret) = match f.answers.pop_front().unwrap_or(Answer::Accept) {
            Answer::Accept => {
                // SAFETY: `wr` is the caller's valid request.
                f.recvs.push(unsafe { (*wr).wr_id });
                return 0;
            }
            Answer::RefuseAt(_) => (wr, libc::ENOMEM),
            Answer::RefuseNull => (std::ptr::null_mut(), libc::EINVAL),
            Answer::RefuseNamingOther => {
                // SAFETY: as above.
                f.recvs.push(unsafe { (*wr).wr_id });
                (other_request(), libc::EINVAL)
            }
        };
        // SAFETY: `bad` is the caller's valid out-pointer.
        unsafe { *bad = named };
        ret
    })
}

/// A non-blocking pipe of the test's own: [read end, write end].
fn pipe() -> [i32; 2] {
    let mut fds = [0i32; 2];
    // SAFETY: a valid out-array of two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) }, 0);
    fds
}

/// Closes `fd`, a descriptor of the test's own that nothing uses afterwards.
fn close(fd: i32) {
    // SAFETY: the caller's descriptor, closed once and never used again.
    assert_eq!(unsafe { libc::close(fd) }, 0);
}

/// `ibv_post_srq_recv` calls of the recording SRQ provider ([`World::record_srq_posts`]): the
/// `ibv_srq`'s address (the fakes' are leaked, never reused) and the request's entry count.
static SRQ_POSTS: Mutex<Vec<(usize, i32)>> = Mutex::new(Vec::new());

/// The recording provider's `ibv_post_srq_recv`: takes every receive and notes its SRQ and
/// entry count.
///
/// # Safety
/// As `ibv_post_srq_recv` is called: `wr` a valid request.
unsafe extern "C" fn recording_srq_post(
    srq: *mut sys::ibv_srq,
    wr: *mut sys::ibv_recv_wr,
    _bad: *mut *mut sys::ibv_recv_wr,
) -> i32 {
    // SAFETY: the caller's valid request.
    let n = unsafe { (*wr).num_sge };
    SRQ_POSTS.lock().unwrap_or_else(|e| e.into_inner()).push((srq as usize, n));
    0
}

/// The entry counts of the receives the recording provider took on `srq`, in posting order.
fn srq_posts(srq: &Arc<SrqShared>) -> Vec<i32> {
    let me = crate::srq::Srq { shared: Arc::clone(srq) }.as_ptr() as usize;
    SRQ_POSTS.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|(s, _)| *s == me).map(|&(_, n)| n).collect()
}

impl World {
    /// This world's provider takes SRQ receives, recording them ([`srq_posts`]).
    fn record_srq_posts(&'static self) {
        // SAFETY: the world's context is leaked and its test's own; the inline
        // `ibv_post_srq_recv` reads `srq->context->ops.post_srq_recv`.
        unsafe { (*self.ctxp).ops.post_srq_recv = Some(recording_srq_post) };
    }

    /// A completion channel of this world: its C object (leaked) reads events from `read_fd`,
    /// and the library polls `polled_fd` for them. The C object's reference count makes
    /// `ibv_destroy_comp_channel` refuse (EBUSY) rather than free the fake, so the Rust side
    /// may be dropped for real (`ChannelShared::drop`).
    fn fake_channel(&'static self, read_fd: i32, polled_fd: i32) -> (CompChannel, *mut sys::ibv_comp_channel) {
        let chp: *mut sys::ibv_comp_channel =
            Box::leak(Box::new(sys::ibv_comp_channel { context: self.ctxp, fd: read_fd, refcnt: 1 << 20 }));
        (CompChannel::fake(NonNull::new(chp).unwrap(), polled_fd, Arc::clone(&self.ctx)), chp)
    }

    /// A PD over this world's C objects, in a context of its own named `name` whose verbs are
    /// `verbs` (a failing destroy or deregistration, say). Both are leaked: the context's drop
    /// would close the fake device.
    fn pd_with_verbs(&'static self, name: &str, verbs: &'static crate::device::Verbs) -> Arc<PdInner> {
        let ctx = Arc::new(ContextInner {
            ctx: self.ctx.ctx,
            name: name.into(),
            identity: crate::device::DeviceIdentity::Name(name.into()),
            tag: u16::MAX,
            id: 0,
            cqs: Mutex::new(Vec::new()),
            verbs,
            attr: crate::device::DeviceAttr::fake(0, true),
        });
        let pd = Arc::new(PdInner { pd: self.pd.pd, ctx });
        std::mem::forget(Arc::clone(&pd));
        pd
    }

    /// A fake registration of `pd` on this world's context (an `ibv_mr` inside a zeroed
    /// `verbs_mr`-sized block, leaked), lkey 0x77 and rkey 0x78.
    fn raw_mr(&'static self, pd: &Arc<PdInner>) -> NonNull<sys::ibv_mr> {
        let block: &'static mut [u64; 16] = Box::leak(Box::new([0u64; 16]));
        let mr = block.as_mut_ptr().cast::<sys::ibv_mr>();
        // SAFETY: the block is big enough and aligned for an `ibv_mr` (and `verbs_mr`'s tail).
        unsafe {
            (*mr).context = self.ctxp;
            (*mr).pd = pd.pd.as_ptr();
            (*mr).lkey = 0x77;
            (*mr).rkey = 0x78;
        }
        NonNull::new(mr).unwrap()
    }

    /// A QP over the fake device whose posts [`fake_send`] and [`fake_recv`] take, and whose
    /// verbs succeed. Its last `Arc` destroys it.
    fn posting_qp(
        &'static self,
        qp_num: u32,
        depth: u32,
        cq: &Arc<CqShared>,
        srq: Option<Arc<SrqShared>>,
    ) -> Arc<QpShared> {
        self.try_posting_qp(qp_num, depth, cq, srq).expect("fake attach")
    }

    /// As [`World::posting_qp`], or the error of its registration on `cq` (the QP then
    /// destroyed).
    fn try_posting_qp(
        &'static self,
        qp_num: u32,
        depth: u32,
        cq: &Arc<CqShared>,
        srq: Option<Arc<SrqShared>>,
    ) -> crate::Result<Arc<QpShared>> {
        let raw = self.raw_qp(qp_num);
        QpShared::try_fake_with_posts(raw, qp_num, depth, cq, Arc::clone(&self.pd), srq, fake_send, fake_recv)
    }

    /// An RC QP in RTS of [`World::posting_qp`], typed, with its shared part; never destroyed.
    fn rc_qp(&'static self, qp_num: u32, depth: u32, cq: &Arc<CqShared>) -> (Qp<RC, RTS>, Arc<QpShared>) {
        let shared = self.posting_qp(qp_num, depth, cq, None);
        std::mem::forget(Arc::clone(&shared));
        (Qp::from_fake(Arc::clone(&shared)), shared)
    }

    fn local(&self, addr: u64, len: u32) -> LocalBuf<'static> {
        LocalBuf::from_parts(addr, len, 7, OdpTag::default(), self.pd.id())
    }

    fn local_mut(&self, addr: u64, len: u32) -> LocalBufMut<'static> {
        LocalBufMut::from_parts(addr, len, 7, OdpTag::default(), self.pd.id())
    }
}

fn remote() -> RemoteSlice<RemoteAll> {
    RemoteSlice::new(0x9000, 4096, 0x55)
}

fn wc_of(qp_num: u32, wr_id: u64, status: u32, opcode: u32) -> sys::ibv_wc {
    sys::ibv_wc { wr_id, status, opcode, qp_num, byte_len: 8, ..Default::default() }
}

/// `(wr_id, signaled)` of every send request the provider took from `qp`.
fn sends(qp: &QpShared) -> Vec<(u64, bool)> {
    with_fake_qp(qp.as_ptr(), |f| f.sends.clone())
}

/// The `wr_id` of every receive the provider took from `qp`.
fn recvs(qp: &QpShared) -> Vec<u64> {
    with_fake_qp(qp.as_ptr(), |f| f.recvs.clone())
}

fn answer_next(qp: &QpShared, a: Answer) {
    with_fake_qp(qp.as_ptr(), |f| f.answers.push_back(a));
}

/// A scope whose own request is signaled and in flight ends while an owned unsignaled request
/// (another owner on the same QP) sits at the tail of the send queue: its drain waits for its
/// own completion, and the QP stays usable. (A drain that took the queue's uncovered tail for
/// its own would give up at the first empty poll, force the QP to ERR and RESET and return
/// `QpBroken`.)
#[test]
fn a_scope_waits_for_its_own_request_past_another_owners_unsignaled_tail() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = w.rc_qp(0x500, 16, &cq);
    let started = std::time::Instant::now();
    let mut device = None;
    let r = scope(|s| {
        let t = s.post_send(&qp, Write::new(w.local(0x1000, 64), remote())).expect("posted");
        let (seq, signaled) = sends(&shared)[0];
        assert!(signaled);
        drop(t);
        let owned = qp.post_send_owned(Write::new(w.local(0x2000, 64), remote()).unsignaled()).expect("owned");
        assert!(!sends(&shared)[1].1, "an unsignaled tail");
        // The device completes the scope's request 50 ms later.
        device = Some(std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            fake.complete(wc_of(0x500, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        }));
        owned
    });
    device.unwrap().join().unwrap();
    let owned = r.expect("the scope's own request completed");
    assert!(started.elapsed() >= Duration::from_millis(50), "it waited for the completion");
    assert!(shared.check_usable().is_ok(), "the QP was not reset");
    assert_eq!(shared.outstanding(), (1, 0), "the owned request alone is outstanding");
    drop(owned);
}

/// Scope A ends with its signaled request in flight while scope B (another thread) has just
/// posted an unsignaled request after it: A waits for its own completion, B's next (signaled)
/// post is taken and its completion completes B's first request. (A drain that took B's tail
/// for its own would reset the QP under B, failing A with `QpBroken` and refusing B's next
/// post.)
#[test]
fn a_scope_ending_leaves_another_scopes_unsignaled_run_alone() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = w.rc_qp(0x560, 16, &cq);
    let a_posted = std::sync::Barrier::new(2);
    let b_posted = std::sync::Barrier::new(2);
    let a_done = std::sync::Barrier::new(2);
    std::thread::scope(|ts| {
        let b = ts.spawn(|| {
            scope(|s| {
                a_posted.wait();
                let t = s.post_send(&qp, Write::new(w.local(0x2000, 8), remote()).unsignaled()).expect("B posts");
                b_posted.wait();
                a_done.wait();
                let next = s.post_send(&qp, Write::new(w.local(0x3000, 8), remote())).map_err(|e| e.error)?;
                let (seq, signaled) = *sends(&shared).last().unwrap();
                assert!(signaled);
                fake.complete(wc_of(0x560, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                let first = s.wait(t, Duration::from_secs(5)).map_err(|e| e.error)?.0;
                let last = s.wait(next, Duration::from_secs(5)).map_err(|e| e.error)?.0;
                Ok::<_, crate::Error>((first.is_success(), last.is_success()))
            })
        });
        let mut device = None;
        let a = scope(|s| {
            let t = s.post_send(&qp, Write::new(w.local(0x1000, 8), remote())).expect("A posts");
            let (seq, signaled) = sends(&shared)[0];
            assert!(signaled);
            a_posted.wait();
            b_posted.wait();
            assert_eq!(sends(&shared).len(), 2, "B's unsignaled request after A's");
            drop(t);
            device = Some(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                fake.complete(wc_of(0x560, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            }));
        });
        device.unwrap().join().unwrap();
        a_done.wait();
        let b = b.join().unwrap();
        assert!(a.is_ok(), "{a:?}");
        assert_eq!(b.expect("B's scope").expect("B's requests"), (true, true));
    });
    assert!(shared.check_usable().is_ok());
}

/// A lane's request is complete only through a completion of the lane: a completion whose
/// `wr_id` is the same number without `LANE_BIT` (a scope's or owned request's) leaves it
/// pending, and a receive completion carrying the send lane's number (with `RECV_BIT`) is the
/// receive lane's. `Prepared::into_inner` and `PreparedRecv::received` answer only then.
#[test]
fn lane_numbers_do_not_collide_with_the_books_numbers() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x510, 8, &cq);
    let r = scope(|s| {
        let (mut lane, mut rlane) = s.lanes(&mut qp).expect("lanes");
        let mut read = lane.prepare(Read::new(w.local_mut(0x1000, 64), remote())).expect("prepared");
        let tok = lane.post(&mut read).expect("posted");
        let seq = sends(&shared).last().unwrap().0;
        assert_eq!(seq & LANE_BIT, LANE_BIT);
        fake.complete(wc_of(0x510, seq & !LANE_BIT, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        cq.take_all().unwrap();
        let read = read.into_inner().expect_err("outstanding: the device may still write the READ's destination");
        assert_eq!(lane.outstanding(), 1);
        let mut rcv = rlane.prepare(Recv::new(w.local_mut(0x3000, 64))).expect("prepared");
        let rtok = rlane.post(&mut rcv).expect("posted");
        let rseq = with_fake_qp(shared.as_ptr(), |f| *f.recvs.last().unwrap());
        assert_eq!(rseq & (RECV_BIT | LANE_BIT), RECV_BIT | LANE_BIT);
        assert!(rcv.received().is_none());
        // Another poller than the lane takes the receive's completion: kept for the lane.
        fake.complete(wc_of(0x510, rseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        cq.take_all().unwrap();
        assert_eq!(lane.outstanding(), 1, "a receive completion completed a send");
        assert!(rcv.received().is_some());
        assert!(rlane.wait(rtok, Duration::from_secs(1)).expect("kept").is_success());
        fake.complete(wc_of(0x510, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        assert!(lane.wait(tok, Duration::from_secs(1)).expect("completes").is_success());
        read.into_inner().expect("complete");
    });
    assert!(r.is_ok(), "{r:?}");
    assert!(shared.check_usable().is_ok());
}

/// A post list the provider refuses without naming a request (rxe's doorbell) counts every
/// request posted and none covered, so the lane's requests stay outstanding (nothing is
/// handed back) until a later signaled request covers them; one that names request k counts
/// exactly the k before it.
#[test]
fn a_lanes_refused_post_list_keeps_what_may_be_queued() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x520, 16, &cq);
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let wrs: Vec<_> = (0..4).map(|i| Read::new(w.local_mut(0x1000 + i * 64, 64), remote())).collect();
        let mut list = lane.prepare_list(wrs, 2).expect("list");
        answer_next(&shared, Answer::RefuseNull);
        lane.post_list(&mut list).expect_err("refused");
        assert_eq!(lane.outstanding(), 4, "every request of the list may be queued");
        let mut list = list.into_inner().expect_err("nothing handed back while they may be queued");
        answer_next(&shared, Answer::RefuseAt(3));
        lane.post_list(&mut list).expect_err("refused at 3");
        assert_eq!(lane.outstanding(), 7, "three more taken");
        let mut one = lane.prepare(Write::new(w.local(0x5000, 8), remote())).expect("prepared");
        let tok = lane.post(&mut one).expect("posted");
        let last = sends(&shared).last().unwrap().0;
        fake.complete(wc_of(0x520, last, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        lane.wait(tok, Duration::from_secs(1)).expect("completes");
        assert_eq!(lane.outstanding(), 0);
        list.into_inner().expect("all complete");
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A late flush of an earlier lane's request on the QP (after the scope's forced reset, which
/// that lane's unsignaled tail caused) completes nothing of the next lane.
#[test]
fn a_late_flush_of_an_earlier_lane_completes_nothing_of_the_next() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x530, 8, &cq);
    let r = scope_with_timeout(Duration::from_millis(300), |s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
        lane.post_unsignaled(&mut wr).expect("posted");
    });
    assert!(matches!(r, Err(crate::Error::QpBroken { .. })), "{r:?}");
    let old = sends(&shared).last().unwrap().0;
    // The program resets the QP (what `Qp::reset` does to the books).
    shared.fake_after_reset();
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut wr = lane.prepare(Read::new(w.local_mut(0x2000, 8), remote())).expect("prepared");
        let tok = lane.post(&mut wr).expect("posted");
        let new = sends(&shared).last().unwrap().0;
        assert!(new > old);
        fake.complete(wc_of(0x530, old, sys::IBV_WC_WR_FLUSH_ERR, 0));
        cq.take_all().unwrap();
        assert_eq!(lane.outstanding(), 1);
        let wr = wr.into_inner().expect_err("still outstanding");
        fake.complete(wc_of(0x530, new, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_READ));
        assert!(lane.wait(tok, Duration::from_secs(1)).expect("completes").is_success());
        wr.into_inner().expect("done");
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A buffer whose drop the test sees.
struct Sentinel(Arc<AtomicBool>);
impl Drop for Sentinel {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

/// An SRQ receive whose owned token was dropped keeps its buffer while the SRQ may still
/// hand it to a QP: through the drop of the program's SRQ handle and of the QP, until the
/// SRQ's own destroy (its last `Arc`, which the QP held).
#[test]
fn an_srq_receive_of_a_dropped_token_is_kept_until_the_srq_is_destroyed() {
    let w = World::new();
    let (cq, _) = w.cq();
    let srq = w.destroyable_srq(4);
    let qp = w.posting_qp(0x540, 4, &cq, Some(Arc::clone(&srq)));
    let seq = srq.rq.lock().push(true);
    let freed = Arc::new(AtomicBool::new(false));
    drop(OwnedToken::new(QueueArc::Srq(Arc::clone(&srq)), seq, Sentinel(Arc::clone(&freed)), None));
    assert!(!freed.load(SeqCst), "a dropped token freed an SRQ buffer the device may still write");
    drop(srq);
    assert!(!freed.load(SeqCst));
    let weak = Arc::downgrade(qp.srq.as_ref().unwrap());
    drop(qp);
    assert!(weak.upgrade().is_none(), "SRQ destroyed");
    assert!(freed.load(SeqCst), "released once the SRQ is destroyed");
}

/// An SRQ receive consumed by a QP destroyed before its completion is polled stays parked
/// until that completion is routed (to the SRQ, through the CQ's list of retired QPs); a
/// completion of the same number from a QP of another SRQ releases nothing of this one.
#[test]
fn an_srq_receive_of_a_destroyed_qp_is_released_by_its_routed_completion() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let srq = w.srq(4);
    let other_srq = w.srq(4);
    let qp = w.posting_qp(0x550, 4, &cq, Some(Arc::clone(&srq)));
    let other = w.posting_qp(0x551, 4, &cq, Some(Arc::clone(&other_srq)));
    let seq = srq.rq.lock().push(true);
    assert_eq!(other_srq.rq.lock().push(true), seq, "both SRQs number from 0");
    let freed = Arc::new(AtomicBool::new(false));
    drop(OwnedToken::new(QueueArc::Srq(Arc::clone(&srq)), seq, Sentinel(Arc::clone(&freed)), None));
    fake.complete(recv_wc(0x551, seq, sys::IBV_WC_SUCCESS));
    cq.take_all().unwrap();
    assert!(!freed.load(SeqCst), "another SRQ's completion released this SRQ's buffer");
    assert!(srq.rq.is_pending(seq));
    fake.complete(recv_wc(0x550, seq, sys::IBV_WC_SUCCESS));
    drop(qp);
    assert!(!freed.load(SeqCst));
    cq.take_all().unwrap();
    assert!(freed.load(SeqCst), "released by its routed completion");
    std::mem::forget(other);
}

/// A QP broken by a CQ error (`Context::next_async_event` on `IBV_EVENT_CQ_ERR` calls
/// `mark_broken`) refuses to open a lane and refuses scope and owned posts with `QpBroken`,
/// before the provider sees them; a lane opened before goes on posting to the provider, as a C
/// program would (its fast path reads no flag), and its requests complete as the device says.
#[test]
fn a_broken_qp_refuses_new_lanes_and_an_open_lane_posts_on() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x570, 8, &cq);
    let broken = |e: &crate::Error| matches!(e, crate::Error::QpBroken { qp_num: 0x570 });
    let r = scope(|s| {
        let mut lane = s.send_lane(&mut qp).expect("lane");
        let mut wr = lane.prepare(Write::new(w.local(0x1000, 8), remote())).expect("prepared");
        shared.mark_broken();
        let tok = lane.post(&mut wr).expect("the open lane posts on");
        let (seq, _) = *sends(&shared).last().unwrap();
        fake.complete(wc_of(0x570, seq, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RDMA_WRITE));
        let c = lane.wait(tok, Duration::from_secs(1)).expect("completes");
        assert_eq!(c.status(), crate::wc::WcStatus::WrFlushErr);
    });
    assert!(r.is_ok(), "nothing outstanding: {r:?}");
    let r = scope(|s| assert!(broken(&s.send_lane(&mut qp).expect_err("refused"))));
    assert!(r.is_ok(), "{r:?}");
    let r = scope(|s| assert!(broken(&s.recv_lane(&mut qp).expect_err("refused"))));
    assert!(r.is_ok(), "{r:?}");
    let r = scope(|s| {
        let e = s.post_send(&qp, Write::new(w.local(0x2000, 8), remote())).expect_err("refused");
        assert!(broken(&e.error) && e.wr.is_some(), "handed back");
    });
    assert!(r.is_ok(), "{r:?}");
    let e = qp.post_send_owned(Write::new(w.local(0x3000, 8), remote())).expect_err("refused");
    assert!(broken(&e.error));
    assert_eq!(sends(&shared).len(), 1, "the provider saw only the open lane's post");
}

/// A receive-lane post the provider refuses naming it in `bad_wr` was not queued: it is not
/// posted, the buffer is free at once, and the scope ends without waiting or breaking the QP.
/// One the provider refuses without naming it (rxe's doorbell) may have been queued: it stays
/// posted until it completes. (A refused receive kept outstanding would make the drain wait its
/// whole timeout, then break the QP.) A send lane counts every refused request as posted and
/// uncovered, and its next signaled request covers them.
#[test]
fn a_receive_the_provider_names_as_refused_is_not_posted_by_a_lane() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x580, 8, &cq);
    let started = std::time::Instant::now();
    let r = scope_with_timeout(Duration::from_secs(3), |s| {
        let (mut lane, mut rlane) = s.lanes(&mut qp).expect("lanes");
        let mut rcv = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
        answer_next(&shared, Answer::RefuseAt(0));
        rlane.post(&mut rcv).expect_err("refused, bad_wr names it");
        assert_eq!(rlane.outstanding(), 0);
        assert!(rcv.received().is_some(), "the device was never given the buffer");
        // Posted again, taken: the same number.
        let rtok = rlane.post(&mut rcv).expect("posted");
        let rseq = with_fake_qp(shared.as_ptr(), |f| f.recvs[0]);
        assert_eq!(rseq, RECV_BIT | LANE_BIT, "the refused number was not used");
        fake.complete(wc_of(0x580, rseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        assert!(rlane.wait(rtok, Duration::from_secs(1)).expect("completes").is_success());
        // A receive refused without a name stays posted until it completes.
        answer_next(&shared, Answer::RefuseNull);
        rlane.post(&mut rcv).expect_err("refused");
        assert_eq!(rlane.outstanding(), 1);
        assert!(rcv.received().is_none(), "possibly queued");
        fake.complete(wc_of(0x580, rseq + 1, sys::IBV_WC_WR_FLUSH_ERR, sys::IBV_WC_RECV));
        cq.take_all().unwrap();
        assert_eq!(rlane.outstanding(), 0);
        let mut wr = lane.prepare(Write::new(w.local(0x2000, 8), remote())).expect("prepared");
        // A send lane does not read `bad_wr`: both count as posted, uncovered.
        answer_next(&shared, Answer::RefuseAt(0));
        lane.post(&mut wr).expect_err("refused, bad_wr names it");
        answer_next(&shared, Answer::RefuseNull);
        lane.post_unsignaled(&mut wr).expect_err("refused");
        assert_eq!(lane.outstanding(), 2);
        let tok = lane.post(&mut wr).expect("posted");
        let (seq, signaled) = *sends(&shared).last().unwrap();
        assert!(signaled && seq == LANE_BIT + 2);
        fake.complete(wc_of(0x580, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        assert!(lane.wait(tok, Duration::from_secs(1)).expect("completes").is_success());
        assert_eq!(lane.outstanding(), 0, "the signaled request covered the refused ones");
    });
    assert!(r.is_ok(), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "the drain waited for nothing");
    assert!(shared.check_usable().is_ok());
}

/// A receive lane forgotten (`mem::forget`: its drop, which closes it, never runs) closes with
/// its scope: the next scope's receives on the QP are taken. They were refused
/// (`InvalidArgument`, a receive lane open) until another lane opened and was dropped.
#[test]
fn a_forgotten_receive_lane_closes_with_its_scope() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x590, 8, &cq);
    let r = scope(|s| {
        std::mem::forget(s.recv_lane(&mut qp).expect("lane"));
    });
    assert!(r.is_ok(), "{r:?}");
    let r = scope(|s| {
        let t = s.post_recv(&qp, Recv::new(w.local_mut(0x1000, 8))).expect("taken");
        let seq = with_fake_qp(shared.as_ptr(), |f| *f.recvs.last().unwrap());
        fake.complete(wc_of(0x590, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        assert!(s.wait(t, Duration::from_secs(1)).expect("completes").0.is_success());
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A receive-lane post refused without a name (`bad_wr` NULL: it may have been queued) is the
/// last receive of the lane: no completion is promised for it, so the scope's drain gives up at
/// once and resets the QP, as for a scope receive refused the same way, rather than wait its
/// whole timeout and then the flush's.
#[test]
fn a_receive_lanes_unnamed_refusal_at_its_tail_does_not_hold_the_drain() {
    let w = World::new();
    let (cq, _) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x5a0, 8, &cq);
    let started = std::time::Instant::now();
    let r = scope_with_timeout(Duration::from_secs(3), |s| {
        let mut rlane = s.recv_lane(&mut qp).expect("lane");
        let mut p = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
        answer_next(&shared, Answer::RefuseNull);
        rlane.post(&mut p).expect_err("refused, bad_wr NULL");
        assert_eq!(rlane.outstanding(), 1, "possibly queued");
        assert!(p.received().is_none());
    });
    assert!(matches!(r, Err(crate::Error::QpBroken { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "the drain waited {:?}", started.elapsed());
}

/// An ordered receive lane hands completions out in posting order, with no token: with nothing
/// posted `wait_next` says so at once; a timeout leaves the same receive to wait for; then each
/// call hands out the oldest receive not handed out, whether its own poll found it or another
/// poller kept it for the lane; a flushed receive is handed out like the others.
#[test]
fn an_ordered_receive_lane_hands_completions_out_in_posting_order() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x5c0, 8, &cq);
    let recv_wc =
        |seq: u64, len: u32, status: u32| sys::ibv_wc { byte_len: len, ..wc_of(0x5c0, seq, status, sys::IBV_WC_RECV) };
    let r = scope(|s| {
        let mut rlane = s.recv_lane(&mut qp).expect("lane").ordered();
        let started = std::time::Instant::now();
        let e = rlane.wait_next(Duration::from_secs(5)).expect_err("nothing posted");
        assert!(matches!(&e, crate::Error::InvalidArgument { reason, .. } if reason.contains("handed out")), "{e:?}");
        assert!(started.elapsed() < Duration::from_secs(1), "it waited {:?}", started.elapsed());
        let mut p = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
        for _ in 0..5 {
            rlane.post(&mut p).expect("posted");
        }
        let ids = recvs(&shared);
        assert_eq!(ids.len(), 5);
        assert_eq!(rlane.outstanding(), 5);
        let e = rlane.wait_next(Duration::from_millis(20)).expect_err("nothing completed");
        assert!(matches!(e, crate::Error::Timeout { .. }), "{e:?}");
        fake.complete(recv_wc(ids[0], 10, sys::IBV_WC_SUCCESS));
        fake.complete(recv_wc(ids[1], 11, sys::IBV_WC_SUCCESS));
        assert_eq!(rlane.wait_next(Duration::from_secs(1)).expect("receive 0").byte_len(), 10);
        assert_eq!(rlane.wait_next(Duration::from_secs(1)).expect("receive 1").byte_len(), 11);
        // Receive 2 polled by another poller (kept for the lane).
        fake.complete(recv_wc(ids[2], 12, sys::IBV_WC_SUCCESS));
        cq.poll_and_route().unwrap();
        assert_eq!(fake.left(), 0);
        assert_eq!(rlane.wait_next(Duration::ZERO).expect("receive 2, kept").byte_len(), 12);
        // Receive 3 by the lane's own poll; receive 4 flushed.
        fake.complete(recv_wc(ids[3], 13, sys::IBV_WC_SUCCESS));
        fake.complete(recv_wc(ids[4], 0, sys::IBV_WC_WR_FLUSH_ERR));
        assert_eq!(rlane.wait_next(Duration::from_secs(1)).expect("receive 3").byte_len(), 13);
        let c = rlane.wait_next(Duration::from_secs(1)).expect("receive 4");
        assert_eq!(c.status(), crate::wc::WcStatus::WrFlushErr);
        assert_eq!(rlane.outstanding(), 0);
        let e = rlane.wait_next(Duration::from_secs(5)).expect_err("all handed out");
        assert!(matches!(e, crate::Error::InvalidArgument { .. }), "{e:?}");
        // Read once the last post completed.
        assert!(p.received().is_some());
    });
    assert!(r.is_ok(), "{r:?}");
}

/// An ordered receive lane whose oldest completion was dropped (another poller kept more of
/// the lane's completions than its queue is deep) says so once and moves on: the next
/// `wait_next` hands out the receive after it, rather than report the same loss for ever.
#[test]
fn an_ordered_receive_lane_moves_past_a_dropped_completion() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x5c8, 8, &cq);
    let r = scope(|s| {
        let mut rlane = s.recv_lane(&mut qp).expect("lane").ordered();
        let mut p = rlane.prepare(Recv::new(w.local_mut(0x1000, 64))).expect("prepared");
        // Nine receives complete, each polled by another poller: the lane keeps eight.
        for _ in 0..9 {
            rlane.post(&mut p).expect("posted");
            let seq = *recvs(&shared).last().unwrap();
            fake.complete(sys::ibv_wc { byte_len: 9, ..wc_of(0x5c8, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV) });
            cq.poll_and_route().unwrap();
        }
        let e = rlane.wait_next(Duration::ZERO).expect_err("receive 0 was dropped");
        assert!(matches!(&e, crate::Error::InvalidArgument { reason, .. } if reason.contains("dropped")), "{e:?}");
        for i in 1..9 {
            let c = rlane.wait_next(Duration::ZERO).unwrap_or_else(|e| panic!("receive {i}: {e:?}"));
            assert!(c.is_success());
        }
        assert!(rlane.wait_next(Duration::ZERO).is_err(), "all handed out");
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A CQ that other queues keep busy never comes back empty: a wait, and a scope's drain, still
/// end at their deadlines: the clock is read every `BUSY_CLOCK_EVERY` polls that found
/// completions too. (Read only after an empty poll, it would never be read here.)
#[test]
fn waits_and_drains_end_at_their_deadline_on_a_busy_cq() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, _shared) = w.rc_qp(0x5b0, 8, &cq);
    fake.busy.store(true, SeqCst);
    let started = std::time::Instant::now();
    let mut waited = Duration::ZERO;
    let r = scope_with_timeout(Duration::from_millis(100), |s| {
        let t = s.post_send(&qp, Write::new(w.local(0x1000, 8), remote())).expect("posted");
        let e = s.wait(t, Duration::from_millis(100)).expect_err("nothing completes it");
        assert!(matches!(e.error, crate::Error::Timeout { .. }), "{:?}", e.error);
        waited = started.elapsed();
    });
    let drained = started.elapsed();
    fake.busy.store(false, SeqCst);
    assert!(waited < Duration::from_secs(2), "the wait took {waited:?}");
    assert!(matches!(r, Err(crate::Error::QpBroken { .. })), "{r:?}");
    // The drain's 100 ms, then the flush's own bounded wait (5 s).
    assert!(drained < Duration::from_secs(8), "the drain took {drained:?}");
}

/// On a CQ that other queues keep busy, the forced flush of a QP whose only outstanding
/// request is an unsignaled tail ends at the tail's grace, not at the flush's own bound: the
/// polls that take other queues' completions count as empty for this QP.
#[test]
fn a_forced_flush_on_a_busy_cq_ends_at_the_tails_grace() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, _shared) = w.rc_qp(0x5b8, 8, &cq);
    fake.busy.store(true, SeqCst);
    let started = std::time::Instant::now();
    let r = scope(|s| {
        let t = s.post_send(&qp, Write::new(w.local(0x1000, 8), remote()).unsignaled()).expect("posted");
        drop(t);
    });
    let drained = started.elapsed();
    fake.busy.store(false, SeqCst);
    assert!(matches!(r, Err(crate::Error::QpBroken { .. })), "{r:?}");
    // The tail's grace is 200 ms; the flush's own bound, 5 s.
    assert!(drained < Duration::from_secs(2), "the drain took {drained:?}");
}

/// A spinning wait reads the clock only every `SPIN_CLOCK_EVERY` empty polls, the lanes' as
/// the scope's (a wait with no time left polls that many times before it knows); the check
/// for a busy CQ does not count empty polls.
#[test]
fn spinning_waits_read_the_clock_every_spin_clock_every_empty_polls() {
    use crate::scope::SPIN_CLOCK_EVERY;
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = w.rc_qp(0x5c0, 8, &cq);
    let (qp2, shared2) = w.rc_qp(0x5c1, 8, &cq);
    let mut counts = (0, 0, 0);
    let r = scope(|s| {
        let t = s.post_send(&qp2, Write::new(w.local(0x1000, 8), remote())).expect("posted");
        let before = fake.polls.load(SeqCst);
        let e = s.wait_spin(t, Duration::ZERO).expect_err("nothing completes it");
        assert!(matches!(e.error, crate::Error::Timeout { .. }), "{:?}", e.error);
        counts.0 = fake.polls.load(SeqCst) - before;
        fake.complete(wc_of(0x5c1, sends(&shared2)[0].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        assert!(s.wait(e.token, Duration::from_secs(1)).expect("completes").0.is_success());
        let (mut lane, mut rlane) = s.lanes(&mut qp).expect("lanes");
        let mut wr = lane.prepare(Write::new(w.local(0x2000, 8), remote())).expect("prepared");
        let tok = lane.post(&mut wr).expect("posted");
        let before = fake.polls.load(SeqCst);
        let e = lane.wait_spin(tok, Duration::ZERO).expect_err("nothing completes it");
        assert!(matches!(e.error, crate::Error::Timeout { .. }), "{:?}", e.error);
        counts.1 = fake.polls.load(SeqCst) - before;
        fake.complete(wc_of(0x5c0, sends(&shared)[0].0, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
        assert!(lane.wait(e.token, Duration::from_secs(1)).expect("completes").is_success());
        let mut rcv = rlane.prepare(Recv::new(w.local_mut(0x3000, 64))).expect("prepared");
        let rtok = rlane.post(&mut rcv).expect("posted");
        let before = fake.polls.load(SeqCst);
        let e = rlane.wait_spin(rtok, Duration::ZERO).expect_err("nothing completes it");
        assert!(matches!(e.error, crate::Error::Timeout { .. }), "{:?}", e.error);
        counts.2 = fake.polls.load(SeqCst) - before;
        let rseq = with_fake_qp(shared.as_ptr(), |f| f.recvs[0]);
        fake.complete(wc_of(0x5c0, rseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        assert!(rlane.wait(e.token, Duration::from_secs(1)).expect("completes").is_success());
    });
    assert!(r.is_ok(), "{r:?}");
    let spin = SPIN_CLOCK_EVERY as usize;
    assert!(counts.0 >= spin && counts.1 >= spin && counts.2 >= spin, "polls before the clock: {counts:?}");
}

/// A future's own poll serves its CQ in bounded batches and hands the rest to the channel's
/// next dispatch (`left_in`): 20 completions landed while it armed the CQ, so no event
/// announces them. Another future's waker (H's, whose executor is gone) panics when the serving
/// wakes it: the panic comes out of this poll only after the rest was handed on, so the next
/// dispatch serves G, which waits on the same CQ (it saw the CQ armed and did not arm it) with
/// its completion among those left.
#[test]
fn a_panicking_waker_in_a_futures_own_serving_strands_no_completion() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x6a1, 64, &cq, None);
    let mut tokens: Vec<_> = (0..21).map(|_| post_send(&qp, true)).collect();
    let f_token = tokens.pop().expect("request 20: never completes");
    let g = Arc::new(Mutex::new(Some(tokens.pop().expect("request 19: among the 4 left").into_future())));
    let h = Arc::new(Mutex::new(Some(tokens.remove(0).into_future())));
    let g_wakes = Arc::new(Count::default());
    g_waits_then_20_land_while_armed(fake, &g, &g_wakes, 0x6a1, Some(&h));
    let mut f = f_token.into_future();
    let fw = Waker::from(Arc::new(Count::default()));
    assert!(quiet(|| poll(&mut f, &fw)).is_err(), "H's waker panicked out of F's poll");
    assert_eq!(fake.left(), 4, "requests 16..=19 are still in the CQ, no event pending");
    // The executor drops the task that panicked; the channel's next dispatch serves the rest.
    drop(f);
    the_next_dispatch_serves_the_4_left_and_g(w, &g, &g_wakes);
    drop(tokens);
}

/// A shared receive queue's receive that QP B consumed, its completion still in B's CQ when
/// the program drops B and then that CQ (one connection of several sharing the SRQ torn down):
/// the CQ's drop takes the completion off first, so the receive completes in the SRQ's book and
/// its future resolves, instead of staying pending (and holding a slot of the SRQ) for ever.
#[test]
fn an_srq_receive_completed_on_a_cq_dropped_after_its_qp_completes() {
    let w = World::new();
    let (cq_a, _fake_a) = w.cq();
    let (cq_b, fake_b) = w.droppable_cq();
    let srq = w.srq(4);
    let _qp_a = w.qp(0x6b1, 4, &cq_a, Some(Arc::clone(&srq)));
    let qp_b = w.posting_qp(0x6b2, 4, &cq_b, Some(Arc::clone(&srq)));
    let (seq, token) = post_srq_recv(&srq);
    fake_b.complete(recv_wc(0x6b2, seq, sys::IBV_WC_SUCCESS));
    drop(qp_b);
    drop(cq_b);
    assert_eq!(srq.cqs().len(), 1, "the SRQ completes on cq_a only now");
    assert!(!srq.rq.is_pending(seq), "complete in the SRQ's book; outstanding {}", srq.rq.outstanding());
    let mut f = token.into_future();
    let waker = Waker::from(Arc::new(Count::default()));
    match poll(&mut f, &waker) {
        Poll::Ready(Ok((c, _buf))) => assert!(c.is_success(), "{c:?}"),
        other => panic!("the receive's future resolves at once: {other:?}"),
    }
}

/// Async waits and tokio runtimes (`tokio` feature): a wait is served by the runtime whose task
/// polls it, whatever the runtime that polled it first does (idle, shut down).
#[cfg(feature = "tokio")]
mod runtimes {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::task::Context as TaskContext;

    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    fn multi_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    }

    /// Whether `f` is set within `d`.
    fn set_within(f: &AtomicBool, d: Duration) -> bool {
        let t = std::time::Instant::now();
        while t.elapsed() < d && !f.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        f.load(SeqCst)
    }

    /// An owned token's future first polled (waiting) on runtime A, which then idles, alive,
    /// and awaited on runtime B: B's driver serves it.
    #[test]
    fn a_future_moved_from_an_idle_runtime_to_another_is_served() {
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0x6d1, 64, &cq, None);
        let mut f = post_send(&qp, true).into_future();
        let a = current_thread();
        a.block_on(async {
            let waker = Waker::from(Arc::new(Count::default()));
            assert!(poll(&mut f, &waker).is_pending());
        });
        let b = multi_thread();
        let done = Arc::new(AtomicBool::new(false));
        let d = Arc::clone(&done);
        b.spawn(async move {
            assert!(f.await.is_ok());
            d.store(true, SeqCst);
        });
        std::thread::sleep(Duration::from_millis(100));
        fake.complete(send_wc(0x6d1, 0, sys::IBV_WC_SUCCESS));
        assert!(set_within(&done, Duration::from_secs(3)), "the moved future was never served");
        drop(a);
    }

    /// Runtime A shut down while its driver and a future of it wait: a future of runtime B on
    /// the same CQ is still served.
    #[test]
    fn a_runtime_shut_down_under_its_driver_leaves_another_runtimes_futures_served() {
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0x6d2, 64, &cq, None);
        let fa = post_send(&qp, true).into_future();
        let fb = post_send(&qp, true).into_future();
        let a = multi_thread();
        let b = current_thread();
        a.spawn(async move {
            let _ = fa.await;
        });
        std::thread::sleep(Duration::from_millis(100));
        let done = Arc::new(AtomicBool::new(false));
        let d = Arc::clone(&done);
        let th = std::thread::spawn(move || {
            b.block_on(async move {
                assert!(fb.await.is_ok());
                d.store(true, SeqCst);
            })
        });
        std::thread::sleep(Duration::from_millis(100));
        a.shutdown_timeout(Duration::from_secs(1));
        fake.complete(send_wc(0x6d2, 1, sys::IBV_WC_SUCCESS));
        assert!(set_within(&done, Duration::from_secs(3)), "B's future not served after A shut down");
        th.join().unwrap();
    }

    /// `CompChannel::wait_async` first polled on runtime A (then idle), finished on runtime B:
    /// registered again with B's reactor, it sees the armed CQ's event.
    #[test]
    fn a_channel_wait_moved_to_another_runtime_sees_the_event() {
        let w = World::new();
        let (cq, fake) = w.cq();
        let cq = crate::cq::Cq { inner: Arc::clone(&cq) };
        cq.req_notify(false).unwrap();
        let ch = w.ch.clone();
        let mut fut = Box::pin(async move { ch.wait_async().await.map(|_| ()) });
        let a = current_thread();
        a.block_on(async {
            let waker = Waker::from(Arc::new(Count::default()));
            assert!(fut.as_mut().poll(&mut TaskContext::from_waker(&waker)).is_pending());
        });
        fake.complete(send_wc(0x7ffe, 0, sys::IBV_WC_SUCCESS));
        let got = multi_thread().block_on(async { tokio::time::timeout(Duration::from_secs(2), fut).await });
        assert!(matches!(got, Ok(Ok(()))), "the wait moved to B: {got:?}");
        drop(a);
    }

    /// `AsyncEvents` first polled on runtime A (then idle), awaited on runtime B: registered
    /// again with B's reactor, it gets the pending event.
    #[test]
    fn async_events_moved_to_another_runtime_get_the_event() {
        let (w, wfd) = world_with_events();
        let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
        let mut events = ctx.async_events().unwrap();
        let a = current_thread();
        a.block_on(async {
            let waker = Waker::from(Arc::new(Count::default()));
            assert!(events.poll_next_event(&mut TaskContext::from_waker(&waker)).is_pending());
        });
        // One PORT_ACTIVE event of port 1.
        inject_event(wfd, 1, sys::IBV_EVENT_PORT_ACTIVE);
        let got = multi_thread().block_on(async { tokio::time::timeout(Duration::from_secs(2), events.next()).await });
        assert!(matches!(got, Ok(Ok(crate::event::AsyncEvent::PortActive { port: 1 }))), "{got:?}");
        drop(a);
    }
}

/// A fake world whose context's `async_fd` is a new non-blocking pipe; returns the write end,
/// where [`inject_event`] writes the events `ibv_get_async_event` reads.
fn world_with_events() -> (&'static World, i32) {
    let w = World::new();
    let mut fds = [0i32; 2];
    // SAFETY: a valid out-array of two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) }, 0);
    // SAFETY: the fake context is leaked, and this test's alone.
    unsafe { (*w.ctx.ctx.as_ptr()).async_fd = fds[0] };
    (w, fds[1])
}

/// Writes one event (`struct ib_uverbs_async_event_desc`: element, event type, reserved) to
/// the write end `wfd` of [`world_with_events`]'s pipe.
fn inject_event(wfd: i32, element: u64, event_type: u32) {
    assert!(try_inject_event(wfd, element, event_type), "the event written");
}

/// [`inject_event`], or false when the pipe is full (non-blocking).
fn try_inject_event(wfd: i32, element: u64, event_type: u32) -> bool {
    let mut desc = [0u8; 16];
    desc[..8].copy_from_slice(&element.to_ne_bytes());
    desc[8..12].copy_from_slice(&event_type.to_ne_bytes());
    // SAFETY: writes the 16 bytes of `desc` to the pipe's open write end.
    unsafe { libc::write(wfd, desc.as_ptr().cast(), 16) == 16 }
}

// Hostile providers and programs against the completion side.
mod attack_tests;
// Hostile programs against the scope's drain, post lists and the requests' checks.
mod scope_attack_tests;
// Hostile wakers, executors and programs against the awaited completions.
mod async_attack_tests;
// Hostile programs against the asynchronous events.
mod event_attack_tests;
// Hostile sequences against the lanes: waits after failed polls, random mixes of posts,
// refusals and waits (the queue's depth, forced signals), the ordered receive lane.
mod lane_attack_tests;
// Attacks on the token waits (their polls of the CQ and reads of the book, the awaited token's
// inline first poll) and the receive books' pop of a front slot taken.
mod tokwait_attack_tests;
// A randomized model of a QP's books and of the release rule (stale and duplicate completions,
// resets), an SRQ's receives through two CQs, hostile wakers and buffers, threads.
mod model_attack_tests;
// Lanes and the scope's drain under hostile closures (panics, early returns, forgotten lanes,
// drops that panic), other pollers, nested scopes, CQ errors and made-up lane completions.
mod lane_drain_attack_tests;
// Hostile sequences against memory windows: binds and invalidations whose completions fail,
// tokens dropped or forgotten, SEND_WITH_INV and LOCAL_INV of one binding, rkey wraparound,
// regions and windows of other PDs, threads (the fake provider's window verbs are there).
mod mw_attack_tests;
// UD address handles (other PDs, lifetimes against requests in flight), shared receive queues
// (other PDs, receives of their QPs, ODP transports racing attaches) and ODP checks on UD.
mod ud_srq_odp_attack_tests;
// Cancellation of awaited completions on tokio: futures dropped after every poll count,
// timeouts at every await point, runtimes ended under waiting futures, blocking wakers, a
// channel dropped under its drivers, event readers cancelled.
#[cfg(feature = "tokio")]
mod async_cancel_attack_tests;
// Post lists and provider refusals: scope lists refused at every index and every way, lists
// longer than the queue, later requests failing their checks, forced signals across lists, a
// random model; lane lists; scope, owned, lane and SRQ receives refused every way.
mod list_attack_tests;
// A send lane's signaled flag around refused posts, the bounded completions of lane books
// (depth 1 and 2, made-up numbers at the ends of the lane range), SEND_WITH_INV builds polling
// a receive CQ shared with other QPs' lanes and tokens, owned tokens given up while another
// thread completes them, implied successes on a CQ of two QPs.
mod lane_book_attack_tests;
// A send lane's own success found by its number alone, around post lists refused every way,
// made-up completions of awaited, refused and unposted numbers, and lanes reopened after a
// drain's forced reset.
mod lane_numbering_attack_tests;
// Values from the provider, the device and the network taken as untrusted: QP numbers handed
// out at creation, `ibv_poll_cq` return values outside the contract, completions with unknown
// statuses, opcodes and flags, async events of unknown types or objects.
mod provider_values_attack_tests;
// Scatter/gather lists (entry counts, empty entries, lengths past u32::MAX, ODP entries among
// pinned ones, inline pieces), RAW_PACKET TSO and checksum requests, and ODP prefetch ranges and
// advices, against a provider that records what it is given.
mod xrc_sgl_odp_attack_tests;
// Completions routed by QP number around a refused registration, the fake device's typed
// verbs, empty ODP entries, write prefetches and an SRQ's ODP transports across its life.
mod change_attack_tests;
// The connection manager's parameters against the man pages (what the CM tells the peer about
// the program's QP, what a request's event says about the peer), completion channels and
// asynchronous event readers dropped, raced and polled every way.
mod cm_channel_attack_tests;
// Memory the caller owns moved into a region (`Pd::register`) and carried by owned tokens: the
// buffer is asked for its memory once, handed back as registered, travels with its `Mr` through
// swaps, is never dropped while a request or a failed deregistration may still reach it, and a
// drop of its that panics inside a poll leaves the books consistent.
mod memory_attack_tests;
// Memory windows whose bind failed after it may have run (the window the device may still
// hold bound is deallocated, and a new one handed back), and the tokio driver of a channel
// whose descriptor reports only an error (it serves what was handed on to it, then waits).
mod own_change_attack_tests;
// Objects that meet: QP creation with CQs and SRQs, sends and receives over memory of every
// kind, address handles, windows of both types and their invalidations, lanes, completions
// and capabilities, each of another PD or device context than what it is combined with.
mod meet_attack_tests;
// Extreme values a program can pass: lengths, offsets and ranges at 0 and at the integer
// limits, remote ranges reaching 2^64, timeouts of zero and `Duration::MAX`, queue depths,
// ports and GID indices outside the device's, inline payloads adding up past `usize::MAX`.
mod panic_sweep_tests;
