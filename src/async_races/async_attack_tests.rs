//! Independent attacks on awaited completions (owned futures, channels, dispatch, wakers),
//! over the fake device of `async_races`. Every buffer here is a `Guard`: it records a
//! violation if it is dropped, or handed back, before the fake device produced its request's
//! completion (device truth, not the library's book).

use super::*;
use crate::scope::{sealed, Completes};
use crate::wc::Completion;

static VIOLATIONS: AtomicUsize = AtomicUsize::new(0);

/// A buffer whose drop or hand-back before the device finished is a violation.
struct Guard {
    device_done: Arc<AtomicBool>,
    drops: Arc<AtomicUsize>,
    what: &'static str,
}
impl Drop for Guard {
    fn drop(&mut self) {
        if !self.device_done.load(SeqCst) {
            eprintln!("VIOLATION: buffer {} dropped before the device finished", self.what);
            VIOLATIONS.fetch_add(1, SeqCst);
        }
        self.drops.fetch_add(1, SeqCst);
    }
}
impl sealed::Sealed for Guard {}
impl Completes for Guard {
    type Output = Guard;
    fn complete(self, _: &Completion, _: sealed::Internal) -> Guard {
        if !self.device_done.load(SeqCst) {
            eprintln!("VIOLATION: buffer {} handed back before the device finished", self.what);
            VIOLATIONS.fetch_add(1, SeqCst);
        }
        self
    }
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        Some(Box::new(self))
    }
}

struct Req {
    done: Arc<AtomicBool>,
    drops: Arc<AtomicUsize>,
    seq: u64,
}

fn guarded_send(qp: &Arc<QpShared>, signaled: bool, what: &'static str) -> (OwnedToken<Guard>, Req) {
    let seq = qp.sq.lock().push(signaled);
    let done = Arc::new(AtomicBool::new(false));
    let drops = Arc::new(AtomicUsize::new(0));
    let g = Guard { device_done: Arc::clone(&done), drops: Arc::clone(&drops), what };
    (OwnedToken::new(QueueArc::Send(Arc::clone(qp)), seq, g, None), Req { done, drops, seq })
}

fn guarded_recv(qp: &Arc<QpShared>, what: &'static str) -> (OwnedToken<Guard>, Req) {
    let seq = qp.rq.lock().push(true);
    let done = Arc::new(AtomicBool::new(false));
    let drops = Arc::new(AtomicUsize::new(0));
    let g = Guard { device_done: Arc::clone(&done), drops: Arc::clone(&drops), what };
    (OwnedToken::new(QueueArc::Recv(Arc::clone(qp)), seq, g, None), Req { done, drops, seq })
}

/// The device completes a send request (marks it done first: the device is done before it
/// writes the completion).
fn dev_send(fake: &FakeCq, qp_num: u32, r: &Req, status: u32) {
    r.done.store(true, SeqCst);
    fake.complete(send_wc(qp_num, r.seq, status));
}
fn dev_recv(fake: &FakeCq, qp_num: u32, r: &Req, status: u32) {
    r.done.store(true, SeqCst);
    fake.complete(recv_wc(qp_num, r.seq, status));
}

type GOut = <OwnedCompletion<Guard> as Future>::Output;
fn gpoll(f: &mut OwnedCompletion<Guard>, w: &Waker) -> Poll<GOut> {
    Pin::new(f).poll(&mut Cx::from_waker(w))
}

fn violations() -> usize {
    VIOLATIONS.load(SeqCst)
}

/// A waker built from a closure.
struct FnWake(Box<dyn Fn() + Send + Sync>);
impl Wake for FnWake {
    fn wake(self: Arc<Self>) {
        (self.0)();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        (self.0)();
    }
}
fn fn_waker(f: impl Fn() + Send + Sync + 'static) -> Waker {
    Waker::from(Arc::new(FnWake(Box::new(f))))
}

/// Waker swap: polled with A, then B, then A again (not `will_wake`), then B: only the last
/// registered is woken, once, and the future resolves once.
#[test]
fn waker_swap_wakes_only_the_latest_once() {
    let before = violations();
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xb01, 16, &cq, None);
    let (t, r) = guarded_send(&qp, true, "swap");
    let mut f = t.into_future();
    let (ca, cb) = (Arc::new(Count::default()), Arc::new(Count::default()));
    let (wa, wb) = (Waker::from(Arc::clone(&ca)), Waker::from(Arc::clone(&cb)));
    assert!(gpoll(&mut f, &wa).is_pending());
    assert!(gpoll(&mut f, &wb).is_pending());
    assert!(gpoll(&mut f, &wa).is_pending());
    assert!(gpoll(&mut f, &wb).is_pending());
    dev_send(fake, 0xb01, &r, sys::IBV_WC_SUCCESS);
    w.ch.dispatch().unwrap();
    assert_eq!((ca.get(), cb.get()), (0, 1));
    match gpoll(&mut f, &wa) {
        Poll::Ready(Ok((c, g))) => {
            assert!(c.is_success());
            drop(g);
        }
        other => panic!("{:?}", other.is_ready()),
    }
    assert!(quiet(|| gpoll(&mut f, &wa)).is_err(), "polled after it resolved panics");
    drop(f);
    assert_eq!(r.drops.load(SeqCst), 1);
    no_waiter_and_no_violation(&cq, before);
}

/// Wakers run by a dispatch drop their own future (done) and another future H still waiting
/// on the same CQ (its request not done): H's buffer must be parked until the device
/// finishes; a later completion releases it.
#[test]
fn a_waker_drops_its_own_future_and_a_pending_neighbour() {
    let before = violations();
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xb02, 16, &cq, None);
    let qp2 = w.qp(0xb12, 16, &cq, None);
    let (tf, rf) = guarded_send(&qp, true, "F");
    let (th, rh) = guarded_recv(&qp2, "H");
    let slot_f: Arc<Mutex<Option<OwnedCompletion<Guard>>>> = Arc::new(Mutex::new(Some(tf.into_future())));
    let slot_h: Arc<Mutex<Option<OwnedCompletion<Guard>>>> = Arc::new(Mutex::new(Some(th.into_future())));
    let (sf, sh) = (Arc::clone(&slot_f), Arc::clone(&slot_h));
    let wf = fn_waker(move || {
        drop(sf.lock().unwrap().take());
        drop(sh.lock().unwrap().take());
    });
    let hw = Waker::from(Arc::new(Count::default()));
    assert!(gpoll(slot_f.lock().unwrap().as_mut().unwrap(), &wf).is_pending());
    assert!(gpoll(slot_h.lock().unwrap().as_mut().unwrap(), &hw).is_pending());
    dev_send(fake, 0xb02, &rf, sys::IBV_WC_SUCCESS);
    w.ch.dispatch().unwrap();
    assert!(slot_f.lock().unwrap().is_none() && slot_h.lock().unwrap().is_none());
    assert_eq!(rf.drops.load(SeqCst), 1);
    assert_eq!(rh.drops.load(SeqCst), 0, "H parked");
    assert_eq!(qp2.rq.parked(), 1);
    assert_eq!(cq.waiters.load(SeqCst), 0, "no waiter left");
    dev_recv(fake, 0xb12, &rh, sys::IBV_WC_SUCCESS);
    w.ch.dispatch().unwrap();
    // Nobody waits: the CQ was not re-armed, nothing is served by the event. Poll it.
    cq.poll_and_route().unwrap();
    assert_eq!(rh.drops.load(SeqCst), 1, "released by the poll");
    assert_eq!(violations(), before);
}

