//! Attacks on the books, the release rule and the awaited futures,
//! over the fake device of `async_races`.

use super::*;
use crate::scope::{sealed, Completes};
use crate::test_util::Rng;
use crate::wc::{Completion, CompletionSource};
static STATS: [AtomicUsize; 4] = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];

/// Counters shared by every [`Watch`] of a test.
#[derive(Default, Clone)]
struct Counters {
    early: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Counters {
    fn watch(&self) -> (Watch, Arc<AtomicBool>) {
        let done = Arc::new(AtomicBool::new(false));
        (Watch { device_done: Arc::clone(&done), early: Arc::clone(&self.early), drops: Arc::clone(&self.drops) }, done)
    }
}

/// Posts a send (in the book, as `QpShared::post_send` does: room checked, forced signal
/// applied) owning a [`Watch`]; `None` when the queue is full.
fn send_watched(
    qp: &Arc<QpShared>,
    signaled: bool,
    c: &Counters,
) -> Option<(OwnedToken<Watch>, u64, bool, Arc<AtomicBool>)> {
    let mut b = qp.sq.lock();
    b.next_seq()?;
    let signaled = signaled || b.must_signal(0);
    let seq = b.push(signaled);
    drop(b);
    let (w, done) = c.watch();
    Some((OwnedToken::new(QueueArc::Send(Arc::clone(qp)), seq, w, None), seq, signaled, done))
}

fn recv_watched(qp: &Arc<QpShared>, c: &Counters) -> Option<(OwnedToken<Watch>, u64, Arc<AtomicBool>)> {
    let mut b = qp.rq.lock();
    b.next_seq()?;
    let seq = b.push(true);
    drop(b);
    let (w, done) = c.watch();
    Some((OwnedToken::new(QueueArc::Recv(Arc::clone(qp)), seq, w, None), seq, done))
}

fn srq_watched(srq: &Arc<SrqShared>, c: &Counters) -> Option<(OwnedToken<Watch>, u64, Arc<AtomicBool>)> {
    let mut b = srq.rq.lock();
    b.next_seq()?;
    let seq = b.push(true);
    drop(b);
    let (w, done) = c.watch();
    Some((OwnedToken::new(QueueArc::Srq(Arc::clone(srq)), seq, w, None), seq, done))
}

type WOut = <OwnedCompletion<Watch> as Future>::Output;
fn wpoll(f: &mut OwnedCompletion<Watch>, w: &Waker) -> Poll<WOut> {
    Pin::new(f).poll(&mut Cx::from_waker(w))
}

// ---------------------------------------------------------------------------------------------
// A randomized model of one QP (send and receive queue on one CQ): the device executes requests
// in order, produces completions for signaled sends, errors and every receive, goes to error
// (flushing the rest) after a failed request, and stops touching everything at a reset. The
// program posts, drops tokens, awaits and drops futures, waits with timeout 0, polls, resets,
// and the provider re-delivers completions it had delivered before (stale / duplicate). Every
// buffer must come back (or be dropped) only once the device executed its request; a token
// must never read success for a request the device failed; each buffer is dropped once.

enum Holder {
    Token(OwnedToken<Watch>),
    Future(OwnedCompletion<Watch>),
}

struct Req {
    seq: u64,
    recv: bool,
    signaled: bool,
    done: Arc<AtomicBool>,
    /// The device's status once executed.
    status: Option<u32>,
    holder: Option<Holder>,
}

fn check_result(r: &Req, c: &Completion, what: &str) {
    let status = r.status;
    if c.is_success() {
        assert_eq!(
            status,
            Some(sys::IBV_WC_SUCCESS),
            "{what}: request {} (recv {}) read as success, device said {status:?}",
            r.seq,
            r.recv
        );
    }
    if c.source() == CompletionSource::ImpliedByLater {
        assert!(!r.recv, "{what}: a receive implied");
    }
}

fn model_run(seed: u64, depth: u32, steps: usize) {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp_num = 0x700 + (seed as u32 % 0x80);
    let qp = w.qp(qp_num, depth, &cq, None);
    let c = Counters::default();
    let mut rng = Rng(seed | 1);
    let mut reqs: Vec<Req> = Vec::new();
    let mut delivered: Vec<sys::ibv_wc> = Vec::new();
    // Device state: the next request to execute on each queue (index into reqs filtered), error.
    let mut sq_err = false;
    let mut rq_err = false;
    let mut created = 0usize;
    let mut returned: Vec<Watch> = Vec::new();
    let waker = Waker::from(Arc::new(Count::default()));
    for step in 0..steps {
        match rng.below(14) {
            0 | 1 => {
                if let Some((t, seq, signaled, done)) = send_watched(&qp, rng.below(3) == 0, &c) {
                    created += 1;
                    reqs.push(Req { seq, recv: false, signaled, done, status: None, holder: Some(Holder::Token(t)) });
                }
            }
            2 => {
                if let Some((t, seq, done)) = recv_watched(&qp, &c) {
                    created += 1;
                    reqs.push(Req {
                        seq,
                        recv: true,
                        signaled: true,
                        done,
                        status: None,
                        holder: Some(Holder::Token(t)),
                    });
                }
            }
            3 | 4 => {
                // The device executes the oldest unexecuted request of one queue.
                let recv = rng.below(2) == 0;
                if let Some(r) = reqs.iter_mut().find(|r| r.recv == recv && r.status.is_none()) {
                    let err = if recv { &mut rq_err } else { &mut sq_err };
                    let status = if *err {
                        sys::IBV_WC_WR_FLUSH_ERR
                    } else if rng.below(12) == 0 {
                        *err = true;
                        sys::IBV_WC_REM_ACCESS_ERR
                    } else {
                        sys::IBV_WC_SUCCESS
                    };
                    r.status = Some(status);
                    r.done.store(true, SeqCst);
                    if r.recv || r.signaled || status != sys::IBV_WC_SUCCESS {
                        let wc = if r.recv { recv_wc(qp_num, r.seq, status) } else { send_wc(qp_num, r.seq, status) };
                        delivered.push(wc);
                        fake.complete(wc);
                    }
                }
            }
            5 => {
                // The provider delivers an old completion again.
                if !delivered.is_empty() {
                    let wc = delivered[rng.below(delivered.len() as u64) as usize];
                    fake.complete(wc);
                }
            }
            6 => {
                let _ = cq.poll_and_route();
            }
            7 => {
                // Drop a holder (token or future).
                if let Some(r) = pick(&mut reqs, &mut rng) {
                    r.holder = None;
                }
            }
            8 => {
                // try_complete / wait(0) on a token.
                if let Some(r) = pick(&mut reqs, &mut rng) {
                    if let Some(Holder::Token(t)) = r.holder.take() {
                        let res = if rng.below(2) == 0 {
                            t.try_complete().map_err(Some)
                        } else {
                            t.wait(Duration::ZERO).map_err(|e| Some(e.token))
                        };
                        match res {
                            Ok((comp, watch)) => {
                                check_result(r, &comp, "sync");
                                STATS[if comp.is_success() { 0 } else { 1 }].fetch_add(1, SeqCst);
                                returned.push(watch);
                            }
                            Err(t) => r.holder = t.map(Holder::Token),
                        }
                    } else if let Some(h) = r.holder.take() {
                        r.holder = Some(h);
                    }
                }
            }
            9 | 10 => {
                // Turn a token into a future, or poll a future.
                if let Some(r) = pick(&mut reqs, &mut rng) {
                    let mut f = match r.holder.take() {
                        Some(Holder::Token(t)) => t.into_future(),
                        Some(Holder::Future(f)) => f,
                        None => continue,
                    };
                    match wpoll(&mut f, &waker) {
                        Poll::Ready(Ok((comp, watch))) => {
                            check_result(r, &comp, "future");
                            STATS[if comp.is_success() { 2 } else { 3 }].fetch_add(1, SeqCst);
                            returned.push(watch);
                        }
                        Poll::Ready(Err(e)) => panic!("step {step}: future failed: {:?}", e.error),
                        Poll::Pending => r.holder = Some(Holder::Future(f)),
                    }
                }
            }
            11 => {
                let _ = w.ch.dispatch();
            }
            12 => {
                if rng.below(6) == 0 {
                    // A reset: the device stops touching every buffer of the QP's queues.
                    for r in reqs.iter_mut().filter(|r| r.status.is_none()) {
                        r.status = Some(sys::IBV_WC_WR_FLUSH_ERR);
                        r.done.store(true, SeqCst);
                    }
                    sq_err = false;
                    rq_err = false;
                    qp.fake_after_reset();
                }
            }
            _ => {
                // Returned buffers go away.
                returned.clear();
            }
        }
        assert_eq!(c.early.load(SeqCst), 0, "seed {seed} depth {depth} step {step}: a buffer came back early");
        reqs.retain(|r| r.holder.is_some() || r.status.is_none());
    }
    // The end: a reset, a poll, everything dropped.
    for r in reqs.iter_mut().filter(|r| r.status.is_none()) {
        r.status = Some(sys::IBV_WC_WR_FLUSH_ERR);
        r.done.store(true, SeqCst);
    }
    qp.fake_after_reset();
    let _ = cq.poll_and_route();
    drop(reqs);
    drop(returned);
    assert_eq!(c.early.load(SeqCst), 0, "seed {seed}: early at the end");
    assert_eq!(c.drops.load(SeqCst), created, "seed {seed} depth {depth}: every buffer dropped exactly once");
    assert_eq!(qp.sq.parked() + qp.rq.parked(), 0, "nothing left parked");
}

fn pick<'a>(reqs: &'a mut [Req], rng: &mut Rng) -> Option<&'a mut Req> {
    let held: Vec<usize> = (0..reqs.len()).filter(|&i| reqs[i].holder.is_some()).collect();
    if held.is_empty() {
        return None;
    }
    let i = held[rng.below(held.len() as u64) as usize];
    Some(&mut reqs[i])
}

