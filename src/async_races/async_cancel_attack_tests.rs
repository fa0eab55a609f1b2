//! Attacks on the cancellation of awaited completions (tokio): futures dropped
//! after every number of polls, `tokio::time::timeout` at every await point of a loop of posts
//! and awaits, runtimes shut down or dropped under waiting futures, futures moved between
//! runtimes, the program's `dispatch` concurrent with the driver task, wakers that block,
//! a channel and its last CQ dropped under the driver, async event readers cancelled.
//!
//! Every buffer is a `Guard`: handing it back or dropping it before the fake device produced
//! its request's completion is a violation (device truth, not the library's book); each test
//! also counts that every buffer is released exactly once. Anything that could hang runs under
//! a deadline.

use super::*;
use crate::scope::{sealed, Completes};
use crate::wc::Completion;

static VIOLATIONS: AtomicUsize = AtomicUsize::new(0);

fn violations() -> usize {
    VIOLATIONS.load(SeqCst)
}

/// A buffer whose drop or hand-back before the device finished is a violation.
#[derive(Debug)]
struct Guard {
    device_done: Arc<AtomicBool>,
    drops: Arc<AtomicUsize>,
    backs: Arc<AtomicUsize>,
}
impl Drop for Guard {
    fn drop(&mut self) {
        if !self.device_done.load(SeqCst) {
            eprintln!("VIOLATION: buffer dropped before the device finished");
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
            eprintln!("VIOLATION: buffer handed back before the device finished");
            VIOLATIONS.fetch_add(1, SeqCst);
        }
        self.backs.fetch_add(1, SeqCst);
        self
    }
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        Some(Box::new(self))
    }
}

#[derive(Clone)]
struct Req {
    done: Arc<AtomicBool>,
    drops: Arc<AtomicUsize>,
    backs: Arc<AtomicUsize>,
    seq: u64,
    recv: bool,
    qp_num: u32,
}

impl Req {
    /// The device completes the request (done first: the device is done before it writes the
    /// completion).
    fn complete(&self, fake: &FakeCq, status: u32) {
        self.done.store(true, SeqCst);
        if self.recv {
            fake.complete(recv_wc(self.qp_num, self.seq, status));
        } else {
            fake.complete(send_wc(self.qp_num, self.seq, status));
        }
    }
}

fn guarded(qp: &Arc<QpShared>, qp_num: u32, recv: bool) -> (OwnedToken<Guard>, Req) {
    let seq = if recv { qp.rq.lock().push(true) } else { qp.sq.lock().push(true) };
    let done = Arc::new(AtomicBool::new(false));
    let drops = Arc::new(AtomicUsize::new(0));
    let backs = Arc::new(AtomicUsize::new(0));
    let g = Guard { device_done: Arc::clone(&done), drops: Arc::clone(&drops), backs: Arc::clone(&backs) };
    let q = if recv { QueueArc::Recv(Arc::clone(qp)) } else { QueueArc::Send(Arc::clone(qp)) };
    (OwnedToken::new(q, seq, g, None), Req { done, drops, backs, seq, recv, qp_num })
}

type GOut = <OwnedCompletion<Guard> as Future>::Output;
fn gpoll(f: &mut OwnedCompletion<Guard>, w: &Waker) -> Poll<GOut> {
    Pin::new(f).poll(&mut Cx::from_waker(w))
}

fn mt(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap()
}

fn ct() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Every request was released exactly once (handed back or dropped), after the device was done.
fn all_released_once(reqs: &[Req], what: &str) {
    for r in reqs {
        assert!(r.done.load(SeqCst), "{what}: seq {} never completed by the device", r.seq);
        assert_eq!(r.drops.load(SeqCst), 1, "{what}: qp {:#x} recv {} seq {} released once", r.qp_num, r.recv, r.seq);
        assert!(r.backs.load(SeqCst) <= 1, "{what}: seq {} handed back twice", r.seq);
    }
}

/// A tiny deterministic generator.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

// ---------------------------------------------------------------------------------------------
// 1. A future dropped after every number of polls, its completion landing at every step.
// ---------------------------------------------------------------------------------------------