/// Wakers that re-enter the library from inside a dispatch: poll the CQ, post and await a new
/// request inline, drop a token of an outstanding request, reset the QP. Every buffer comes
/// back once and never before its completion (or the reset).
#[test]
fn wakers_reentering_the_library_from_dispatch() {
    let before = violations();
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xb03, 16, &cq, None);
    let (t0, r0) = guarded_send(&qp, true, "r0");
    let (t1, r1) = guarded_send(&qp, true, "r1");
    let (t2, r2) = guarded_send(&qp, true, "r2");
    let (t3, r3) = guarded_send(&qp, true, "r3");
    let f1: Arc<Mutex<Option<OwnedCompletion<Guard>>>> = Arc::new(Mutex::new(Some(t1.into_future())));
    let tok2: Arc<Mutex<Option<OwnedToken<Guard>>>> = Arc::new(Mutex::new(Some(t2)));
    let mut f0 = t0.into_future();
    let mut f3 = t3.into_future();
    let results: Arc<Mutex<Vec<&'static str>>> = Arc::new(Mutex::new(Vec::new()));
    // F0's waker: polls the CQ, drops token 2 (outstanding), polls F1 inline with its own
    // waker, then resets the QP.
    let (cq2, tok2b, f1b, qpb, res) =
        (Arc::clone(&cq), Arc::clone(&tok2), Arc::clone(&f1), Arc::clone(&qp), Arc::clone(&results));
    let reset_done = [Arc::clone(&r1.done), Arc::clone(&r2.done), Arc::clone(&r3.done)];
    let w0 = fn_waker(move || {
        let _ = cq2.poll_and_route();
        drop(tok2b.lock().unwrap().take());
        let inner = Waker::from(Arc::new(Count::default()));
        let mut g = f1b.lock().unwrap();
        if let Some(f) = g.as_mut() {
            if let Poll::Ready(r) = gpoll(f, &inner) {
                res.lock().unwrap().push(if r.is_ok() { "f1 ok" } else { "f1 err" });
                *g = None;
            }
        }
        drop(g);
        // The reset: from here on the device no longer touches anything of the QP (token 2's
        // buffer, dropped above, must not have come back before this).
        for d in &reset_done {
            d.store(true, SeqCst);
        }
        qpb.fake_after_reset();
    });
    let c3 = Arc::new(Count::default());
    assert!(gpoll(&mut f0, &w0).is_pending());
    assert!(gpoll(&mut f3, &Waker::from(Arc::clone(&c3))).is_pending());
    {
        let inner = Waker::from(Arc::new(Count::default()));
        assert!(gpoll(f1.lock().unwrap().as_mut().unwrap(), &inner).is_pending());
    }
    dev_send(fake, 0xb03, &r0, sys::IBV_WC_SUCCESS);
    w.ch.dispatch().unwrap();
    assert_eq!(c3.get(), 1, "F3 woken by the reset");
    let Poll::Ready(Ok((c, g))) = gpoll(&mut f0, &w0) else { panic!("f0") };
    assert!(c.is_success());
    drop(g);
    let Poll::Ready(Ok((c, g))) = gpoll(&mut f3, &w0) else { panic!("f3") };
    assert!(!c.is_success(), "flushed by the reset");
    drop(g);
    // F1 either resolved inline (the reset came after) or resolves now.
    if let Some(f) = f1.lock().unwrap().as_mut() {
        let Poll::Ready(Ok((_, g))) = gpoll(f, &w0) else { panic!("f1") };
        drop(g);
    }
    for r in [&r0, &r1, &r2, &r3] {
        assert_eq!(r.drops.load(SeqCst), 1, "request {} handed back or released once", r.seq);
    }
    no_waiter_and_no_violation(&cq, before);
}

/// No future is left waiting on `cq`, and no buffer came back early since `before`.
fn no_waiter_and_no_violation(cq: &CqShared, before: usize) {
    assert_eq!(cq.waiters.load(SeqCst), 0, "no future left waiting");
    assert_eq!(violations(), before, "no buffer back before the device finished");
}

/// B completes last: both buffers released once, no future left waiting, no violation.
fn b_completes_last(fake: &FakeCq, qp_num: u32, cq: &CqShared, ra: &Req, rb: &Req, before: usize) {
    dev_send(fake, qp_num, rb, sys::IBV_WC_SUCCESS);
    cq.poll_and_route().unwrap();
    assert_eq!((ra.drops.load(SeqCst), rb.drops.load(SeqCst)), (1, 1));
    no_waiter_and_no_violation(cq, before);
}

/// Two guarded sends, A and B, on a QP of a new CQ; B's future polled once (pending) and kept
/// where a waker can drop it.
struct TwoSends {
    cq: Arc<CqShared>,
    fake: &'static FakeCq,
    qp: Arc<QpShared>,
    ta: OwnedToken<Guard>,
    ra: Req,
    rb: Req,
    fb: Arc<Mutex<Option<OwnedCompletion<Guard>>>>,
}

fn two_sends(w: &'static World, qp_num: u32) -> TwoSends {
    let (cq, fake) = w.cq();
    let qp = w.qp(qp_num, 16, &cq, None);
    let (ta, ra) = guarded_send(&qp, true, "A");
    let (tb, rb) = guarded_send(&qp, true, "B");
    let fb = Arc::new(Mutex::new(Some(tb.into_future())));
    let bw = Waker::from(Arc::new(Count::default()));
    assert!(gpoll(fb.lock().unwrap().as_mut().unwrap(), &bw).is_pending());
    TwoSends { cq, fake, qp, ta, ra, rb, fb }
}

/// A waker whose clone (the one `register_waker` keeps) drops another waiting future of the
/// same queue and polls the CQ; and a waker whose clone panics. Both futures stay consistent.
#[test]
fn hostile_clone_drops_a_neighbour_and_polls_then_a_clone_that_panics() {
    let before = violations();
    let w = World::new();
    let TwoSends { cq, fake, qp: _qp, ta, ra, rb, fb } = two_sends(w, 0xb04);
    let mut fa = ta.into_future();
    let (fb2, cq2) = (Arc::clone(&fb), Arc::clone(&cq));
    let (aw, _) = hooked(Box::new(move || {
        drop(fb2.lock().unwrap().take());
        let _ = cq2.poll_and_route();
    }));
    assert!(gpoll(&mut fa, &aw).is_pending());
    assert!(fb.lock().unwrap().is_none());
    assert_eq!(rb.drops.load(SeqCst), 0, "B parked");
    // A clone that panics: the registration unwinds.
    static PC: RawWakerVTable = RawWakerVTable::new(|_| panic!("clone panics"), |_| {}, |_| {}, |_| {});
    // SAFETY: a vtable whose functions ignore the data pointer (null) and never free anything:
    // the contract of `RawWaker` holds for any pointer.
    let pw = unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &PC)) };
    assert!(quiet(|| gpoll(&mut fa, &pw)).is_err(), "the clone's panic comes out");
    dev_send(fake, 0xb04, &ra, sys::IBV_WC_SUCCESS);
    let d = w.ch.dispatch().unwrap();
    assert!(d.completions >= 1, "A's completion dispatched: {d:?}");
    match gpoll(&mut fa, &aw) {
        Poll::Ready(Ok((c, g))) => {
            assert!(c.is_success());
            drop(g);
        }
        Poll::Ready(Err(e)) => panic!("{}", e.error),
        Poll::Pending => panic!("A still pending after its completion was dispatched"),
    }
    assert_eq!(ra.drops.load(SeqCst), 1);
    dev_send(fake, 0xb04, &rb, sys::IBV_WC_SUCCESS);
    cq.poll_and_route().unwrap();
    assert_eq!(rb.drops.load(SeqCst), 1);
    no_waiter_and_no_violation(&cq, before);
}