/// The model above, over depths 1, 2, 3, 5, 7, 8 and many seeds.
#[test]
fn random_model_no_early_release_no_false_success_each_buffer_dropped_once() {
    for depth in [1u32, 2, 3, 5, 7, 8] {
        for s in 0..60u64 {
            model_run(0x9e37_79b9_7f4a_7c15 ^ (s * 7919 + u64::from(depth)), depth, 400);
        }
    }
    let st: Vec<usize> = STATS.iter().map(|a| a.load(SeqCst)).collect();
    eprintln!("sync ok/err, future ok/err: {st:?}");
    assert!(st.iter().all(|&n| n > 0), "every outcome reached: {st:?}");
}

/// A Watch whose drop panics (a program's `StableBuffer` may), still recording early drops.
struct PanickyWatch(#[allow(dead_code)] Watch);
impl Drop for PanickyWatch {
    fn drop(&mut self) {
        panic!("hostile buffer drop");
    }
}
impl sealed::Sealed for PanickyWatch {}
impl Completes for PanickyWatch {
    type Output = ();
    fn complete(self, _: &Completion, _: sealed::Internal) {
        std::mem::forget(self);
    }
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        Some(Box::new(self))
    }
}

/// An SRQ shared by two QPs on two CQs: receives complete in any order through either QP,
/// completions are re-delivered, tokens dropped, awaited, polled through either CQ, and one QP's
/// completions are also delivered after it is dropped (its route dead). No buffer comes back
/// before the device consumed its receive, each is dropped once.
#[test]
fn srq_random_any_order_two_cqs_dups_no_early_release() {
    for s in 0..80u64 {
        let w = World::new();
        let (cq_a, fake_a) = w.cq();
        let (cq_b, fake_b) = w.cq();
        let srq = w.srq(6);
        let qa = w.qp(0x7a0 + s as u32, 4, &cq_a, Some(Arc::clone(&srq)));
        let qb = w.qp(0x7f0 + s as u32, 4, &cq_b, Some(Arc::clone(&srq)));
        let c = Counters::default();
        let mut rng = Rng((s + 1).wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
        let mut live: Vec<(u64, Arc<AtomicBool>, Option<Holder>, bool)> = Vec::new();
        let mut delivered: Vec<(bool, sys::ibv_wc)> = Vec::new();
        let mut created = 0;
        let waker = Waker::from(Arc::new(Count::default()));
        for step in 0..300 {
            match rng.below(9) {
                0 | 1 => {
                    if let Some((t, seq, done)) = srq_watched(&srq, &c) {
                        created += 1;
                        live.push((seq, done, Some(Holder::Token(t)), false));
                    }
                }
                2 | 3 => {
                    // Any unconsumed receive is consumed by either QP.
                    let idle: Vec<usize> = (0..live.len()).filter(|&i| !live[i].3).collect();
                    if !idle.is_empty() {
                        let i = idle[rng.below(idle.len() as u64) as usize];
                        live[i].3 = true;
                        live[i].1.store(true, SeqCst);
                        let on_a = rng.below(2) == 0;
                        let (num, fake) = if on_a { (qa.qp_num(), fake_a) } else { (qb.qp_num(), fake_b) };
                        let st = if rng.below(8) == 0 { sys::IBV_WC_WR_FLUSH_ERR } else { sys::IBV_WC_SUCCESS };
                        let wc = recv_wc(num, live[i].0, st);
                        delivered.push((on_a, wc));
                        fake.complete(wc);
                    }
                }
                4 => {
                    if !delivered.is_empty() {
                        let (on_a, wc) = delivered[rng.below(delivered.len() as u64) as usize];
                        if on_a {
                            fake_a.complete(wc)
                        } else {
                            fake_b.complete(wc)
                        }
                    }
                }
                5 => {
                    let _ = if rng.below(2) == 0 { cq_a.poll_and_route() } else { cq_b.poll_and_route() };
                }
                6 => {
                    if !live.is_empty() {
                        let i = rng.below(live.len() as u64) as usize;
                        live[i].2 = None;
                    }
                }
                7 => {
                    if !live.is_empty() {
                        let i = rng.below(live.len() as u64) as usize;
                        let mut f = match live[i].2.take() {
                            Some(Holder::Token(t)) => t.into_future(),
                            Some(Holder::Future(f)) => f,
                            None => continue,
                        };
                        match wpoll(&mut f, &waker) {
                            Poll::Ready(Ok((_, watch))) => drop(watch),
                            Poll::Ready(Err(e)) => panic!("seed {s} step {step}: {:?}", e.error),
                            Poll::Pending => live[i].2 = Some(Holder::Future(f)),
                        }
                    }
                }
                _ => {
                    let _ = w.ch.dispatch();
                }
            }
            assert_eq!(c.early.load(SeqCst), 0, "seed {s} step {step}: an SRQ buffer came back early");
            live.retain(|l| l.2.is_some() || !l.3);
        }
        // The device consumes everything left; the CQs are polled until empty.
        for l in live.iter_mut().filter(|l| !l.3) {
            l.3 = true;
            l.1.store(true, SeqCst);
            fake_a.complete(recv_wc(qa.qp_num(), l.0, sys::IBV_WC_WR_FLUSH_ERR));
        }
        while cq_a.poll_and_route().unwrap() + cq_b.poll_and_route().unwrap() > 0 {}
        drop(live);
        assert_eq!(c.early.load(SeqCst), 0);
        assert_eq!(c.drops.load(SeqCst), created, "seed {s}: every SRQ buffer dropped exactly once");
        assert_eq!(srq.rq.parked(), 0);
    }
}

/// A waker that, when woken (at the end of the poll that routed its completion, outside the
/// routing lock), resets the QP (as a program's executor running a task inline could, through
/// `Qp::reset`) and drops another waiting future of the same QP. Nothing deadlocks, the reset's
/// flush releases the dropped future's parked buffer only because the device stopped (the
/// reset), and a completion of the pre-reset request delivered afterwards changes nothing.
#[test]
fn a_waker_that_resets_the_qp_and_drops_a_neighbour_inside_its_wake() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0x7c1, 8, &cq, None);
        let c = Counters::default();
        let (t0, s0, _, d0) = send_watched(&qp, true, &c).unwrap();
        let (t1, s1, _, d1) = send_watched(&qp, true, &c).unwrap();
        let (t2, _s2, _, d2) = send_watched(&qp, true, &c).unwrap();
        let neighbour = Arc::new(Mutex::new(Some(t1.into_future())));
        let plain = Waker::from(Arc::new(Count::default()));
        assert!(wpoll(neighbour.lock().unwrap().as_mut().unwrap(), &plain).is_pending());
        struct Hostile {
            qp: Arc<QpShared>,
            neighbour: Arc<Mutex<Option<OwnedCompletion<Watch>>>>,
            devs: Vec<Arc<AtomicBool>>,
        }
        impl Wake for Hostile {
            fn wake(self: Arc<Self>) {
                // The device stops touching everything: then the program resets.
                for d in &self.devs {
                    d.store(true, SeqCst);
                }
                drop(self.neighbour.lock().unwrap().take());
                self.qp.fake_after_reset();
            }
        }
        let hostile = Waker::from(Arc::new(Hostile {
            qp: Arc::clone(&qp),
            neighbour: Arc::clone(&neighbour),
            devs: vec![Arc::clone(&d1), Arc::clone(&d2)],
        }));
        let mut f0 = t0.into_future();
        assert!(wpoll(&mut f0, &hostile).is_pending());
        let mut f2 = t2.into_future();
        assert!(wpoll(&mut f2, &plain).is_pending());
        d0.store(true, SeqCst);
        fake.complete(send_wc(0x7c1, s0, sys::IBV_WC_SUCCESS));
        let _ = w.ch.dispatch();
        assert_eq!(c.early.load(SeqCst), 0);
        match wpoll(&mut f0, &plain) {
            Poll::Ready(Ok((comp, _))) => assert!(comp.is_success()),
            other => panic!("{:?}", other.map(|r| r.map(|_| ()).map_err(|e| e.error))),
        }
        match wpoll(&mut f2, &plain) {
            Poll::Ready(Ok((comp, _))) => assert_eq!(comp.source(), CompletionSource::ForcedReset),
            other => panic!("{:?}", other.map(|r| r.map(|_| ()).map_err(|e| e.error))),
        }
        // A stale completion of request 1 after the reset.
        fake.complete(send_wc(0x7c1, s1, sys::IBV_WC_SUCCESS));
        cq.poll_and_route().unwrap();
        assert_eq!(c.early.load(SeqCst), 0);
        assert_eq!(qp.sq.parked(), 0);
    });
}