/// For each number of polls `k` before the drop and each step `j` at which the device completes
/// (before poll `j`, with a dispatch or not, with extra polls or not), a send and a receive:
/// the buffer is handed back only by a resolved poll, never before the device is done, and a
/// dropped future's buffer is released exactly once, once the CQ is polled after the device
/// finished. No waiter count and no waker are left behind.
#[test]
fn a_future_dropped_after_every_poll_count_with_its_completion_landing_at_every_step() {
    let before = violations();
    let w = World::new();
    let (cq, fake) = w.cq();
    let handle = crate::cq::Cq { inner: Arc::clone(&cq) };
    let qp = w.qp(0xa10, 256, &cq, None);
    let waker = Waker::from(Arc::new(Count::default()));
    let mut reqs = Vec::new();
    for extra in [0u32, 2] {
        handle.set_await_polls(extra);
        for recv in [false, true] {
            for k in 0..7usize {
                for j in 0..8usize {
                    for dispatch in [false, true] {
                        let (t, r) = guarded(&qp, 0xa10, recv);
                        let mut f = t.into_future();
                        let mut resolved = false;
                        for i in 0..k {
                            if i == j {
                                r.complete(fake, sys::IBV_WC_SUCCESS);
                                if dispatch {
                                    w.ch.dispatch().unwrap();
                                }
                            }
                            match gpoll(&mut f, &waker) {
                                Poll::Ready(Ok((c, g))) => {
                                    assert!(r.done.load(SeqCst), "resolved before the device finished");
                                    assert!(c.is_success());
                                    drop(g);
                                    resolved = true;
                                    break;
                                }
                                Poll::Ready(Err(e)) => panic!("k {k} j {j}: {:?}", e.error),
                                Poll::Pending => {}
                            }
                        }
                        drop(f);
                        if !resolved && !r.done.load(SeqCst) {
                            assert_eq!(r.drops.load(SeqCst), 0, "k {k} j {j}: released before the device finished");
                            r.complete(fake, sys::IBV_WC_SUCCESS);
                        }
                        cq.poll_and_route().unwrap();
                        assert_eq!(
                            r.drops.load(SeqCst),
                            1,
                            "extra {extra} recv {recv} k {k} j {j} dispatch {dispatch}: released once"
                        );
                        assert_eq!(cq.waiters.load(SeqCst), 0, "k {k} j {j}: a waiter count left");
                        reqs.push(r);
                    }
                }
            }
        }
    }
    // Drain any event the armings left.
    let _ = w.ch.dispatch();
    all_released_once(&reqs, "poll counts");
    assert_eq!(violations(), before);
    assert_eq!(qp.outstanding(), (0, 0));
}

// ---------------------------------------------------------------------------------------------
// 2. tokio::time::timeout at every await point of a loop of posts and awaits.
// ---------------------------------------------------------------------------------------------

/// A loop of posts and awaits on a multi-threaded (then current-thread) runtime, each await
/// bounded by a timeout of 0 to a few hundred microseconds (some re-awaited through `&mut`
/// after a timeout, some moved to another task after one), while a device thread completes the
/// requests in posting order per queue at random moments. Every buffer comes back (or is
/// released) exactly once and never before the device finished; the futures that were not
/// cancelled all resolve.
#[test]
fn timeouts_at_every_await_point_in_a_loop_of_posts_and_awaits() {
    for flavour in ["multi", "current"] {
        bounded(60, move || timeouts_loop(flavour));
    }
}