/// A waker whose drop (when a new waker replaces it) polls the CQ and drops a neighbour; one
/// whose drop panics when replaced.
#[test]
fn hostile_waker_drop_on_replacement() {
    let before = violations();
    let w = World::new();
    let TwoSends { cq, fake, qp: _qp, ta, ra, rb, fb } = two_sends(w, 0xb05);
    struct DropDoes(Mutex<Option<Box<dyn FnOnce() + Send>>>);
    impl Wake for DropDoes {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for DropDoes {
        fn drop(&mut self) {
            if let Some(f) = self.0.lock().unwrap().take() {
                f();
            }
        }
    }
    let (fb2, cq2) = (Arc::clone(&fb), Arc::clone(&cq));
    let mut fa = ta.into_future();
    {
        let d = Waker::from(Arc::new(DropDoes(Mutex::new(Some(Box::new(move || {
            drop(fb2.lock().unwrap().take());
            let _ = cq2.poll_and_route();
        }))))));
        assert!(gpoll(&mut fa, &d).is_pending());
    }
    let c = Arc::new(Count::default());
    assert!(gpoll(&mut fa, &Waker::from(Arc::clone(&c))).is_pending());
    assert!(fb.lock().unwrap().is_none(), "the replaced waker's drop ran");
    {
        let p = Waker::from(Arc::new(DropDoes(Mutex::new(Some(Box::new(|| panic!("waker drop panics")))))));
        assert!(gpoll(&mut fa, &p).is_pending());
    }
    assert!(quiet(|| gpoll(&mut fa, &Waker::from(Arc::clone(&c)))).is_err(), "drop's panic comes out");
    dev_send(fake, 0xb05, &ra, sys::IBV_WC_SUCCESS);
    w.ch.dispatch().unwrap();
    assert_eq!(c.get(), 1, "the latest waker woken");
    let Poll::Ready(Ok((_, g))) = gpoll(&mut fa, &Waker::from(Arc::clone(&c))) else { panic!("A") };
    drop(g);
    b_completes_last(fake, 0xb05, &cq, &ra, &rb, before);
}

/// `set_await_polls` changed while a future is mid-polls; the future moved (boxed, swapped)
/// between polls; dropped mid-polls (parks).
#[test]
fn await_polls_changed_mid_flight_and_moved_futures() {
    let before = violations();
    let w = World::new();
    let (cq, fake) = w.cq();
    let handle = crate::cq::Cq { inner: Arc::clone(&cq) };
    let qp = w.qp(0xb06, 16, &cq, None);
    handle.set_await_polls(3);
    let (ta, ra) = guarded_send(&qp, true, "A");
    let (tb, rb) = guarded_send(&qp, true, "B");
    let c = Arc::new(Count::default());
    let wk = Waker::from(Arc::clone(&c));
    let mut fa = Box::new(ta.into_future());
    assert!(gpoll(&mut fa, &wk).is_pending());
    handle.set_await_polls(0);
    // Moved out of its box to the stack and back.
    let mut fa_moved = *fa;
    assert!(gpoll(&mut fa_moved, &wk).is_pending());
    handle.set_await_polls(u32::MAX);
    let mut fb = tb.into_future();
    assert!(gpoll(&mut fb, &wk).is_pending());
    drop(fb); // mid-polls: parks
    assert_eq!(rb.drops.load(SeqCst), 0);
    let mut fa = Box::new(fa_moved);
    for _ in 0..5 {
        let _ = gpoll(&mut fa, &wk);
    }
    dev_send(fake, 0xb06, &ra, sys::IBV_WC_SUCCESS);
    let mut got = None;
    for _ in 0..5 {
        w.ch.dispatch().unwrap();
        if let Poll::Ready(r) = gpoll(&mut fa, &wk) {
            got = Some(r);
            break;
        }
    }
    let Some(Ok((_, g))) = got else { panic!("A resolves") };
    drop(g);
    b_completes_last(fake, 0xb06, &cq, &ra, &rb, before);
}

/// Many QPs share one CQ, futures on all of them (send and receive), polled alternately from
/// two threads (each future behind a mutex), one thread dispatching, one polling the CQ, the
/// device completing in a random order, futures dropped at random. Every future resolves once
/// with its own request, and no buffer comes back before the device finished.
#[test]
fn shared_cq_many_qps_two_polling_threads_dispatch_and_progress() {
    let before = violations();
    let w = World::new();
    let (cq, fake) = w.cq();
    const QPS: u32 = 6;
    const PER: usize = 8;
    let qps: Vec<_> = (0..QPS).map(|i| w.qp(0xc00 + i, 64, &cq, None)).collect();
    for round in 0..30u64 {
        struct Slot {
            f: Mutex<Option<OwnedCompletion<Guard>>>,
            r: Req,
            qp_num: u32,
            recv: bool,
            resolved: AtomicUsize,
            dropped: AtomicBool,
        }
        let mut slots = Vec::new();
        for (i, qp) in qps.iter().enumerate() {
            for k in 0..PER {
                let recv = k % 2 == 1;
                let (t, r) = if recv { guarded_recv(qp, "recv") } else { guarded_send(qp, true, "send") };
                slots.push(Arc::new(Slot {
                    f: Mutex::new(Some(t.into_future())),
                    r,
                    qp_num: 0xc00 + i as u32,
                    recv,
                    resolved: AtomicUsize::new(0),
                    dropped: AtomicBool::new(false),
                }));
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let woken = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for t in 0..2u64 {
            let (slots, stop, woken) = (slots.clone(), Arc::clone(&stop), Arc::clone(&woken));
            threads.push(std::thread::spawn(move || {
                let mut x = round * 7 + t + 1;
                while !stop.load(SeqCst) {
                    for (i, s) in slots.iter().enumerate() {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let mut g = s.f.lock().unwrap();
                        let Some(f) = g.as_mut() else { continue };
                        if (x >> 33) % 97 == 0 && i % 5 == 0 {
                            *g = None;
                            s.dropped.store(true, SeqCst);
                            continue;
                        }
                        let wo = Arc::clone(&woken);
                        let wk = fn_waker(move || {
                            wo.fetch_add(1, SeqCst);
                        });
                        if let Poll::Ready(r) = gpoll(f, &wk) {
                            match r {
                                Ok((c, g2)) => {
                                    assert_eq!(c.qp_num(), s.qp_num, "its own QP's completion");
                                    drop(g2);
                                }
                                Err(e) => panic!("{}", e.error),
                            }
                            s.resolved.fetch_add(1, SeqCst);
                            *g = None;
                        }
                    }
                    std::thread::yield_now();
                }
            }));
        }
        {
            let stop = Arc::clone(&stop);
            let ch = w.ch.clone();
            threads.push(std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    let _ = ch.dispatch();
                    std::thread::yield_now();
                }
            }));
        }
        {
            let stop = Arc::clone(&stop);
            let cq = Arc::clone(&cq);
            threads.push(std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    let _ = cq.poll_and_route();
                    std::thread::yield_now();
                }
            }));
        }
        // Device: receives in a random order, sends in order per QP.
        let mut order: Vec<usize> = (0..slots.len()).collect();
        let mut x = round + 99;
        for i in (1..order.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (x >> 33) as usize % (i + 1));
        }
        // Sends of each QP in order: complete the send of the smallest seq first.
        let mut sends_by_qp: std::collections::HashMap<u32, Vec<usize>> = Default::default();
        for (i, s) in slots.iter().enumerate() {
            if !s.recv {
                sends_by_qp.entry(s.qp_num).or_default().push(i);
            }
        }
        for v in sends_by_qp.values_mut() {
            v.reverse();
        }
        for i in order {
            let s = &slots[i];
            if s.recv {
                dev_recv(fake, s.qp_num, &s.r, sys::IBV_WC_SUCCESS);
            } else {
                let j = sends_by_qp.get_mut(&s.qp_num).unwrap().pop().unwrap();
                let sj = &slots[j];
                dev_send(fake, sj.qp_num, &sj.r, sys::IBV_WC_SUCCESS);
            }
            if x % 3 == 0 {
                std::thread::yield_now();
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while slots.iter().any(|s| s.f.lock().unwrap().is_some()) {
            if std::time::Instant::now() > deadline {
                let left: Vec<_> = slots
                    .iter()
                    .filter(|s| s.f.lock().unwrap().is_some())
                    .map(|s| (s.qp_num, s.recv, s.r.seq))
                    .collect();
                stop.store(true, SeqCst);
                panic!("round {round}: futures never resolved although every completion landed: {left:x?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, SeqCst);
        for t in threads {
            t.join().unwrap();
        }
        cq.poll_and_route().unwrap();
        for s in &slots {
            let expect = usize::from(!s.dropped.load(SeqCst));
            assert_eq!(s.resolved.load(SeqCst), expect, "resolved once");
            assert_eq!(s.r.drops.load(SeqCst), 1, "buffer released once");
        }
        assert_eq!(cq.waiters.load(SeqCst), 0, "round {round}");
    }
    assert_eq!(violations(), before);
}

/// A parked buffer whose drop is slow (a large unmap): runs `f` when dropped.
struct Stall(Option<Box<dyn FnOnce() + Send>>);
impl Drop for Stall {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}
impl sealed::Sealed for Stall {}
impl Completes for Stall {
    type Output = ();
    fn complete(self, _: &Completion, _: sealed::Internal) {}
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        Some(Box::new(self))
    }
}

struct OnExit(Option<Box<dyn FnOnce() + Send>>);
impl Drop for OnExit {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}
thread_local! {
    static ATK_ON_EXIT: std::cell::RefCell<Option<OnExit>> = const { std::cell::RefCell::new(None) };
}

/// Lost wakeup through the orphaned-waker path (`queue::wake_deferred`): a thread whose locals
/// are being destroyed (a thread-local's destructor of the program polls a CQ: legal) keeps
/// the waker of a completion it routes in the process-wide ORPHANED list; while its poll is
/// still routing (a parked buffer's drop in the same batch is slow), another thread T wakes
/// its own kept wakers and, after them, the orphaned one. That waker runs its task inline on
/// T (allowed: "a waker may run its task inline, even a task that polls"), and the task's poll
/// routes the completion of future B, keeping B's waker in T's list. The same wake on T must
/// call it: a `wake_deferred` that cleared T's PENDING flag after `wake_orphaned` returned with
/// B's waker still in the list would never wake B, however many dispatches followed.
#[test]
fn a_waker_kept_while_orphaned_wakers_are_woken_is_woken_by_the_same_wake() {
    let w = World::new();
    let (cq_x, fake_x) = w.cq();
    let (cq_y, fake_y) = w.cq();
    let qp_a = w.qp(0xd01, 16, &cq_x, None);
    let qp_c = w.qp(0xd02, 16, &cq_x, None);
    let qp_d = w.qp(0xd03, 16, &cq_y, None);
    let qp_b = w.qp(0xd04, 16, &cq_y, None);
    let qp_e = w.qp(0xd05, 16, &cq_y, None);
    let noop = Waker::from(Arc::new(Count::default()));
    // B waits on CQ Y; its waker counts.
    let mut fb = post_send(&qp_b, true).into_future();
    let b_wakes = Arc::new(Count::default());
    let wb = Waker::from(Arc::clone(&b_wakes));
    assert!(poll(&mut fb, &wb).is_pending());
    // A waits on CQ X; its waker runs A's task inline: the device completes B now, and the
    // task polls CQ Y (as a task that awaits several things polls them).
    let mut fa = post_send(&qp_a, true).into_future();
    let a_ran = Arc::new(AtomicBool::new(false));
    let (ar, cqy) = (Arc::clone(&a_ran), Arc::clone(&cq_y));
    let wa = fn_waker(move || {
        fake_y.complete(send_wc(0xd04, 0, sys::IBV_WC_SUCCESS));
        let _ = cqy.poll_and_route();
        ar.store(true, SeqCst);
    });
    assert!(poll(&mut fa, &wa).is_pending());
    // D waits on CQ Y (T's own wake).
    let mut fd = post_send(&qp_d, true).into_future();
    let d_wakes = Arc::new(Count::default());
    assert!(poll(&mut fd, &Waker::from(Arc::clone(&d_wakes))).is_pending());
    // E waits on CQ Y (thread X's first wake, which sets up X's list of kept wakers).
    let mut fe = post_send(&qp_e, true).into_future();
    assert!(poll(&mut fe, &noop).is_pending());
    // C's token dropped: its buffer, slow to drop, parked.
    let stalling = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let c_seq = qp_c.sq.lock().push(true);
    let (st, rl) = (Arc::clone(&stalling), Arc::clone(&release));
    drop(OwnedToken::new(
        QueueArc::Send(Arc::clone(&qp_c)),
        c_seq,
        Stall(Some(Box::new(move || {
            st.store(true, SeqCst);
            let until = std::time::Instant::now() + Duration::from_secs(5);
            while !rl.load(SeqCst) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
        }))),
        None,
    ));
    assert_eq!(qp_c.sq.parked(), 1);
    // The device completes A and C (one batch of CQ X).
    fake_x.complete(send_wc(0xd01, 0, sys::IBV_WC_SUCCESS));
    fake_x.complete(send_wc(0xd02, c_seq, sys::IBV_WC_SUCCESS));
    let (cqx, cqy2) = (Arc::clone(&cq_x), Arc::clone(&cq_y));
    let x = std::thread::spawn(move || {
        // Registered first, so destroyed after the library's thread-locals.
        ATK_ON_EXIT.with(|e| {
            *e.borrow_mut() = Some(OnExit(Some(Box::new(move || {
                // The program's thread-local destructor polls CQ X.
                let _ = cqx.poll_and_route();
            }))))
        });
        // A first wake on this thread: its list of kept wakers is set up now.
        fake_y.complete(send_wc(0xd05, 0, sys::IBV_WC_SUCCESS));
        cqy2.poll_and_route().unwrap();
    });
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !stalling.load(SeqCst) {
        assert!(std::time::Instant::now() < until, "thread X never reached the parked buffer's drop");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Thread X is inside its batch: A's waker is in ORPHANED. This thread (T) routes D's
    // completion and wakes: D's waker, then the orphaned A's, inline.
    fake_y.complete(send_wc(0xd03, 0, sys::IBV_WC_SUCCESS));
    cq_y.poll_and_route().unwrap();
    // Before X is let go: A's waker ran here, on T.
    assert!(a_ran.load(SeqCst), "A's waker ran on this thread, while X still stalls");
    assert!(!qp_b.sq.is_pending(0), "B's completion was routed (by A's task, on T)");
    assert_eq!(b_wakes.get(), 1, "B's waker called by the same wake on T, while X still stalls");
    release.store(true, SeqCst);
    x.join().unwrap();
    assert_eq!(d_wakes.get(), 1, "D woken");
    assert!(!qp_b.sq.is_pending(0), "B's completion was routed");
    // Anything a program would do next: dispatches, polls of the CQs.
    for _ in 0..3 {
        let _ = w.ch.dispatch();
        let _ = cq_y.poll_and_route();
        let _ = cq_x.poll_and_route();
    }
    let b_woken = b_wakes.get();
    // B is complete in the book, and its waker was called once.
    assert!(matches!(poll(&mut fb, &wb), Poll::Ready(Ok(_))), "B is complete");
    assert!(matches!(poll(&mut fa, &noop), Poll::Ready(Ok(_))));
    assert!(matches!(poll(&mut fd, &noop), Poll::Ready(Ok(_))));
    assert!(matches!(poll(&mut fe, &noop), Poll::Ready(Ok(_))));
    assert_eq!(b_woken, 1, "LOST WAKEUP: B's completion was routed, B's waker never called");
}

/// Tokio: two runtimes (multi-threaded, and current-thread on its own thread) await futures on
/// QPs sharing one CQ through the real driver tasks; some tasks are aborted, some futures
/// raced against a timer and dropped; the device completes from a plain thread in random
/// order. Every surviving future resolves once, with no buffer back before its completion.
#[cfg(feature = "tokio")]
#[test]
fn tokio_two_runtimes_aborts_and_timeouts_on_a_shared_cq() {
    let before = violations();
    let w = World::new();
    let (cq, fake) = w.cq();
    let qps: Vec<_> = (0..4u32).map(|i| w.qp(0xe00 + i, 64, &cq, None)).collect();
    let mt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for round in 0..10u64 {
        let mut reqs = Vec::new();
        let resolved = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        let (ct_tx, ct_rx) = std::sync::mpsc::channel::<OwnedCompletion<Guard>>();
        let mut ct_count = 0;
        for (i, qp) in qps.iter().enumerate() {
            for k in 0..6 {
                let recv = k % 2 == 0;
                let (t, r) = if recv { guarded_recv(qp, "t-recv") } else { guarded_send(qp, true, "t-send") };
                let f = t.into_future();
                let qp_num = 0xe00 + i as u32;
                let n = (i * 6 + k) as u64 + round;
                if n % 4 == 3 {
                    ct_tx.send(f).unwrap();
                    ct_count += 1;
                } else {
                    let res = Arc::clone(&resolved);
                    let timed = n % 5 == 1;
                    handles.push((
                        n % 7 == 2,
                        mt.spawn(async move {
                            if timed {
                                tokio::select! {
                                    r = f => { let (c, g) = r.map_err(|e| e.error).unwrap(); assert_eq!(c.qp_num(), qp_num); drop(g); res.fetch_add(1, SeqCst); }
                                    _ = tokio::time::sleep(Duration::from_millis(3)) => {}
                                }
                            } else {
                                let (c, g) = f.await.map_err(|e| e.error).unwrap();
                                assert_eq!(c.qp_num(), qp_num);
                                drop(g);
                                res.fetch_add(1, SeqCst);
                            }
                        }),
                    ));
                }
                reqs.push((qp_num, recv, r));
            }
        }
        drop(ct_tx);
        let res2 = Arc::clone(&resolved);
        let ct = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let mut set = Vec::new();
                while let Ok(f) = ct_rx.recv() {
                    let res = Arc::clone(&res2);
                    set.push(tokio::spawn(async move {
                        let (_, g) = f.await.map_err(|e| e.error).unwrap();
                        drop(g);
                        res.fetch_add(1, SeqCst);
                    }));
                }
                for h in set {
                    h.await.unwrap();
                }
            });
        });
        std::thread::sleep(Duration::from_millis(2));
        for (abort, h) in &handles {
            if *abort {
                h.abort();
            }
        }
        // The device, in order per send queue, random otherwise.
        let mut x = round * 31 + 5;
        let mut order: Vec<usize> = (0..reqs.len()).collect();
        for i in (1..order.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (x >> 33) as usize % (i + 1));
        }
        let mut next_send: std::collections::HashMap<u32, Vec<usize>> = Default::default();
        for (i, r) in reqs.iter().enumerate().rev() {
            if !r.1 {
                next_send.entry(r.0).or_default().push(i);
            }
        }
        for i in order {
            let (qp_num, recv, _) = &reqs[i];
            if *recv {
                dev_recv(fake, *qp_num, &reqs[i].2, sys::IBV_WC_SUCCESS);
            } else {
                let j = next_send.get_mut(qp_num).unwrap().pop().unwrap();
                dev_send(fake, *qp_num, &reqs[j].2, sys::IBV_WC_SUCCESS);
            }
            if x % 2 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let aborted_or_timed = mt.block_on(async {
            let mut n = 0;
            for (_, h) in handles {
                match tokio::time::timeout(Duration::from_secs(5), h).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) if e.is_cancelled() => n += 1,
                    Ok(Err(e)) => std::panic::resume_unwind(e.into_panic()),
                    Err(_) => panic!("round {round}: a task never finished although every completion landed"),
                }
            }
            n
        });
        ct.join().unwrap();
        let got = resolved.load(SeqCst);
        assert!(got >= ct_count, "round {round}: every future of the current-thread runtime resolved ({got})");
        assert!(got + aborted_or_timed <= reqs.len(), "round {round}: a future resolved twice");
        cq.poll_and_route().unwrap();
        for (q, recv, r) in &reqs {
            assert_eq!(r.drops.load(SeqCst), 1, "round {round}: qp {q:#x} recv {recv} seq {} released once", r.seq);
        }
        assert_eq!(cq.waiters.load(SeqCst), 0);
    }
    assert_eq!(violations(), before);
}