/// A reset run by a `Drop` while the thread unwinds releases a parked buffer whose drop
/// panics: the panic must be kept (not resumed, which would abort the process).
#[test]
fn a_reset_during_unwinding_releasing_a_panicking_parked_buffer_does_not_abort() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let qp = w.qp(0x7c2, 8, &cq, None);
    let c = Counters::default();
    let seq = qp.sq.lock().push(true);
    let (watch, done) = c.watch();
    let t = OwnedToken::new(QueueArc::Send(Arc::clone(&qp)), seq, PanickyWatch(watch), None);
    drop(t);
    assert_eq!(qp.sq.parked(), 1);
    struct ResetOnDrop(Arc<QpShared>, Arc<AtomicBool>);
    impl Drop for ResetOnDrop {
        fn drop(&mut self) {
            assert!(std::thread::panicking());
            self.1.store(true, SeqCst);
            self.0.fake_after_reset();
        }
    }
    let r = quiet(|| {
        let _g = ResetOnDrop(Arc::clone(&qp), done);
        panic!("the program's own panic");
    });
    assert!(r.is_err());
    assert_eq!(qp.sq.parked(), 0);
    assert_eq!(c.early.load(SeqCst), 0);
    // The hostile buffer's payload leaked; its inner Watch counted one drop? It panicked in
    // `PanickyWatch::drop` before its field was dropped: the field is dropped by the unwind.
    assert_eq!(c.drops.load(SeqCst), 1);
}

