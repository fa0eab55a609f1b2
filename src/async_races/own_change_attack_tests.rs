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

/// An awaited channel wait polled once by one runtime (registered with its reactor, waiting on
/// both read and write readiness) and then moved to another (the first shut down): the second
/// runtime's poll registers the descriptor again and is woken when the descriptor starts to
/// report only an error, and the wait fails typed. Before that, the descriptor (a pipe's write
/// end, writable for real: its write readiness is never asked for) keeps it waiting.
#[cfg(feature = "tokio")]
#[test]
fn an_awaited_wait_moved_to_another_runtime_is_woken_there_by_its_descriptors_error() {
    use super::cm_channel_attack_tests::channel_erroring_later;
    let w = World::new();
    let (ch, read_end) = channel_erroring_later(w);
    let mut fut: std::pin::Pin<Box<dyn std::future::Future<Output = crate::Result<()>> + Send>> =
        Box::pin(async move { ch.wait_async().await.map(|_| ()) });
    let first = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let polled = first.block_on(std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_pending())));
    assert!(polled, "nothing to read: waiting");
    drop(first);
    let second = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let h = second.spawn(fut);
    std::thread::sleep(Duration::from_millis(100));
    assert!(!h.is_finished(), "a writable descriptor that reports no error: still waiting");
    close(read_end);
    let got = second.block_on(async { tokio::time::timeout(Duration::from_secs(2), h).await });
    assert!(matches!(got, Ok(Ok(Err(crate::Error::Verb { .. })))), "{got:?}");
}

/// A completion channel as a disassociated device leaves it: its descriptor reports only an
/// error (`EPOLLERR` without `EPOLLIN`: here a pipe's write end whose read end is closed) and
/// `ibv_get_cq_event` fails (the kernel's uverbs read returns EIO once the queue is closed,
/// non-blocking or not; here the fake reads another pipe's write end: EBADF). Returns the
/// channel, its C object and that write end (where the fake CQs write their events, never read).
#[cfg(feature = "tokio")]
fn disassociated_channel(w: &'static World) -> (CompChannel, *mut sys::ibv_comp_channel, i32) {
    let (polled, read) = (pipe(), pipe());
    close(polled[0]);
    let (ch, chp) = w.fake_channel(read[1], polled[1]);
    std::mem::forget(ch.clone());
    (ch, chp, read[1])
}

/// A future waiting on a CQ of a disassociated device's channel, under a running runtime: the
/// driver task's read without readiness fails, and with the descriptor reporting an error it
/// then serves only the CQs handed on to it and waits, so no failed read ends it and wakes the
/// future to start the next one (which read the channel at its first poll, failed and woke it
/// again: the two tasks ran without pause). The
/// future is polled a few times, not thousands; the program's own `dispatch` still reports the
/// failed read.
#[cfg(feature = "tokio")]
#[test]
fn a_future_on_a_disassociated_channel_is_not_polled_without_pause() {
    let w = World::new();
    let (ch, chp, other) = disassociated_channel(w);
    let (cq, fake) = w.fake_cq_on(&ch, chp, other, 1 << 20);
    std::mem::forget(Arc::clone(&cq));
    let qp = w.qp(0x9d04, 16, &cq, None);
    let mut f = post_send(&qp, true).into_future();
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&polls);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let h = rt.spawn(std::future::poll_fn(move |cx| {
        counted.fetch_add(1, SeqCst);
        std::pin::Pin::new(&mut f).poll(cx).map(|r| r.map(|_| ()).map_err(|e| e.error))
    }));
    std::thread::sleep(Duration::from_millis(300));
    let polled = polls.load(SeqCst);
    assert!(!h.is_finished(), "nothing completed");
    assert!(polled < 20, "polled {polled} times in 300 ms with nothing to do");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(polls.load(SeqCst), polled, "not polled again while nothing happens");
    // A program's own dispatch reports the failed read.
    assert!(ch.dispatch().is_err(), "the channel's read fails");
    h.abort();
    drop(rt);
    let _ = fake;
}

/// The driver of a disassociated device's channel reads no event (its read fails), but still
/// serves the CQs the futures handed on to it: a future whose poll served a bounded number of
/// completions and resolved leaves the rest to the driver (no event announces them), and
/// another future waiting for one of them resolves.
#[cfg(feature = "tokio")]
#[test]
fn the_driver_of_a_disassociated_channel_still_serves_the_cqs_handed_to_it() {
    let w = World::new();
    let (ch, chp, other) = disassociated_channel(w);
    let (cq, fake) = w.fake_cq_on(&ch, chp, other, 1 << 20);
    std::mem::forget(Arc::clone(&cq));
    let qp = w.qp(0x9d05, 256, &cq, None);
    let mut tokens: Vec<_> = (0..100).map(|_| post_send(&qp, true)).collect();
    let last = tokens.pop().unwrap().into_future();
    let middle = tokens.remove(50).into_future();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    // The last request's future waits (nothing completed yet).
    let waiting = rt.spawn(async move { last.await.map(|_| ()).map_err(|e| e.error.to_string()) });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiting.is_finished());
    for seq in 0..100 {
        fake.complete(send_wc(0x9d05, seq, sys::IBV_WC_SUCCESS));
    }
    // The middle one's future serves the CQ up to its own completion and resolves; the rest is
    // the driver's.
    let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), middle).await });
    assert!(matches!(got, Ok(Ok(_))), "the middle request");
    let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), waiting).await });
    assert!(matches!(got, Ok(Ok(Ok(())))), "the last request, served by the driver: {got:?}");
    drop(tokens);
    drop(rt);
}