/// Whether the channel's descriptor is readable now (an executor's reactor, asked once).
fn fd_readable(fd: i32) -> bool {
    crate::channel::poll_readable(fd, Duration::ZERO).expect("poll(2) of the channel")
}

/// `Cq::req_notify(true)` while futures wait serves the CQ in the same call (polls it, routing
/// what it finds, and arms it for any completion again), until a poll after the arming finds
/// it empty. A serving of one batch (`serve(1)`) would, with 16 or more completions in the
/// CQ, poll one batch and return before the arming, leaving the device armed for solicited
/// completions only; with the runtime-agnostic executor (dispatch when the descriptor is
/// readable), the futures whose completions were left, and every later one, would then wait
/// for an event that no successful completion produces.
///
/// How 16+ completions sit in the CQ with no event: they land between a future F's arming
/// and the arming taking effect (F's post-arm poll takes its own and a batch, resolves, and
/// hands the CQ to the next dispatch, `left_in`, which such an executor runs at the next event).
#[test]
fn a_solicited_arming_with_a_full_batch_in_the_cq_serves_it_until_it_is_armed_for_the_futures() {
    for program_arms_solicited in [false, true] {
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0xf01, 64, &cq, None);
        let toks: Vec<_> = (0..41).map(|_| post_recv(&qp)).collect();
        let mut it = toks.into_iter();
        let mut f = it.next().unwrap().into_future(); // r0
        let gs: Arc<Mutex<Vec<OwnedCompletion<()>>>> = Arc::new(Mutex::new(it.map(|t| t.into_future()).collect())); // r1..=r40
        let g_wakes: Arc<Vec<Arc<Count>>> = Arc::new((0..40).map(|_| Arc::new(Count::default())).collect());
        let (gs2, gw2) = (Arc::clone(&gs), Arc::clone(&g_wakes));
        *fake.on_arm.lock().unwrap() = Some(Box::new(move || {
            // F's arming is under way: every G waits (sees the CQ armed, does not arm)...
            std::thread::spawn(move || {
                let mut gs = gs2.lock().unwrap();
                for (i, g) in gs.iter_mut().enumerate() {
                    assert!(poll(g, &Waker::from(Arc::clone(&gw2[i]))).is_pending());
                }
            })
            .join()
            .unwrap();
            // ...and r0..=r39 land before the arming takes effect: no event.
            for seq in 0..40 {
                fake.complete(recv_wc(0xf01, seq, sys::IBV_WC_SUCCESS));
            }
        }));
        let fw = Waker::from(Arc::new(Count::default()));
        assert!(matches!(poll(&mut f, &fw), Poll::Ready(Ok(_))), "F resolves");
        assert_eq!(fake.left(), 24, "r16..=r39 left in the CQ");
        assert!(!fd_readable(w.ch.raw_fd()), "no event");
        if program_arms_solicited {
            crate::cq::Cq { inner: Arc::clone(&cq) }.req_notify(true).unwrap();
            eprintln!(
                "after req_notify(true): device armed {} solicited_only {} left {}",
                fake.armed.load(SeqCst),
                fake.solicited_only.load(SeqCst),
                fake.left()
            );
        }
        // The woken Gs resolve (their results are in the book; they poll nothing).
        let mut gs_l = gs.lock().unwrap();
        let mut done = [false; 40];
        for (i, g) in gs_l.iter_mut().enumerate() {
            if g_wakes[i].get() > 0 {
                assert!(matches!(poll(g, &fw), Poll::Ready(Ok(_))));
                done[i] = true;
            }
        }
        drop(gs_l);
        // The device completes r40 (a successful receive, not solicited).
        fake.complete(recv_wc(0xf01, 40, sys::IBV_WC_SUCCESS));
        // The executor: dispatch while the channel's descriptor is readable; poll woken futures.
        for _ in 0..10 {
            while fd_readable(w.ch.raw_fd()) {
                let _ = w.ch.dispatch();
            }
            let mut gs_l = gs.lock().unwrap();
            for (i, g) in gs_l.iter_mut().enumerate() {
                if !done[i] && g_wakes[i].get() > 0 {
                    assert!(matches!(poll(g, &fw), Poll::Ready(Ok(_))));
                    done[i] = true;
                }
            }
        }
        let stuck: Vec<usize> = (0..40).filter(|&i| !done[i]).map(|i| i + 1).collect();
        eprintln!("program_arms_solicited={program_arms_solicited}: never woken: receives {stuck:?}");
        assert!(stuck.is_empty(), "program_arms_solicited={program_arms_solicited}: receives {stuck:?} completed on the device, their futures never woken (CQ left in it: {})", fake.left());
    }
}