fn timeouts_loop(flavour: &'static str) {
    let before = violations();
    let w = World::new();
    let (cq, fake) = w.cq();
    let qn = if flavour == "multi" { 0xa20 } else { 0xa28 };
    let qps: Vec<_> = (0..3u32).map(|i| w.qp(qn + i, 4096, &cq, None)).collect();
    let rt = if flavour == "multi" { mt(2) } else { ct() };
    // The device: requests handed to it in posting order per queue, completed at random moments.
    let (dev_tx, dev_rx) = std::sync::mpsc::channel::<Req>();
    let device = std::thread::spawn(move || {
        let mut rng = Lcg(7);
        let mut n = 0usize;
        while let Ok(r) = dev_rx.recv() {
            if rng.next() % 2 == 0 {
                std::thread::sleep(Duration::from_micros(rng.next() % 3000));
            }
            r.complete(fake, sys::IBV_WC_SUCCESS);
            n += 1;
        }
        n
    });
    let all = Arc::new(Mutex::new(Vec::new()));
    let resolved = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let (all2, res2, can2) = (Arc::clone(&all), Arc::clone(&resolved), Arc::clone(&cancelled));
    rt.block_on(async move {
        let mut rng = Lcg(3);
        let mut handles = Vec::new();
        for round in 0..300u64 {
            let mut futs = Vec::new();
            for (i, qp) in qps.iter().enumerate() {
                let recv = (round + i as u64) % 2 == 0;
                let (t, r) = guarded(qp, qn + i as u32, recv);
                all2.lock().unwrap().push(r.clone());
                futs.push((t.into_future(), r));
            }
            // The device learns of them (posted) in posting order per queue.
            for (_, r) in &futs {
                dev_tx.send(r.clone()).unwrap();
            }
            for (mut f, r) in futs {
                let mode = rng.next() % 5;
                // tokio's timer counts milliseconds: 0 (poll once), 1 or 2 ms.
                let d = Duration::from_millis(rng.next() % 3);
                let (res, can) = (Arc::clone(&res2), Arc::clone(&can2));
                match mode {
                    // Awaited under a timeout: dropped when it runs out.
                    0 | 1 => match tokio::time::timeout(d, f).await {
                        Ok(Ok((c, g))) => {
                            assert!(c.is_success() && r.done.load(SeqCst));
                            drop(g);
                            res.fetch_add(1, SeqCst);
                        }
                        Ok(Err(e)) => panic!("{:?}", e.error),
                        Err(_) => {
                            can.fetch_add(1, SeqCst);
                        }
                    },
                    // Re-awaited through `&mut` after each timeout, up to a few times, then
                    // dropped.
                    2 => {
                        let mut done = false;
                        for _ in 0..3 {
                            match tokio::time::timeout(d, &mut f).await {
                                Ok(Ok((c, g))) => {
                                    assert!(c.is_success() && r.done.load(SeqCst));
                                    drop(g);
                                    res.fetch_add(1, SeqCst);
                                    done = true;
                                    break;
                                }
                                Ok(Err(e)) => panic!("{:?}", e.error),
                                Err(_) => tokio::task::yield_now().await,
                            }
                        }
                        if !done {
                            can.fetch_add(1, SeqCst);
                        }
                        drop(f);
                    }
                    // A timeout, then moved to a task of its own that awaits it to the end.
                    3 => {
                        if let Ok(out) = tokio::time::timeout(d, &mut f).await {
                            let (c, g) = out.map_err(|e| e.error).unwrap();
                            assert!(c.is_success() && r.done.load(SeqCst));
                            drop(g);
                            res.fetch_add(1, SeqCst);
                        } else {
                            handles.push(tokio::spawn(async move {
                                let (c, g) = f.await.map_err(|e| e.error).unwrap();
                                assert!(c.is_success());
                                drop(g);
                                res.fetch_add(1, SeqCst);
                            }));
                        }
                    }
                    // A zero timeout, in a select against a ready branch: dropped before or
                    // after its first poll.
                    _ => {
                        tokio::select! {
                            biased;
                            _ = std::future::ready(()), if round % 2 == 0 => { can.fetch_add(1, SeqCst); }
                            out = tokio::time::timeout(Duration::ZERO, f) => match out {
                                Ok(out) => {
                                    let (_, g) = out.map_err(|e| e.error).unwrap();
                                    drop(g);
                                    res.fetch_add(1, SeqCst);
                                }
                                Err(_) => { can.fetch_add(1, SeqCst); }
                            },
                        }
                    }
                }
            }
        }
        drop(dev_tx);
        for h in handles {
            tokio::time::timeout(Duration::from_secs(10), h)
                .await
                .expect("a moved future never resolved though its completion landed")
                .unwrap();
        }
    });
    let n = device.join().unwrap();
    cq.poll_and_route().unwrap();
    let all = all.lock().unwrap();
    assert_eq!(n, all.len());
    all_released_once(&all, flavour);
    let (r, c) = (resolved.load(SeqCst), cancelled.load(SeqCst));
    assert_eq!(r + c, all.len(), "{flavour}: each future resolved or was cancelled, once");
    eprintln!("{flavour}: {r} resolved, {c} cancelled");
    assert_eq!(cq.waiters.load(SeqCst), 0);
    assert_eq!(violations(), before);
    drop(rt);
}

// ---------------------------------------------------------------------------------------------
// 3. The program's dispatch concurrent with the driver task.
// ---------------------------------------------------------------------------------------------

/// Two program threads call `dispatch` in a loop on the channel the tokio driver serves, while
/// tasks await futures and the device completes them: every future resolves once, in time.
#[test]
fn program_dispatch_concurrent_with_the_driver_strands_nothing() {
    bounded(60, || {
        let before = violations();
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0xa30, 4096, &cq, None);
        let rt = mt(2);
        let stop = Arc::new(AtomicBool::new(false));
        let dispatchers: Vec<_> = (0..2)
            .map(|_| {
                let (st, ch) = (Arc::clone(&stop), w.ch.clone());
                std::thread::spawn(move || {
                    let mut n = 0usize;
                    while !st.load(SeqCst) {
                        n += ch.dispatch().map(|d| d.completions).unwrap_or(0);
                        std::thread::yield_now();
                    }
                    n
                })
            })
            .collect();
        let mut all = Vec::new();
        for round in 0..100u64 {
            let mut hs = Vec::new();
            let mut reqs = Vec::new();
            for k in 0..8 {
                let (t, r) = guarded(&qp, 0xa30, k % 2 == 0);
                hs.push(rt.spawn(async move {
                    let (c, g) = t.await.map_err(|e| e.error).unwrap();
                    assert!(c.is_success());
                    drop(g);
                }));
                reqs.push(r);
            }
            std::thread::sleep(Duration::from_micros(200));
            for r in &reqs {
                r.complete(fake, sys::IBV_WC_SUCCESS);
                if round % 3 == 0 {
                    std::thread::yield_now();
                }
            }
            let ok = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), async {
                    for h in hs {
                        h.await.unwrap();
                    }
                })
                .await
            });
            assert!(ok.is_ok(), "round {round}: a future stranded by concurrent dispatches");
            all.extend(reqs);
        }
        stop.store(true, SeqCst);
        for d in dispatchers {
            d.join().unwrap();
        }
        all_released_once(&all, "concurrent dispatch");
        assert_eq!(cq.waiters.load(SeqCst), 0);
        assert_eq!(violations(), before);
    });
}

