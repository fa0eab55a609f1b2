//! Races of the awaited completions that a real device cannot be made to produce on demand,
//! run deterministically over a fake device (test only) under the real `CqShared`,
//! `ChannelShared`, `QpShared`, `SrqShared` and `OwnedCompletion` code: a completion that
//! lands between a future's poll and its arming, a QP attached to a shared receive queue at
//! the instant a future registers its waker, and wakers that panic inside a dispatch or a
//! future's own poll.
//!
//! The fake: an `ibv_context` whose `ops.poll_cq` / `ops.req_notify_cq` are this module's
//! functions (what `CqShared` calls, as it calls a provider's), a completion channel whose
//! descriptor is a pipe the fake writes `ib_uverbs_comp_event_desc`s into (what the real
//! `ibv_get_cq_event` reads), and an arming that, as the verbs say, makes only the next
//! completion added after it produce one event. Nothing here is ever dropped that would call
//! a destroy verb on a fake object (leaked on purpose).
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context as Cx, Poll, RawWaker, RawWakerVTable, Wake, Waker};

use typed_verbs_sys as sys;

use crate::channel::CompChannel;
use crate::cq::CqShared;
use crate::device::ContextInner;
use crate::owned::{OwnedCompletion, OwnedToken};
use crate::pd::PdInner;
use crate::qp::{QpShared, QueueArc};
use crate::queue::RECV_BIT;
use crate::srq::SrqShared;

type Hook = Box<dyn FnOnce() + Send>;

/// The device's side of one CQ.
pub(crate) struct FakeCq {
    entries: Mutex<VecDeque<sys::ibv_wc>>,
    /// Armed at the device: the next completion added produces one event.
    armed: AtomicBool,
    arms: AtomicUsize,
    event_fd: i32,
    raw: *mut sys::ibv_cq,
    /// Runs inside the next `ibv_req_notify_cq`, before the arming takes effect: what happens
    /// meanwhile on other threads / on the wire.
    on_arm: Mutex<Option<Hook>>,
}

// SAFETY: `raw` is the address of a leaked `ibv_cq`, only written into the event descriptor;
// every other field is `Send + Sync`.
unsafe impl Send for FakeCq {}
// SAFETY: as above.
unsafe impl Sync for FakeCq {}

impl FakeCq {
    /// The device adds a completion.
    pub(crate) fn complete(&self, wc: sys::ibv_wc) {
        self.entries.lock().unwrap().push_back(wc);
        if self.armed.swap(false, SeqCst) {
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
    let mut e = f.entries.lock().unwrap();
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
unsafe extern "C" fn fake_arm(cq: *mut sys::ibv_cq, _solicited: i32) -> i32 {
    // SAFETY: per this function's contract.
    let f = unsafe { &*((*cq).cq_context as *const FakeCq) };
    let hook = f.on_arm.lock().unwrap().take();
    if let Some(h) = hook {
        h();
    }
    f.arms.fetch_add(1, SeqCst);
    f.armed.store(true, SeqCst);
    0
}

/// Every private operation of the fake context (`ibv_get_cq_event` calls `cq_event`).
extern "C" fn noop() {}

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
        // SAFETY: zeroed C structs (all-zero is a valid value of each: pointers null, a zeroed
        // pthread mutex and condition are their static initialisers), leaked for the test;
        // `pipe2` with a valid out-array.
        unsafe {
            let vctx: &'static mut sys::verbs_context = Box::leak(Box::new(std::mem::zeroed()));
            // `get_ops(ctx)` (what the real `ibv_get_cq_event` calls `cq_event` through) is the
            // private ops behind `priv`: every word a no-op function, wherever `cq_event` is.
            let ops: &'static mut [usize; 8192] = Box::leak(Box::new([noop as extern "C" fn() as usize; 8192]));
            vctx.priv_ = (ops as *mut [usize; 8192]).cast();
            vctx.context.ops.poll_cq = Some(fake_poll);
            vctx.context.ops.req_notify_cq = Some(fake_arm);
            let ctxp: *mut sys::ibv_context = &mut vctx.context;
            let mut fds = [0i32; 2];
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC), 0);
            let chp: *mut sys::ibv_comp_channel =
                Box::leak(Box::new(sys::ibv_comp_channel { context: ctxp, fd: fds[0], refcnt: 0 }));
            let ctx = Arc::new(ContextInner {
                ctx: NonNull::new(ctxp).unwrap(),
                name: "fake0".into(),
                tag: u16::MAX,
                id: 0,
                cqs: Mutex::new(Vec::new()),
                attr: crate::device::DeviceAttr::fake(0, atomics),
            });
            std::mem::forget(Arc::clone(&ctx));
            let pd = Arc::new(PdInner { pd: NonNull::dangling(), ctx: Arc::clone(&ctx) });
            std::mem::forget(Arc::clone(&pd));
            let ch = CompChannel::fake(NonNull::new(chp).unwrap(), fds[0], Arc::clone(&ctx));
            std::mem::forget(ch.clone());
            Box::leak(Box::new(World { ctxp, chp, write_fd: fds[1], ctx, pd, ch }))
        }
    }

    /// A CQ reporting to the channel.
    pub(crate) fn cq(&'static self) -> (Arc<CqShared>, &'static FakeCq) {
        // SAFETY: a zeroed `ibv_cq` (a valid value), leaked, pointing at the fake context and
        // channel and at its `FakeCq`, also leaked: `CqShared` calls the fake provider with it.
        unsafe {
            let raw: &'static mut sys::ibv_cq = Box::leak(Box::new(std::mem::zeroed()));
            raw.context = self.ctxp;
            raw.channel = self.chp;
            let fake: &'static FakeCq = Box::leak(Box::new(FakeCq {
                entries: Mutex::new(VecDeque::new()),
                armed: AtomicBool::new(false),
                arms: AtomicUsize::new(0),
                event_fd: self.write_fd,
                raw,
                on_arm: Mutex::new(None),
            }));
            raw.cq_context = (fake as *const FakeCq).cast_mut().cast();
            let cq = CqShared::fake(
                NonNull::from(&mut *raw),
                Arc::clone(&self.ctx),
                Some(Arc::clone(self.ch.shared())),
                1 << 20,
            );
            std::mem::forget(Arc::clone(&cq));
            self.ch.attach_fake(&cq);
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
        // SAFETY: all-zero is a valid `ibv_qp` (pointers null); leaked, never destroyed.
        let raw: &'static mut sys::ibv_qp = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
        raw.qp_num = qp_num;
        let qp = QpShared::fake(NonNull::from(raw), qp_num, depth, cq, Arc::clone(&self.pd), srq);
        std::mem::forget(Arc::clone(&qp));
        qp
    }

    pub(crate) fn srq(&'static self, max_wr: u32) -> Arc<SrqShared> {
        // SAFETY: all-zero is a valid `ibv_srq`; leaked, never destroyed.
        let raw: &'static mut sys::ibv_srq = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
        let s = SrqShared::fake(NonNull::from(raw), max_wr, Arc::clone(&self.pd));
        std::mem::forget(Arc::clone(&s));
        s
    }
}