/// `Cq::req_notify(true)` while a CQ keeps filling (every poll finds a full batch): the serving
/// stops after about as many completions as the CQ holds, and the CQ is left armed for any
/// completion all the same, so the waiting future's completion, landing later, produces an
/// event and a dispatch-on-readable executor wakes it. (Stopping at the bound without arming
/// left only the program's solicited-only arming: no event, the future never woken.)
#[test]
fn a_solicited_arming_on_a_cq_that_keeps_filling_stops_at_its_bound_armed_for_any_completion() {
    let w = World::new();
    let (cq, fake) = w.droppable_cq_holding(256);
    std::mem::forget(Arc::clone(&cq));
    let qp = w.qp(0xf81, 16, &cq, None);
    let mut f = post_send(&qp, true).into_future();
    let woken = Arc::new(Count::default());
    let wk = Waker::from(Arc::clone(&woken));
    assert!(poll(&mut f, &wk).is_pending());
    fake.busy.store(true, SeqCst);
    crate::cq::Cq { inner: Arc::clone(&cq) }.req_notify(true).unwrap();
    fake.busy.store(false, SeqCst);
    assert!(
        fake.armed.load(SeqCst) && !fake.solicited_only.load(SeqCst) && cq.armed.load(SeqCst),
        "armed for any completion after the bound"
    );
    fake.complete(send_wc(0xf81, 0, sys::IBV_WC_SUCCESS));
    for _ in 0..10 {
        while fd_readable(w.ch.raw_fd()) {
            w.ch.dispatch().unwrap();
        }
    }
    assert_eq!(woken.get(), 1, "the waiting future woken by its completion's event");
    assert!(matches!(poll(&mut f, &wk), Poll::Ready(Ok(_))));
}