// ---------------------------------------------------------------------------------------------
// 4. Runtimes shut down / dropped under waiting futures; futures moved between runtimes.
// ---------------------------------------------------------------------------------------------

/// A runtime (each flavour, dropped or shut down in the background) with tasks awaiting
/// futures, whose requests are outstanding: the runtime's end drops the futures, whose buffers
/// stay parked until the device is done (not released at the shutdown), then are released
/// exactly once by a later poll. A new runtime's futures on the same channel are then served
/// (the old driver ended; a new one starts).
#[test]
fn runtimes_ended_under_waiting_futures_park_their_buffers_and_a_new_runtime_serves_on() {
    bounded(60, || {
        let before = violations();
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0xa40, 1024, &cq, None);
        for how in 0..4 {
            let rt = if how % 2 == 0 { mt(2) } else { ct() };
            let mut reqs = Vec::new();
            let polled = Arc::new(AtomicUsize::new(0));
            for k in 0..6 {
                let (t, r) = guarded(&qp, 0xa40, k % 2 == 1);
                let p = Arc::clone(&polled);
                let mut f = t.into_future();
                rt.spawn(async move {
                    // Counted once it waited (its first poll returned Pending).
                    std::future::poll_fn(|cx| {
                        let out = Pin::new(&mut f).poll(cx);
                        if out.is_pending() {
                            p.fetch_add(1, SeqCst);
                        }
                        out
                    })
                    .await
                    .map(drop)
                    .map_err(|e| e.error)
                    .unwrap();
                    unreachable!("no completion yet");
                });
                reqs.push(r);
            }
            if how % 2 == 1 {
                // A current-thread runtime runs its tasks only inside block_on.
                rt.block_on(async {
                    for _ in 0..20 {
                        tokio::task::yield_now().await;
                    }
                });
            } else {
                std::thread::sleep(Duration::from_millis(50));
            }
            assert_eq!(polled.load(SeqCst), 6, "how {how}: every future waits");
            assert!(cq.waiters.load(SeqCst) > 0);
            if how < 2 {
                drop(rt);
            } else {
                rt.shutdown_background();
            }
            // Background shutdown drops the tasks on the workers: give them a moment.
            let until = std::time::Instant::now() + Duration::from_secs(5);
            while cq.waiters.load(SeqCst) != 0 {
                assert!(std::time::Instant::now() < until, "how {how}: the dropped futures still count as waiters");
                std::thread::sleep(Duration::from_millis(5));
            }
            for r in &reqs {
                assert_eq!(r.drops.load(SeqCst), 0, "how {how}: released at the runtime's end, device not done");
            }
            for r in &reqs {
                r.complete(fake, sys::IBV_WC_SUCCESS);
            }
            cq.poll_and_route().unwrap();
            all_released_once(&reqs, "runtime ended");
            // A new runtime: its future is served by a new driver.
            let rt2 = mt(1);
            let (t, r) = guarded(&qp, 0xa40, false);
            let h = rt2.spawn(async move { t.await.map(|(c, g)| (c.is_success(), g)).map_err(|e| e.error) });
            std::thread::sleep(Duration::from_millis(20));
            r.complete(fake, sys::IBV_WC_SUCCESS);
            let got = rt2.block_on(async { tokio::time::timeout(Duration::from_secs(3), h).await });
            assert!(matches!(&got, Ok(Ok(Ok((true, _))))), "how {how}: a new runtime's future served: {got:?}");
            drop(got);
            all_released_once(&[r], "new runtime");
        }
        assert_eq!(violations(), before);
    });
}