pub(crate) fn send_wc(qp_num: u32, seq: u64, status: u32) -> sys::ibv_wc {
    sys::ibv_wc { wr_id: seq, status, opcode: sys::IBV_WC_SEND, qp_num, ..Default::default() }
}

pub(crate) fn recv_wc(qp_num: u32, seq: u64, status: u32) -> sys::ibv_wc {
    sys::ibv_wc { wr_id: seq | RECV_BIT, status, opcode: sys::IBV_WC_RECV, qp_num, byte_len: 8, ..Default::default() }
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
unsafe fn h_wake(p: *const ()) {
    // SAFETY: see above; `wake` consumes the waker's count.
    let a = unsafe { Arc::from_raw(p.cast::<Hooked>()) };
    a.count.fetch_add(1, SeqCst);
}
unsafe fn h_wake_by_ref(p: *const ()) {
    // SAFETY: see above; borrowed while the waker lives.
    unsafe { (*p.cast::<Hooked>()).count.fetch_add(1, SeqCst) };
}
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

/// A waker that panics inside `CompChannel::dispatch` (future H's) comes out of it only once
/// its work is done: the CQ is re-armed, so another future G on it, whose completion arrives
/// afterwards, is woken by the next dispatch. (Before, the panic left the CQ unarmed and out
/// of the channel's list: G was never woken.)
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
/// took effect: no event).
fn g_waits_then_20_land_while_armed(
    fake: &'static FakeCq,
    g: &Arc<Mutex<Option<OwnedCompletion<()>>>>,
    g_wakes: &Arc<Count>,
    qp_num: u32,
) {
    let (g, g_wakes) = (Arc::clone(g), Arc::clone(g_wakes));
    *fake.on_arm.lock().unwrap() = Some(Box::new(move || {
        std::thread::spawn(move || {
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
/// on the same CQ (it saw F's arming and did not arm), is woken by it. (Before, G waited until
/// an unrelated completion fired the arming.)
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
    g_waits_then_20_land_while_armed(fake, &g, &g_wakes, 0x13);
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
/// wakes the future. (Before, the future waited on the old CQs only.)
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
/// poll. F keeps what it took: polled again, it resolves with the device's status. (Before,
/// the completion was lost with the unwinding stack, and the request, counted complete, read
/// as a success implied by a later one.)
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
/// goes to the next dispatch. (Before, it waited for an unrelated completion.)
#[test]
fn a_future_dropped_with_completions_left_does_not_strand_them() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x14, 64, &cq, None);
    let mut tokens: Vec<_> = (0..20).map(|_| post_send(&qp, true)).collect();
    let mut f = tokens.pop().unwrap().into_future(); // request 19
    let g = Arc::new(Mutex::new(Some(tokens.pop().unwrap().into_future()))); // request 18
    let g_wakes = Arc::new(Count::default());
    g_waits_then_20_land_while_armed(fake, &g, &g_wakes, 0x14);
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