/// The same with 100 completions in a CQ of 256 (a second serving finds it empty and arms),
/// and with a CQ's worth (64 in a CQ of 64: one serving's four batches, up to the bound): 32 of them are the waiting futures'; every future is woken, and the CQ is left armed
/// for any completion.
#[test]
fn a_solicited_arming_on_a_full_cq_wakes_every_future_and_leaves_it_armed() {
    for (cqe, fill) in [(256, 100), (64, 64)] {
        let w = World::new();
        let (cq, fake) = w.droppable_cq_holding(cqe);
        std::mem::forget(Arc::clone(&cq));
        let qp = w.qp(0xf82, 32, &cq, None);
        let mut fs: Vec<_> = (0..32).map(|_| post_recv(&qp).into_future()).collect();
        let woken = Arc::new(Count::default());
        let wk = Waker::from(Arc::clone(&woken));
        for f in &mut fs {
            assert!(poll(f, &wk).is_pending());
        }
        for seq in 0..32 {
            fake.complete(recv_wc(0xf82, seq, sys::IBV_WC_SUCCESS));
        }
        // The rest of a QP no longer there.
        for _ in 32..fill {
            fake.complete(send_wc(0x7ffe, 0, sys::IBV_WC_SUCCESS));
        }
        assert_eq!(fake.left(), fill as usize);
        crate::cq::Cq { inner: Arc::clone(&cq) }.req_notify(true).unwrap();
        assert_eq!(woken.get(), 32, "CQ of {cqe}: every future woken");
        assert!(fake.armed.load(SeqCst) && !fake.solicited_only.load(SeqCst), "CQ of {cqe}: armed for any completion");
        assert_eq!(fake.left(), 0, "CQ of {cqe}: served to the end");
        for f in &mut fs {
            assert!(matches!(poll(f, &wk), Poll::Ready(Ok(_))));
        }
    }
}

/// An arming that fails in a dispatch (after an event, serving the CQ) leaves the other
/// futures waiting on the CQ with no event to come: they are woken, and polled again they arm
/// it, so the next completion wakes them as usual. (Not woken, they waited for ever under an
/// executor that dispatches when the channel's descriptor is readable.) The same after a
/// failed poll of the serving.
#[test]
fn a_failed_arming_wakes_the_other_futures_waiting_on_the_cq() {
    failed_serving_wakes_the_other_futures(true);
}

#[test]
fn a_failed_poll_of_a_dispatch_wakes_the_other_futures_waiting_on_the_cq() {
    failed_serving_wakes_the_other_futures(false);
}

/// The serving of a dispatch fails at its arming (`arming`) or at its first poll.
fn failed_serving_wakes_the_other_futures(arming: bool) {
    let w = World::new();
    let TwoWaiting { cq: _cq, fake, qa: _qa, qb: _qb, mut fa, mut fb, ca, cb, wa, wb } = two_waiting(w, 0xf91, 0xf92);
    // A's completion fires the event; the dispatch serves the CQ, and its arming (or its poll)
    // fails.
    if arming {
        fake.fail_next_arm.store(true, SeqCst);
    } else {
        fake.fail_next.store(true, SeqCst);
    }
    fake.complete(send_wc(0xf91, 0, sys::IBV_WC_SUCCESS));
    assert!(fd_readable(w.ch.raw_fd()), "A's completion fired the event");
    assert!(w.ch.dispatch().is_err(), "the failure comes out of the dispatch");
    assert_eq!(cb.get(), 1, "B woken by the failed serving");
    assert!(!fake.armed.load(SeqCst), "nothing armed");
    // B's task polls again and arms the CQ; B's completion then fires an event.
    assert!(poll(&mut fb, &wb).is_pending());
    assert!(fake.armed.load(SeqCst), "armed again by B's poll");
    fake.complete(send_wc(0xf92, 0, sys::IBV_WC_SUCCESS));
    while fd_readable(w.ch.raw_fd()) {
        w.ch.dispatch().unwrap();
    }
    assert_eq!(cb.get(), 2, "B woken by its completion");
    assert!(matches!(poll(&mut fb, &wb), Poll::Ready(Ok(_))));
    assert!(matches!(poll(&mut fa, &wa), Poll::Ready(Ok(_))));
    assert!(ca.get() >= 1, "A woken");
}

/// A runtime that runs the channel's driver task dropped inside a waker that a manual
/// dispatch runs; then a second future on the same channel, awaited on a new runtime, is
/// still served (a new driver), and nothing deadlocks on the channel's lock.
#[cfg(feature = "tokio")]
#[test]
fn a_runtime_dropped_inside_a_wake_run_by_dispatch() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xf11, 64, &cq, None);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // A future awaited on rt starts rt's driver task, and resolves.
    let f0 = post_send(&qp, true).into_future();
    let fake2: &'static FakeCq = fake;
    rt.block_on(async move {
        let h = tokio::spawn(f0);
        tokio::task::yield_now().await;
        fake2.complete(send_wc(0xf11, 0, sys::IBV_WC_SUCCESS));
        assert!(h.await.unwrap().is_ok());
    });
    // F, polled with no runtime: its waker drops rt (and with it rt's driver task).
    let rt_slot = Arc::new(Mutex::new(Some(rt)));
    let rs = Arc::clone(&rt_slot);
    let dropped = Arc::new(AtomicBool::new(false));
    let d2 = Arc::clone(&dropped);
    let wk = fn_waker(move || {
        drop(rs.lock().unwrap().take());
        d2.store(true, SeqCst);
    });
    let mut f = post_send(&qp, true).into_future();
    assert!(poll(&mut f, &wk).is_pending());
    fake.complete(send_wc(0xf11, 1, sys::IBV_WC_SUCCESS));
    let t = std::thread::spawn(move || w.ch.dispatch().map(|d| d.completions));
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !t.is_finished() {
        assert!(std::time::Instant::now() < until, "dispatch deadlocked dropping the runtime in a waker");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(t.join().unwrap().unwrap(), 1);
    assert!(dropped.load(SeqCst));
    assert!(matches!(poll(&mut f, &wk), Poll::Ready(Ok(_))));
    // A new runtime: a new driver serves the next future.
    let rt2 = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let g = post_send(&qp, true).into_future();
    let r = rt2.block_on(async move {
        let h = tokio::spawn(g);
        tokio::task::yield_now().await;
        fake2.complete(send_wc(0xf11, 2, sys::IBV_WC_SUCCESS));
        tokio::time::timeout(Duration::from_secs(3), h).await
    });
    assert!(matches!(r, Ok(Ok(Ok(_)))), "the next future is served by a new driver");
}