/// A future polled (waiting) in a task of runtime A, handed out of the task, A then dropped,
/// and the future awaited on runtime B, of each flavour: B's driver serves it; and the reverse
/// ping-pong, moved at every poll between two live runtimes, each poll's waker another task's.
#[test]
// The tasks hand the future itself back (it moves to another runtime): meant.
#[allow(clippy::async_yields_async)]
fn a_future_moved_out_of_a_dropped_runtime_and_between_runtimes_at_every_poll_is_served() {
    bounded(60, || {
        let before = violations();
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0xa50, 1024, &cq, None);
        for b_multi in [true, false] {
            let a = mt(1);
            let (t, r) = guarded(&qp, 0xa50, true);
            let f = a.block_on(async move {
                tokio::spawn(async move {
                    let mut f = t.into_future();
                    let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut f).poll(cx).is_pending())).await;
                    assert!(first, "it waits");
                    f
                })
                .await
                .unwrap()
            });
            drop(a);
            let b = if b_multi { mt(1) } else { ct() };
            let h = b.spawn(async move { f.await.map(|(c, g)| (c.is_success(), g)).map_err(|e| e.error) });
            if b_multi {
                std::thread::sleep(Duration::from_millis(20));
            }
            r.complete(fake, sys::IBV_WC_SUCCESS);
            let got = b.block_on(async { tokio::time::timeout(Duration::from_secs(3), h).await });
            assert!(matches!(&got, Ok(Ok(Ok((true, _))))), "b multi {b_multi}: served on B: {got:?}");
            drop(got);
            all_released_once(&[r], "moved out of a dropped runtime");
        }
        // Ping-pong between two live multi-threaded runtimes, one poll each, via tasks.
        let (a, b) = (mt(1), mt(1));
        for land_after in 0..6 {
            let (t, r) = guarded(&qp, 0xa50, false);
            let mut f = t.into_future();
            let mut out = None;
            for i in 0..8 {
                if i == land_after {
                    r.complete(fake, sys::IBV_WC_SUCCESS);
                }
                let rt = if i % 2 == 0 { &a } else { &b };
                let (back, ready) = rt.block_on(async move {
                    tokio::spawn(async move {
                        let p = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut f).poll(cx))).await;
                        (f, p)
                    })
                    .await
                    .unwrap()
                });
                if let Poll::Ready(o) = ready {
                    out = Some(o);
                    drop(back);
                    break;
                }
                f = back;
                std::thread::sleep(Duration::from_millis(2));
            }
            match out {
                Some(Ok((c, g))) => {
                    assert!(c.is_success());
                    drop(g);
                }
                Some(Err(e)) => panic!("{:?}", e.error),
                None => panic!("land after {land_after}: never resolved in 8 polls with its completion in the CQ"),
            }
            all_released_once(&[r], "ping-pong");
        }
        assert_eq!(cq.waiters.load(SeqCst), 0);
        assert_eq!(violations(), before);
    });
}

// ---------------------------------------------------------------------------------------------
// 5. Wakers that block (in the driver's dispatch) or re-enter.
// ---------------------------------------------------------------------------------------------

/// A future whose waker blocks until another thread has done a whole cycle on the same QP and
/// CQ (booked a request, polled and routed, dispatched, resolved a future awaited on another
/// runtime): the blocking waker, run by the tokio driver's dispatch, must hold no lock of the
/// library.
#[test]
fn a_waker_blocking_in_the_drivers_dispatch_holds_no_lock_of_the_library() {
    bounded(30, || {
        let before = violations();
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0xa60, 256, &cq, None);
        let rt = mt(2);
        // The driver exists: a future awaited on rt first.
        let (t0, r0) = guarded(&qp, 0xa60, false);
        let h0 = rt.spawn(t0.into_future());
        std::thread::sleep(Duration::from_millis(20));
        r0.complete(fake, sys::IBV_WC_SUCCESS);
        let _ = rt.block_on(async { tokio::time::timeout(Duration::from_secs(3), h0).await }).unwrap().unwrap();
        // H: polled by hand, with a waker that blocks until the cycle below finished.
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (fin_tx, fin_rx) = std::sync::mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let fin_rx = Mutex::new(fin_rx);
        let blocked = Arc::new(AtomicBool::new(false));
        let b2 = Arc::clone(&blocked);
        let hw = Waker::from(Arc::new(BlockingWake(Box::new(move || {
            b2.store(true, SeqCst);
            let _ = go_tx.send(());
            // Blocks this thread (the driver's worker) until the other cycle is done.
            let _ = fin_rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
        }))));
        let (th, rh) = guarded(&qp, 0xa60, true);
        let mut h = th.into_future();
        // Polled inside rt's context, so that the driver serves it.
        let _enter = rt.enter();
        assert!(gpoll(&mut h, &hw).is_pending());
        drop(_enter);
        rh.complete(fake, sys::IBV_WC_SUCCESS);
        // The driver dispatches, runs H's waker, which blocks.
        go_rx.lock().unwrap().recv_timeout(Duration::from_secs(5)).expect("the driver ran H's waker");
        assert!(blocked.load(SeqCst));
        // Meanwhile: a whole cycle on the same QP and CQ, from another runtime.
        let rt2 = ct();
        let (t1, r1) = guarded(&qp, 0xa60, false);
        let (t2, r2) = guarded(&qp, 0xa60, true);
        let cycle = rt2.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), async {
                let f1 = tokio::spawn(t1.into_future());
                let f2 = tokio::spawn(t2.into_future());
                tokio::task::yield_now().await;
                r1.complete(fake, sys::IBV_WC_SUCCESS);
                r2.complete(fake, sys::IBV_WC_SUCCESS);
                let a = f1.await.unwrap().map_err(|e| e.error).unwrap();
                let b = f2.await.unwrap().map_err(|e| e.error).unwrap();
                drop((a, b));
                let _ = w.ch.dispatch();
                cq.poll_and_route().unwrap()
            })
            .await
        });
        let _ = fin_tx.send(());
        assert!(cycle.is_ok(), "a cycle on the same CQ blocked behind a blocking waker: a lock is held");
        match gpoll(&mut h, &hw) {
            Poll::Ready(Ok((c, g))) => {
                assert!(c.is_success());
                drop(g);
            }
            other => panic!("H resolves once woken: {:?}", other.map(|r| r.map(|_| ()).map_err(|e| e.error))),
        }
        all_released_once(&[r0, rh, r1, r2], "blocking waker");
        assert_eq!(violations(), before);
    });
}