/// A waker whose `wake` panics while another parked buffer's drop panics in the same poll: the
/// first panic comes out once; nothing is left parked, and the second future still resolves.
#[test]
fn a_panicking_waker_and_a_panicking_parked_buffer_in_one_poll() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x7c3, 8, &cq, None);
    let c = Counters::default();
    let s0 = qp.sq.lock().push(true);
    let (watch, d0) = c.watch();
    drop(OwnedToken::new(QueueArc::Send(Arc::clone(&qp)), s0, PanickyWatch(watch), None));
    let (t1, s1, _, d1) = send_watched(&qp, true, &c).unwrap();
    let (t2, s2, _, d2) = send_watched(&qp, true, &c).unwrap();
    let mut f1 = t1.into_future();
    assert!(wpoll(&mut f1, &Waker::from(Arc::new(PanicWake))).is_pending());
    let mut f2 = t2.into_future();
    let plain = Waker::from(Arc::new(Count::default()));
    assert!(wpoll(&mut f2, &plain).is_pending());
    for (d, s) in [(&d0, s0), (&d1, s1), (&d2, s2)] {
        d.store(true, SeqCst);
        fake.complete(send_wc(0x7c3, s, sys::IBV_WC_SUCCESS));
    }
    assert!(quiet(|| cq.poll_and_route()).is_err(), "a panic comes out of the poll");
    assert_eq!(qp.sq.parked(), 0);
    assert!(matches!(wpoll(&mut f1, &plain), Poll::Ready(Ok(_))));
    assert!(matches!(wpoll(&mut f2, &plain), Poll::Ready(Ok(_))));
    assert_eq!(c.early.load(SeqCst), 0);
}