/// The program's own `CompChannel::wait` loops on the channel the futures wait on (the
/// documented limit: the program's wait may lose events), while a tokio runtime awaits
/// futures: the futures themselves must not lose their wakeups.
#[cfg(feature = "tokio")]
#[test]
fn program_wait_on_the_futures_channel_does_not_strand_futures() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0xf21, 64, &cq, None);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (st, ch) = (Arc::clone(&stop), w.ch.clone());
    let waiter = std::thread::spawn(move || {
        let mut n = 0;
        while !st.load(SeqCst) {
            if ch.wait(Duration::from_millis(5)).is_ok() {
                n += 1;
            }
        }
        n
    });
    for round in 0..50u64 {
        let toks: Vec<_> = (0..8).map(|_| post_recv(&qp)).collect();
        let base = toks.len() as u64 * round;
        let hs: Vec<_> = toks.into_iter().map(|t| rt.spawn(t.into_future())).collect();
        std::thread::sleep(Duration::from_micros(300));
        for k in (0..8).rev() {
            fake.complete(recv_wc(0xf21, base + k, sys::IBV_WC_SUCCESS));
            if k % 3 == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        let r = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), async {
                for h in hs {
                    assert!(h.await.unwrap().is_ok());
                }
            })
            .await
        });
        assert!(r.is_ok(), "round {round}: futures stranded while the program waits on their channel");
    }
    stop.store(true, SeqCst);
    let n = waiter.join().unwrap();
    eprintln!("the program's wait got {n} events");
}

/// A serving whose poll after the arming fails: a completion that landed before the arming
/// took effect sits in the CQ, and no event will come for it; the futures waiting are woken.
#[test]
fn a_failed_poll_after_the_arming_wakes_the_other_futures() {
    let w = World::new();
    let TwoWaiting { cq: _cq, fake, qa: _qa, qb: _qb, mut fa, mut fb, ca: _ca, cb, wa, wb } =
        two_waiting(w, 0xe91, 0xe92);
    let f2: &'static FakeCq = fake;
    *fake.on_arm.lock().unwrap() = Some(Box::new(move || {
        // B's completion lands before the re-arming takes effect (no event), and the poll
        // after the arming fails.
        f2.complete(send_wc(0xe92, 0, sys::IBV_WC_SUCCESS));
        f2.fail_next.store(true, SeqCst);
    }));
    fake.complete(send_wc(0xe91, 0, sys::IBV_WC_SUCCESS));
    assert!(fd_readable(w.ch.raw_fd()));
    assert!(w.ch.dispatch().is_err(), "the failed poll comes out of the dispatch");
    assert!(matches!(poll(&mut fa, &wa), Poll::Ready(Ok(_))));
    assert_eq!(cb.get(), 1, "B woken after the failed post-arm poll (its completion is in the CQ, no event will come)");
    assert!(matches!(poll(&mut fb, &wb), Poll::Ready(Ok(_))), "B, polled again, takes its completion");
}

/// A dispatch's serving whose first poll fails while the CQ is armed, after an earlier serving
/// left completions that landed before the arming (`more`): no event will come for them; the
/// futures waiting are woken.
#[test]
fn a_failed_poll_with_completions_left_from_an_earlier_serving_wakes_the_other_futures() {
    let w = World::new();
    let TwoWaiting { cq, fake, qa: _qa, qb: _qb, mut fa, mut fb, ca, cb, wa, wb } = two_waiting(w, 0xe93, 0xe94);
    let f2: &'static FakeCq = fake;
    *fake.on_arm.lock().unwrap() = Some(Box::new(move || {
        for _ in 0..100 {
            f2.complete(send_wc(0x7ffe, 0, sys::IBV_WC_SUCCESS));
        }
        f2.complete(send_wc(0xe94, 0, sys::IBV_WC_SUCCESS));
    }));
    // An event (another QP's completion); the dispatch re-arms, the hook fills the CQ.
    fake.complete(send_wc(0x7ffe, 0, sys::IBV_WC_SUCCESS));
    let d = w.ch.dispatch().unwrap();
    assert!(d.more);
    assert!(!fd_readable(w.ch.raw_fd()));
    assert!(cq.armed.load(SeqCst));
    // The executor dispatches again (more); its first poll fails.
    fake.fail_next.store(true, SeqCst);
    assert!(w.ch.dispatch().is_err());
    assert!(cb.get() >= 1, "B woken (its completion is in the CQ, landed before the arming: no event)");
    // Polled again (each poll serves a bounded part of the CQ, then wakes itself), B resolves.
    let resolved = (0..10).any(|_| matches!(poll(&mut fb, &wb), Poll::Ready(Ok(_))));
    assert!(resolved, "B resolves from the completions left in the CQ");
    assert!(ca.get() >= 1, "A woken too");
    assert!(poll(&mut fa, &wa).is_pending(), "A's request never completed");
}

/// Futures A and B, each waiting (polled once, pending, with a counting waker) on a send of
/// its own QP; both QPs complete on one new CQ.
struct TwoWaiting {
    cq: Arc<CqShared>,
    fake: &'static FakeCq,
    qa: Arc<QpShared>,
    qb: Arc<QpShared>,
    fa: OwnedCompletion<()>,
    fb: OwnedCompletion<()>,
    ca: Arc<Count>,
    cb: Arc<Count>,
    wa: Waker,
    wb: Waker,
}

fn two_waiting(w: &'static World, qa_num: u32, qb_num: u32) -> TwoWaiting {
    let (cq, fake) = w.cq();
    let qa = w.qp(qa_num, 16, &cq, None);
    let qb = w.qp(qb_num, 16, &cq, None);
    let mut fa = post_send(&qa, true).into_future();
    let mut fb = post_send(&qb, true).into_future();
    let (ca, cb) = (Arc::new(Count::default()), Arc::new(Count::default()));
    let (wa, wb) = (Waker::from(Arc::clone(&ca)), Waker::from(Arc::clone(&cb)));
    assert!(poll(&mut fa, &wa).is_pending());
    assert!(poll(&mut fb, &wb).is_pending());
    TwoWaiting { cq, fake, qa, qb, fa, fb, ca, cb, wa, wb }
}

/// `Cq::req_notify(true)` on a CQ that keeps filling: the library's arming at the serving's
/// bound fails, and the first future's waker panics: the other futures are woken all the
/// same.
#[test]
fn a_failed_arming_after_the_programs_solicited_arming_wakes_every_future_past_a_panicking_waker() {
    let w = World::new();
    let (cq, fake) = w.droppable_cq_holding(256);
    std::mem::forget(Arc::clone(&cq));
    let qa = w.qp(0xe95, 16, &cq, None);
    let qb = w.qp(0xe96, 16, &cq, None);
    let mut fa = post_send(&qa, true).into_future();
    let mut fb = post_send(&qb, true).into_future();
    let cb = Arc::new(Count::default());
    let wa = Waker::from(Arc::new(PanicWake));
    let wb = Waker::from(Arc::clone(&cb));
    assert!(poll(&mut fa, &wa).is_pending());
    assert!(poll(&mut fb, &wb).is_pending());
    let f2: &'static FakeCq = fake;
    // The program's own (solicited) arming succeeds; the library's next arming fails.
    *fake.on_arm.lock().unwrap() = Some(Box::new(move || f2.fail_next_arm.store(true, SeqCst)));
    fake.busy.store(true, SeqCst);
    let r = quiet(|| crate::cq::Cq { inner: Arc::clone(&cq) }.req_notify(true));
    fake.busy.store(false, SeqCst);
    assert!(r.is_err(), "A's waker's panic comes out of req_notify, after the others were woken");
    assert_eq!(cb.get(), 1, "B woken by the failed arming although A's waker panicked");
    drop((fa, fb));
}

/// Tokio: the driver's dispatch fails at the poll after its re-arming, and the driver task
/// ends; the futures waiting are woken, so B, polled again, serves the CQ itself (a new driver)
/// and resolves when its completion lands.
#[cfg(feature = "tokio")]
#[test]
fn a_driver_whose_dispatch_fails_after_the_arming_strands_no_future() {
    driver_failing_on_as_cq(false);
}