struct BlockingWake(Box<dyn Fn() + Send + Sync>);
impl Wake for BlockingWake {
    fn wake(self: Arc<Self>) {
        (self.0)();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        (self.0)();
    }
}

/// A waker that, inside the driver's dispatch, drops the runtime's other futures (aborting
/// their tasks) and starts new ones on the same CQ, which must be served too.
#[test]
fn a_waker_reentering_from_the_driver_aborts_tasks_and_spawns_new_waiters() {
    bounded(30, || {
        let before = violations();
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0xa70, 1024, &cq, None);
        let rt = mt(2);
        let handle = rt.handle().clone();
        let victims: Vec<_> = (0..4).map(|k| guarded(&qp, 0xa70, k % 2 == 0)).collect();
        let mut vreqs = Vec::new();
        let mut vhandles = Vec::new();
        for (t, r) in victims {
            vhandles.push(rt.spawn(t.into_future()));
            vreqs.push(r);
        }
        let aborts: Vec<_> = vhandles.iter().map(|h| h.abort_handle()).collect();
        let spawned = Arc::new(Mutex::new(Vec::new()));
        let new_reqs = Arc::new(Mutex::new(Vec::new()));
        let (sp, nr, qp2) = (Arc::clone(&spawned), Arc::clone(&new_reqs), Arc::clone(&qp));
        let once = AtomicBool::new(false);
        let hw = Waker::from(Arc::new(BlockingWake(Box::new(move || {
            if once.swap(true, SeqCst) {
                return;
            }
            for a in &aborts {
                a.abort();
            }
            for k in 0..4 {
                let (t, r) = guarded(&qp2, 0xa70, k % 2 == 1);
                sp.lock().unwrap().push(handle.spawn(t.into_future()));
                nr.lock().unwrap().push(r);
            }
        }))));
        let (th, rh) = guarded(&qp, 0xa70, true);
        let mut h = th.into_future();
        let enter = rt.enter();
        assert!(gpoll(&mut h, &hw).is_pending());
        drop(enter);
        std::thread::sleep(Duration::from_millis(20));
        rh.complete(fake, sys::IBV_WC_SUCCESS);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while new_reqs.lock().unwrap().len() < 4 {
            assert!(std::time::Instant::now() < until, "H's waker never ran");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(20));
        // The device completes the victims and the new ones, in posting order per queue.
        let mut sends: Vec<Req> =
            vreqs.iter().chain(new_reqs.lock().unwrap().iter()).filter(|r| !r.recv).cloned().collect();
        let mut recvs: Vec<Req> =
            vreqs.iter().chain(new_reqs.lock().unwrap().iter()).filter(|r| r.recv).cloned().collect();
        sends.sort_by_key(|r| r.seq);
        recvs.sort_by_key(|r| r.seq);
        for r in sends.iter().chain(recvs.iter()) {
            r.complete(fake, sys::IBV_WC_SUCCESS);
        }
        let hs: Vec<_> = std::mem::take(&mut *spawned.lock().unwrap());
        let ok = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), async {
                for h in hs {
                    let (c, g) = h.await.unwrap().map_err(|e| e.error).unwrap();
                    assert!(c.is_success());
                    drop(g);
                }
            })
            .await
        });
        assert!(ok.is_ok(), "futures started inside a waker run by the driver were never served");
        match gpoll(&mut h, &hw) {
            Poll::Ready(Ok((_, g))) => drop(g),
            other => panic!("H: {:?}", other.map(|r| r.map(|_| ()).map_err(|e| e.error))),
        }
        for vh in vhandles {
            let _ = rt.block_on(vh);
        }
        cq.poll_and_route().unwrap();
        let mut all = vreqs;
        all.extend(new_reqs.lock().unwrap().iter().cloned());
        all.push(rh);
        all_released_once(&all, "re-entering waker");
        assert_eq!(violations(), before);
    });
}