/// Threads: T1 waits (sync, short timeouts) on half the tokens, T2 awaits or drops the other
/// half (its futures served by its own polls and dispatch), while the main thread plays the
/// device (in-order execution, completions, re-delivered old ones) and resets the QP now and
/// then (the program owns the `Qp`: posts stop meanwhile, tokens on other threads go on).
#[test]
fn threads_waiting_awaiting_and_dropping_across_resets_never_release_early() {
    bounded(60, || {
        for round in 0..20u64 {
            let w = World::new();
            let (cq, fake) = w.cq();
            let qp = w.qp(0x7d0 + round as u32, 8, &cq, None);
            let c = Counters::default();
            let mut rng = Rng(round.wrapping_mul(0x9e37_79b9) | 1);
            let (tx1, rx1) = std::sync::mpsc::channel::<OwnedToken<Watch>>();
            let (tx2, rx2) = std::sync::mpsc::channel::<OwnedToken<Watch>>();
            let t1 = std::thread::spawn(move || {
                let mut pending: Vec<OwnedToken<Watch>> = Vec::new();
                loop {
                    match rx1.try_recv() {
                        Ok(t) => pending.push(t),
                        Err(std::sync::mpsc::TryRecvError::Disconnected) if pending.is_empty() => return,
                        Err(_) => {}
                    }
                    if let Some(t) = pending.pop() {
                        match t.wait(Duration::from_micros(50)) {
                            Ok((_, watch)) => drop(watch),
                            Err(e) => pending.insert(0, e.token),
                        }
                    }
                }
            });
            let w2 = w;
            let t2 = std::thread::spawn(move || {
                let waker = Waker::from(Arc::new(Count::default()));
                let mut futs: Vec<OwnedCompletion<Watch>> = Vec::new();
                let mut i = 0u64;
                loop {
                    match rx2.try_recv() {
                        Ok(t) => futs.push(t.into_future()),
                        Err(std::sync::mpsc::TryRecvError::Disconnected) if futs.is_empty() => return,
                        Err(_) => {}
                    }
                    i += 1;
                    if i % 7 == 0 {
                        futs.pop();
                        continue;
                    }
                    let _ = w2.ch.dispatch();
                    futs.retain_mut(|f| !matches!(wpoll(f, &waker), Poll::Ready(Ok(_))));
                }
            });
            let mut outstanding: VecDeque<(u64, bool, Arc<AtomicBool>)> = VecDeque::new();
            let mut old: Vec<sys::ibv_wc> = Vec::new();
            let num = qp.qp_num();
            for step in 0..600 {
                match rng.below(10) {
                    0..=3 => {
                        if let Some((t, seq, signaled, done)) = send_watched(&qp, rng.below(2) == 0, &c) {
                            outstanding.push_back((seq, signaled, done));
                            if step % 2 == 0 {
                                tx1.send(t).unwrap()
                            } else {
                                tx2.send(t).unwrap()
                            }
                        }
                    }
                    4..=7 => {
                        if let Some((seq, signaled, done)) = outstanding.pop_front() {
                            done.store(true, SeqCst);
                            if signaled {
                                let wc = send_wc(num, seq, sys::IBV_WC_SUCCESS);
                                old.push(wc);
                                fake.complete(wc);
                            }
                        }
                    }
                    8 => {
                        if !old.is_empty() {
                            fake.complete(old[rng.below(old.len() as u64) as usize]);
                        }
                    }
                    _ => {
                        if rng.below(5) == 0 {
                            for (_, _, d) in outstanding.drain(..) {
                                d.store(true, SeqCst);
                            }
                            qp.fake_after_reset();
                        }
                    }
                }
                assert_eq!(c.early.load(SeqCst), 0, "round {round} step {step}: early");
            }
            for (_, _, d) in outstanding.drain(..) {
                d.store(true, SeqCst);
            }
            qp.fake_after_reset();
            drop((tx1, tx2));
            t1.join().unwrap();
            t2.join().unwrap();
            let _ = cq.poll_and_route();
            assert_eq!(c.early.load(SeqCst), 0);
            assert_eq!(qp.sq.parked(), 0);
        }
    });
}