/// A dispatch of the tokio driver fails serving A's CQ (the poll after its re-arming), and the
/// driver task ends; B's future, on the same CQ or (`other_cq`) on another CQ of the channel
/// that dispatch had nothing to do with, is woken all the same, and polled again starts a new
/// driver, which reads the event of B's completion. (Only the failing CQ's futures woken, A
/// resolved at once and nothing started a driver: B on another CQ waited for ever.)
#[cfg(feature = "tokio")]
fn driver_failing_on_as_cq(other_cq: bool) {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (cq_b, fake_b) = if other_cq { w.cq() } else { (Arc::clone(&cq), fake) };
    let qa = w.qp(0xe97, 16, &cq, None);
    let qb = w.qp(0xe98, 16, &cq_b, None);
    let fa = post_send(&qa, true).into_future();
    let fb = post_send(&qb, true).into_future();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let r = rt.block_on(async move {
        let ha = tokio::spawn(fa);
        let hb = tokio::spawn(fb);
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        *fake.on_arm.lock().unwrap() = Some(Box::new(move || fake.fail_next.store(true, SeqCst)));
        fake.complete(send_wc(0xe97, 0, sys::IBV_WC_SUCCESS));
        let a = tokio::time::timeout(Duration::from_secs(3), ha).await;
        assert!(matches!(a, Ok(Ok(Ok(_)))), "A resolves: {a:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        // B's own completion, after the arming: an event.
        fake_b.complete(send_wc(0xe98, 0, sys::IBV_WC_SUCCESS));
        tokio::time::timeout(Duration::from_secs(3), hb).await
    });
    assert!(matches!(r, Ok(Ok(Ok(_)))), "B stranded: {:?}", r.map(|r| r.map(|r| r.is_ok())));
    drop((cq, cq_b));
}

/// Every poll fails (a provider failing for good): the woken futures each resolve with the
/// error, and the wakes stop.
#[test]
fn a_provider_whose_every_poll_fails_resolves_every_future_with_the_error() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qps: Vec<_> = (0..8).map(|i| w.qp(0xea0 + i, 16, &cq, None)).collect();
    let mut fs: Vec<_> = qps.iter().map(|q| Some(post_send(q, true).into_future())).collect();
    let counts: Vec<_> = (0..8).map(|_| Arc::new(Count::default())).collect();
    let wakers: Vec<_> = counts.iter().map(|c| Waker::from(Arc::clone(c))).collect();
    for (f, wk) in fs.iter_mut().zip(&wakers) {
        assert!(poll(f.as_mut().unwrap(), wk).is_pending());
    }
    fake.complete(send_wc(0x7ffe, 0, sys::IBV_WC_SUCCESS));
    fake.fail_next.store(true, SeqCst);
    assert!(w.ch.dispatch().is_err());
    let mut seen: Vec<usize> = vec![0; 8];
    for _round in 0..100 {
        let mut any = false;
        for i in 0..8 {
            if fs[i].is_some() && counts[i].get() > seen[i] {
                seen[i] = counts[i].get();
                any = true;
                fake.fail_next.store(true, SeqCst);
                match poll(fs[i].as_mut().unwrap(), &wakers[i]) {
                    Poll::Ready(r) => {
                        assert!(r.is_err());
                        fs[i] = None;
                    }
                    Poll::Pending => {}
                }
            }
        }
        if !any {
            break;
        }
    }
    fake.fail_next.store(false, SeqCst);
    let left = fs.iter().filter(|f| f.is_some()).count();
    assert_eq!(left, 0, "every future resolved with the error");
    assert!(counts.iter().all(|c| c.get() >= 1), "every future woken by the failed serving");
    assert_eq!(cq.waiters.load(SeqCst), 0);
}

/// A dispatch whose serving of one CQ fails leaves the other CQs it read events for unserved:
/// their futures are woken at the dispatch's end (a driver task ends at a failed dispatch, and
/// their events were read), and each serves its CQ itself.
#[test]
fn a_failed_dispatch_wakes_the_futures_of_the_cqs_it_did_not_serve() {
    let w = World::new();
    let (cq1, fake1) = w.cq();
    let (cq2, fake2) = w.cq();
    let qa = w.qp(0xea1, 16, &cq1, None);
    let qb = w.qp(0xea2, 16, &cq2, None);
    let mut fa = post_send(&qa, true).into_future();
    let mut fb = post_send(&qb, true).into_future();
    let (ca, cb) = (Arc::new(Count::default()), Arc::new(Count::default()));
    let (wa, wb) = (Waker::from(Arc::clone(&ca)), Waker::from(Arc::clone(&cb)));
    assert!(poll(&mut fa, &wa).is_pending());
    assert!(poll(&mut fb, &wb).is_pending());
    // Both CQs fire; the first's serving fails at its poll.
    fake1.complete(send_wc(0xea1, 0, sys::IBV_WC_SUCCESS));
    fake2.complete(send_wc(0xea2, 0, sys::IBV_WC_SUCCESS));
    fake1.fail_next.store(true, SeqCst);
    assert!(w.ch.dispatch().is_err(), "the failed serving comes out of the dispatch");
    assert_eq!(ca.get(), 1, "A woken by its CQ's failed serving");
    assert_eq!(cb.get(), 1, "B woken although its CQ was not served");
    assert!(matches!(poll(&mut fb, &wb), Poll::Ready(Ok(_))), "B, polled again, serves its CQ");
    assert!(matches!(poll(&mut fa, &wa), Poll::Ready(Ok(_))), "A too");
    drop((cq1, cq2));
}

/// A solicited-only arming's serving that stops at its bound with completions left from
/// before the arming (which fire no event) wakes the futures waiting on the CQ: B, whose
/// completion is the 80th in a CQ of 64, is woken and takes it when polled.
#[test]
fn a_solicited_arming_stopped_at_its_bound_wakes_the_futures_whose_completions_are_left() {
    let w = World::new();
    let (cq, fake) = w.droppable_cq_holding(64);
    std::mem::forget(Arc::clone(&cq));
    let qb = w.qp(0xea3, 16, &cq, None);
    let mut fb = post_send(&qb, true).into_future();
    let cb = Arc::new(Count::default());
    let wb = Waker::from(Arc::clone(&cb));
    assert!(poll(&mut fb, &wb).is_pending());
    for _ in 0..79 {
        fake.complete(send_wc(0x7ffe, 0, sys::IBV_WC_SUCCESS));
    }
    fake.complete(send_wc(0xea3, 0, sys::IBV_WC_SUCCESS));
    crate::cq::Cq { inner: Arc::clone(&cq) }.req_notify(true).unwrap();
    assert_eq!(fake.left(), 16, "stopped at the bound, B's completion left");
    assert!(fake.armed.load(SeqCst) && !fake.solicited_only.load(SeqCst), "armed for any completion");
    assert_eq!(cb.get(), 1, "B woken at the bound");
    assert!(matches!(poll(&mut fb, &wb), Poll::Ready(Ok(_))), "B, polled, serves the CQ and takes it");
}

/// A receive of a shared receive queue waits on the CQs of the QPs attached to it; when its
/// serving of the first leaves completions (more than a poll's batches) and that of the second
/// fails, the future resolves with the error, and the first CQ is still queued for the next
/// dispatch: its completions fire no event, and this future will not poll again.
#[test]
fn an_srq_receive_whose_second_cqs_serving_fails_hands_the_first_cq_on() {
    let w = World::new();
    let (cq1, fake1) = w.cq();
    let (cq2, fake2) = w.cq();
    let srq = w.srq(4);
    let _q1 = w.qp(0xea4, 16, &cq1, Some(Arc::clone(&srq)));
    let _q2 = w.qp(0xea5, 16, &cq2, Some(Arc::clone(&srq)));
    let (_, tok) = post_srq_recv(&srq);
    let mut f = tok.into_future();
    let waker = Waker::from(Arc::new(Count::default()));
    assert!(poll(&mut f, &waker).is_pending(), "waiting on both CQs");
    for _ in 0..100 {
        fake1.complete(send_wc(0x7ffe, 0, sys::IBV_WC_SUCCESS));
    }
    fake2.fail_next.store(true, SeqCst);
    assert!(matches!(poll(&mut f, &waker), Poll::Ready(Err(_))), "the failed serving resolves the future");
    assert_eq!(fake1.left(), 36, "the first CQ's serving (four batches) left completions");
    let ch = cq1.channel.as_ref().expect("the CQ has a channel");
    assert!(ch.is_queued(&cq1), "the first CQ is queued for the next dispatch");
}

/// The same with B on another CQ of the channel.
#[cfg(feature = "tokio")]
#[test]
fn a_failed_dispatch_of_one_cq_leaves_a_driver_for_the_other_cqs_futures() {
    driver_failing_on_as_cq(true);
}