// ---------------------------------------------------------------------------------------------
// 6. A channel and its last CQ dropped while the driver task runs and futures wait.
// ---------------------------------------------------------------------------------------------

/// A completion channel of its own (a pipe), with a reference count at the C level that makes
/// `ibv_destroy_comp_channel` refuse (EBUSY) rather than free the fake: the Rust side is dropped
/// for real (`ChannelShared::drop`).
fn own_channel(w: &'static World) -> (CompChannel, *mut sys::ibv_comp_channel, i32) {
    let [read, write] = pipe();
    let (ch, chp) = w.fake_channel(read, read);
    (ch, chp, write)
}

/// A CQ on [`own_channel`]'s channel, whose last `Arc` destroys it (`FAKE_VERBS`' destroy).
fn own_cq(
    w: &'static World,
    ch: &CompChannel,
    chp: *mut sys::ibv_comp_channel,
    write_fd: i32,
) -> (Arc<CqShared>, &'static FakeCq) {
    w.fake_cq_on(ch, chp, write_fd, 1 << 20)
}

/// Futures wait on the only CQ of a channel served by tokio drivers (two runtimes); the program
/// drops its channel and CQ handles (the futures' QP keeps them); the futures resolve; then the
/// QP and the last futures go, the CQ and the channel with them, while the drivers idle: the
/// drivers end (their guards run), nothing hangs or panics, and the runtimes shut down cleanly.
/// Then a channel dropped while its driver is mid-dispatch (the dispatch holds the last handle).
#[test]
fn a_channel_and_its_last_cq_dropped_under_running_drivers() {
    bounded(30, || {
        let before = violations();
        let w = World::new();
        let (ch, chp, wfd) = own_channel(w);
        let (cq, fake) = own_cq(w, &ch, chp, wfd);
        let weak_ch = Arc::downgrade(ch.shared());
        let weak_cq = Arc::downgrade(&cq);
        let qp = QpShared::fake(w.raw_qp(0xa80), 0xa80, 256, &cq, Arc::clone(&w.pd), None);
        drop(cq);
        let (a, b) = (mt(1), mt(1));
        let mut reqs = Vec::new();
        let mut hs = Vec::new();
        for k in 0..6 {
            let (t, r) = guarded(&qp, 0xa80, k % 2 == 0);
            let rt = if k % 2 == 0 { &a } else { &b };
            hs.push(rt.spawn(t.into_future()));
            reqs.push(r);
        }
        std::thread::sleep(Duration::from_millis(30));
        drop(ch);
        assert!(weak_ch.upgrade().is_some(), "the CQ keeps the channel");
        for r in &reqs {
            r.complete(fake, sys::IBV_WC_SUCCESS);
        }
        for h in hs {
            let rt = &a;
            let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(3), h).await });
            let (c, g) =
                got.expect("served after the program dropped its handles").unwrap().map_err(|e| e.error).unwrap();
            assert!(c.is_success());
            drop(g);
        }
        // One more pair, left waiting, then dropped with the QP: the CQ and channel go.
        let (t, r) = guarded(&qp, 0xa80, false);
        let h = a.spawn(t.into_future());
        std::thread::sleep(Duration::from_millis(20));
        h.abort();
        let _ = a.block_on(h);
        // The parked buffer stays with the QP while it lives.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(r.drops.load(SeqCst), 0, "released while the QP lives and the device did not finish");
        // Destroying the QP ends the device's use of its requests (the fake's destroy
        // succeeds): the parked buffer is released then, with the QP; the CQ and the channel go.
        r.done.store(true, SeqCst);
        drop(qp);
        assert!(weak_cq.upgrade().is_none(), "the CQ went with its last QP");
        reqs.push(r);
        all_released_once(&reqs, "channel dropped");
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while weak_ch.upgrade().is_some() {
            assert!(std::time::Instant::now() < until, "the channel was never dropped (something keeps it)");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The drivers end (woken by the drop): the runtimes shut down without waiting.
        a.shutdown_timeout(Duration::from_secs(2));
        b.shutdown_timeout(Duration::from_secs(2));
        assert_eq!(violations(), before);
    });
}

