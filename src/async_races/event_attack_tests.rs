//! Hostile programs against the asynchronous event path (`src/event.rs`) over the fake device:
//! events injected into the fake context's `async_fd` (a pipe), read through the real
//! `ibv_get_async_event` / `ibv_ack_async_event`.
use super::*;
use crate::event::{AsyncEvent, HandleId};

/// CQ_ERR naming one of two CQs: only the QPs completing on it are broken, the event comes out
/// with the CQ's identity, and a second reader on another thread sees nothing twice.
#[test]
fn a_cq_error_breaks_only_the_qps_of_the_named_cq() {
    let (w, wfd) = world_with_events();
    let (cq1, f1) = w.cq();
    let (cq2, _) = w.cq();
    // The fake CQs are not registered with the context (only `create_cq_on` does): register.
    w.ctx.cqs.lock().unwrap().extend([Arc::downgrade(&cq1), Arc::downgrade(&cq2)]);
    let q1 = w.qp(0x61, 8, &cq1, None);
    let q2 = w.qp(0x62, 8, &cq2, None);
    let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
    inject_event(wfd, f1.raw as u64, sys::IBV_EVENT_CQ_ERR);
    let ev = ctx.next_async_event(Duration::from_secs(1)).unwrap();
    assert_eq!(ev, AsyncEvent::CqError { cq: HandleId::of(f1.raw) });
    assert!(q1.check_usable().is_err(), "the QP on the failed CQ is broken");
    assert!(q2.check_usable().is_ok(), "the QP on the other CQ is not");
    assert!(matches!(ctx.next_async_event(Duration::ZERO), Err(crate::Error::Timeout { .. })));
}

/// A CQ_ERR whose CQ's last handle is dropped on another thread while events are read: the
/// reader holds the CQ until after the acknowledgement (no destroy in between), then drops it.
#[test]
fn a_cq_error_read_while_the_cq_and_its_qp_are_dropped_on_another_thread() {
    for i in 0..200u32 {
        let (w, wfd) = world_with_events();
        let (cq, f) = w.droppable_cq();
        w.ctx.cqs.lock().unwrap().push(Arc::downgrade(&cq));
        let raw = f.raw as u64;
        let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
        inject_event(wfd, raw, sys::IBV_EVENT_CQ_ERR);
        std::thread::scope(|s| {
            let r = s.spawn(|| ctx.next_async_event(Duration::from_secs(2)));
            s.spawn(move || drop(cq));
            let ev = r.join().unwrap().unwrap();
            assert_eq!(ev.name(), "IBV_EVENT_CQ_ERR", "round {i}");
        });
    }
}

/// Many events, four readers on four threads (two `AsyncEvents`, one shared `&AsyncEvents`
/// used from two threads, and `next_async_event`): every event read exactly once.
#[test]
fn events_read_from_four_threads_each_reach_exactly_one_reader() {
    let (w, wfd) = world_with_events();
    let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
    let a = ctx.async_events().unwrap();
    let b = ctx.async_events().unwrap();
    const N: u64 = 2000;
    let got = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for r in [&a, &a, &b] {
            let (got, done) = (&got, &done);
            s.spawn(move || {
                while !done.load(SeqCst) {
                    if let Some(ev) = r.try_next_event().unwrap() {
                        got.lock().unwrap().push(ev.port().unwrap() as u64 | (ev.name().len() as u64) << 8);
                    } else {
                        std::thread::yield_now();
                    }
                }
            });
        }
        let (got2, done2, ctx2) = (&got, &done, &ctx);
        s.spawn(move || {
            while !done2.load(SeqCst) {
                if let Ok(ev) = ctx2.next_async_event(Duration::from_millis(5)) {
                    got2.lock().unwrap().push(ev.port().unwrap() as u64 | (ev.name().len() as u64) << 8);
                }
            }
        });
        for i in 0..N {
            // Port numbers 1..=200 cycle; PORT_ACTIVE / PORT_ERR alternate.
            let t = if i % 2 == 0 { sys::IBV_EVENT_PORT_ACTIVE } else { sys::IBV_EVENT_PORT_ERR };
            while !try_inject_event(wfd, 1 + i % 200, t) {
                std::thread::yield_now();
            }
        }
        let start = std::time::Instant::now();
        while got.lock().unwrap().len() < N as usize && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        done.store(true, SeqCst);
    });
    let mut got = got.into_inner().unwrap();
    let mut sent: Vec<u64> = (0..N)
        .map(|i| {
            let name = if i % 2 == 0 { "IBV_EVENT_PORT_ACTIVE" } else { "IBV_EVENT_PORT_ERR" };
            (1 + i % 200) | (name.len() as u64) << 8
        })
        .collect();
    got.sort_unstable();
    sent.sort_unstable();
    assert!(got == sent, "each event read exactly once: {} read, {} sent", got.len(), sent.len());
}