// ---------------------------------------------------------------------------------------------
// 7. Async device events read by two tasks, cancelled by timeouts.
// ---------------------------------------------------------------------------------------------

/// Two readers of the same context's events, each awaited in a loop under short timeouts
/// (cancelled at every point), on a multi-threaded runtime, while events are injected: every
/// event reaches exactly one reader; none is lost to a cancelled wait.
#[test]
fn two_event_readers_cancelled_by_timeouts_lose_and_duplicate_nothing() {
    bounded(60, || {
        let (w, wfd) = world_with_events();
        let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
        let rt = mt(2);
        const N: u64 = 400;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut hs = Vec::new();
        for reader in 0..2u64 {
            let mut events = ctx.async_events().unwrap();
            let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
            hs.push(rt.spawn(async move {
                let mut rng = Lcg(reader + 11);
                loop {
                    let d = Duration::from_micros(rng.next() % 200);
                    match tokio::time::timeout(d, events.next()).await {
                        Ok(Ok(crate::event::AsyncEvent::PortActive { port })) => seen.lock().unwrap().push(port),
                        Ok(Ok(e)) => panic!("unexpected {e:?}"),
                        Ok(Err(e)) => panic!("{e}"),
                        Err(_) => {
                            if stop.load(SeqCst) {
                                break;
                            }
                        }
                    }
                }
            }));
        }
        for i in 0..N {
            // Ports 1..=N as u8 wrap: the port is the element's low byte; count them.
            while !try_inject_event(wfd, 1 + (i % 200), sys::IBV_EVENT_PORT_ACTIVE) {
                std::thread::sleep(Duration::from_micros(100));
            }
            if i % 7 == 0 {
                std::thread::sleep(Duration::from_micros(150));
            }
        }
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while (seen.lock().unwrap().len() as u64) < N {
            assert!(std::time::Instant::now() < until, "events lost: {} of {N}", seen.lock().unwrap().len());
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, SeqCst);
        for h in hs {
            rt.block_on(h).unwrap();
        }
        assert_eq!(seen.lock().unwrap().len() as u64, N, "an event read twice");
    });
}

/// A waker that runs a nested executor: F, polled by hand on a plain thread T, is woken by the
/// program's `dispatch` on T; its waker runs a current-thread runtime's `block_on` on another
/// thread and joins it, awaiting G, whose completion lands while it runs: G's completion is
/// routed by that runtime's own driver task and G is woken, while T is still inside the
/// outer `dispatch`'s wake. (Run inline on T, the nested runtime would wait for ever for G's
/// wake, which its thread delivers only once F's waker returns: the module documentation of
/// `owned` says so.)
#[test]
fn a_waker_running_a_nested_runtime_on_another_thread_sees_its_futures_woken() {
    assert_eq!(nested_runtime_in_a_waker(), Some("resolved"), "the nested runtime on another thread");
}

fn nested_runtime_in_a_waker() -> Option<&'static str> {
    bounded(30, move || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0xa90, 256, &cq, None);
        let (tg, rg) = guarded(&qp, 0xa90, false);
        let g = Mutex::new(Some(tg));
        let outcome = Arc::new(Mutex::new(None::<&'static str>));
        let out2 = Arc::clone(&outcome);
        let rg2 = rg.clone();
        let fw = Waker::from(Arc::new(BlockingWake(Box::new(move || {
            let Some(tg) = g.lock().unwrap().take() else { return };
            let rg = rg2.clone();
            let run = move || {
                ct().block_on(async move {
                    let h = tokio::spawn(tg.into_future());
                    tokio::task::yield_now().await;
                    // The device completes G from another thread, while this block_on runs.
                    let dev = std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(50));
                        rg.complete(fake, sys::IBV_WC_SUCCESS);
                    });
                    let r = tokio::time::timeout(Duration::from_secs(2), h).await;
                    dev.join().unwrap();
                    r
                })
            };
            let r = std::thread::spawn(run).join().unwrap();
            *out2.lock().unwrap() = Some(match r {
                Ok(Ok(Ok(_))) => "resolved",
                Ok(_) => "failed",
                Err(_) => "timed out: G never woken",
            });
        }))));
        let (tf, rf) = guarded(&qp, 0xa90, true);
        let mut f = tf.into_future();
        assert!(gpoll(&mut f, &fw).is_pending());
        rf.complete(fake, sys::IBV_WC_SUCCESS);
        // The program's dispatch on this thread runs F's waker (after its locks are released).
        let d = w.ch.dispatch().unwrap();
        assert_eq!(d.completions, 1);
        let got = *outcome.lock().unwrap();
        assert!(matches!(gpoll(&mut f, &fw), Poll::Ready(Ok(_))));
        got
    })
}
