//! Hostile programs against awaited owned tokens (`OwnedCompletion`): futures forgotten after
//! they registered their waker, dropped on another thread while the driver task routes their
//! completions, re-polled with another waker or moved to another task, polled after they
//! resolved, left waiting across a QP reset or a move to ERR, waiting on one runtime while the
//! channel's driver task belongs to another runtime that is not running, an SRQ receive whose
//! completion lands on a CQ attached after the future started waiting, a runtime without I/O
//! (a typed error, the token back), a waker whose drop panics, and a
//! hand-written executor whose waker polls the future inline, a waker that panics when a
//! scope's drain routes its future's completion, and one that panics in the channel's driver
//! task. Every buffer that comes
//! back holds its message (it came back after its completion); every buffer that did not is
//! read back over RDMA from its region, and holds the late message (the device wrote memory
//! the library still kept). Every wait is bounded: a hang fails the test.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tokio::time::{sleep, timeout};
use typed_verbs::mr::Chunk;
use typed_verbs::owned::OwnedCompletion;
use typed_verbs::prelude::*;

use crate::async_owned::{async_rig, chunks, message, read_back, runtimes, send_sync, until_unparked, AsyncRig, Rx};
use crate::common::*;

/// Runs `f` on a thread of its own and waits at most `bound` for it: a hang fails the test
/// (the thread is left behind).
fn bounded<R: Send + 'static>(what: &str, bound: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(bound) {
        Ok(r) => r,
        Err(e) => panic!("{what}: did not finish within {bound:?} ({e})"),
    }
}

/// Futures polled once (so their waker is registered, their CQ armed and a driver task
/// started) and then `mem::forget`-ten: their buffers are never handed back nor freed, the
/// late messages land in them (read back over RDMA), the QP keeps serving other futures on
/// the same and on a new runtime, and dropping the runtime and every handle neither hangs nor
/// frees anything the device writes.
#[test]
fn forgotten_waiting_futures_leak_their_buffers_and_the_channel_keeps_serving() {
    const N: usize = 8;
    for (name, rt) in runtimes() {
        let r = async_rig();
        let mut region = chunks(&r.pd, N + 1, 64);
        let keep = region.pop().unwrap();
        let remotes: Vec<_> = region.iter().map(|c| c.remote()).collect();
        rt.block_on(async {
            for mut c in region {
                c.as_mut_slice().fill(0xEE);
                let t = r.pair.b.post_recv_owned(wr::Recv::new(c)).unwrap();
                let mut fut = t.into_future();
                std::future::poll_fn(|cx| {
                    assert!(Pin::new(&mut fut).poll(cx).is_pending(), "{name}: nothing was sent");
                    Poll::Ready(())
                })
                .await;
                std::mem::forget(fut);
            }
        });
        let alive = rt.metrics().num_alive_tasks();
        eprintln!("{name}: tasks alive after {N} forgotten futures: {alive}");
        assert_eq!(r.pair.b.parked_buffers(), 0, "{name}: forgotten, not parked");
        for i in 0..N {
            send_sync(&r.pd, &r.pair.a, &[i as u8 + 1; 16]);
        }
        // Let the driver task serve the completions of the forgotten futures.
        rt.block_on(async { sleep(Duration::from_millis(50)).await });
        r.cq_b.progress().unwrap();
        for (i, remote) in remotes.iter().enumerate() {
            let got = read_back(&r.pd, &r.pair.a, *remote, 64);
            assert!(got[..16].iter().all(|&b| b == i as u8 + 1), "{name}: message {i} landed elsewhere: {got:?}");
            assert!(got[16..].iter().all(|&b| b == 0xEE), "{name}: receive {i} written past the message");
        }
        // The same QP and channel still serve an awaited receive, on this runtime...
        rt.block_on(async {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            let waiting = tokio::spawn(t.into_future());
            sleep(Duration::from_millis(20)).await;
            send_sync(&r.pd, &r.pair.a, b"after the forgotten");
            let (c, buf) = timeout(WAIT, waiting).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..19], b"after the forgotten", "{name}");
        });
        // ... and, once it is dropped (its driver task with it), on a new one.
        bounded("dropping the runtime", WAIT, move || drop(rt));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            let waiting = tokio::spawn(t.into_future());
            sleep(Duration::from_millis(20)).await;
            send_sync(&r.pd, &r.pair.a, b"new runtime");
            let (c, buf) = timeout(WAIT, waiting).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..11], b"new runtime", "{name}");
        });
        // Every handle dropped: the forgotten tokens keep the QP (and so the CQ, the channel
        // and the context) alive; nothing hangs.
        bounded("dropping the rig", WAIT, move || drop((r, keep, rt)));
    }
}

/// One receive future, shared between the task that polls it and a thread that drops it.
struct Shared {
    fut: Mutex<Option<OwnedCompletion<Chunk<Rx>>>>,
    waker: Mutex<Option<Waker>>,
}

/// On a multi-threaded runtime, each of many receives is awaited by a task while a thread
/// sends its message and another thread drops the future at a different moment each time
/// (before its first poll, waiting, while the driver task routes its completion, or after it
/// was woken; the first is let resolve and the second dropped before its message is sent, so
/// both outcomes occur): a buffer that came back through the future holds its message (it came
/// back only after its completion); whenever a future is dropped, every receive outstanding
/// holds its buffer with the queue; the buffer of every dropped future was kept until the
/// message landed in it (read back over RDMA).
#[test]
fn futures_dropped_on_another_thread_while_the_driver_routes_their_completions() {
    const N: usize = 48;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let r = Arc::new(async_rig());
    let mut region = chunks(&r.pd, N + 1, 64);
    let keep = region.pop().unwrap();
    let remotes: Vec<_> = region.iter().map(|c| c.remote()).collect();
    let (mut came_back, mut dropped) = (0, Vec::new());
    for (i, mut c) in region.into_iter().enumerate() {
        c.as_mut_slice().fill(0xEE);
        let t = r.pair.b.post_recv_owned(wr::Recv::new(c)).unwrap();
        let shared = Arc::new(Shared { fut: Mutex::new(Some(t.into_future())), waker: Mutex::new(None) });
        let task = {
            let shared = Arc::clone(&shared);
            rt.spawn(std::future::poll_fn(move |cx| {
                *shared.waker.lock().unwrap() = Some(cx.waker().clone());
                let mut slot = shared.fut.lock().unwrap();
                let Some(fut) = slot.as_mut() else { return Poll::Ready(None) };
                match Pin::new(fut).poll(cx) {
                    Poll::Ready(got) => {
                        *slot = None;
                        Poll::Ready(Some(got))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }))
        };
        let dropper = {
            let shared = Arc::clone(&shared);
            let r = Arc::clone(&r);
            std::thread::spawn(move || {
                if i == 0 {
                    // The first future is let resolve before the drop comes (the other outcome
                    // is forced for the second: dropped before its message is sent).
                    let start = Instant::now();
                    while shared.fut.lock().unwrap().is_some() {
                        assert!(start.elapsed() < WAIT, "the first future never resolved");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                } else {
                    std::thread::sleep(Duration::from_micros((i as u64 * 97) % 3000));
                }
                let fut = shared.fut.lock().unwrap().take();
                // Dropped here, on this thread, outside the slot's lock.
                drop(fut);
                // No future of b's receives is left: each receive still outstanding holds its
                // buffer with the queue (read in this order: a completion meanwhile releases a
                // buffer only after its receive is complete).
                let parked = r.pair.b.parked_buffers();
                let in_flight = r.pair.b.outstanding().1 as usize;
                assert!(parked >= in_flight, "{i}: {in_flight} receives outstanding, {parked} buffers held");
                if let Some(w) = shared.waker.lock().unwrap().take() {
                    w.wake();
                }
            })
        };
        let mut dropper = Some(dropper);
        if i == 1 {
            dropper.take().unwrap().join().unwrap();
        }
        let sender = {
            let r = Arc::clone(&r);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros((i as u64 * 53) % 2000));
                send_sync(&r.pd, &r.pair.a, &[i as u8 + 1; 16]);
            })
        };
        if let Some(dropper) = dropper {
            dropper.join().unwrap();
        }
        sender.join().unwrap();
        match rt.block_on(async { timeout(WAIT, task).await }).expect("bounded").unwrap() {
            Some(got) => {
                let (c, buf) = got.map_err(|e| e.error).unwrap();
                assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 16), "{i}: {c:?}");
                assert!(buf.as_slice()[..16].iter().all(|&b| b == i as u8 + 1), "{i}: came back before its message");
                came_back += 1;
            }
            None => dropped.push(i),
        }
    }
    until_unparked(&r.pair.b, &r.cq_b);
    for &i in &dropped {
        let got = read_back(&r.pd, &r.pair.a, remotes[i], 64);
        assert!(got[..16].iter().all(|&b| b == i as u8 + 1), "{i}: the late message did not land in the kept buffer");
        assert!(got[16..].iter().all(|&b| b == 0xEE), "{i}");
    }
    eprintln!("{came_back} came back through their futures, {} dropped", dropped.len());
    assert!(came_back > 0 && !dropped.is_empty(), "both outcomes: {came_back} came back, {} dropped", dropped.len());
    drop((keep, rt));
}

/// A future polled with one waker and then with another: the completion wakes the latest
/// only. A future polled in one task and moved to another: the second task is woken.
#[test]
fn a_future_repolled_with_another_waker_or_moved_to_another_task_wakes_the_latest() {
    for (name, rt) in runtimes() {
        let r = async_rig();
        let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
        let mut fut = t.into_future();
        let (first, w1) = count_waker();
        let (second, w2) = count_waker();
        // Polled inside the runtime: a driver task serves the channel.
        rt.block_on(async {
            assert!(poll_with(&mut fut, &w1).is_pending(), "{name}");
            assert!(poll_with(&mut fut, &w2).is_pending(), "{name}");
        });
        send_sync(&r.pd, &r.pair.a, b"for the latest");
        rt.block_on(async {
            let start = Instant::now();
            while second.wakes() == 0 {
                assert!(start.elapsed() < WAIT, "{name}: the latest waker was not woken");
                sleep(Duration::from_millis(5)).await;
            }
        });
        assert_eq!(first.wakes(), 0, "{name}: a replaced waker was woken");
        match poll_with(&mut fut, &w2) {
            Poll::Ready(got) => {
                let (c, buf) = got.map_err(|e| e.error).unwrap();
                assert!(c.is_success(), "{name}: {c:?}");
                assert_eq!(&buf.as_slice()[..14], b"for the latest", "{name}");
            }
            Poll::Pending => panic!("{name}: woken but not ready"),
        }
        // Moved from one task to another while waiting.
        rt.block_on(async {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            #[allow(clippy::async_yields_async)] // the waiting future is moved to another task
            let first = tokio::spawn(async move {
                let mut fut = t.into_future();
                tokio::select! {
                    biased;
                    got = &mut fut => panic!("nothing was sent, yet {got:?}"),
                    _ = sleep(Duration::from_millis(20)) => {}
                }
                fut
            });
            let fut = timeout(WAIT, first).await.expect("bounded").unwrap();
            let second = tokio::spawn(fut);
            sleep(Duration::from_millis(20)).await;
            send_sync(&r.pd, &r.pair.a, b"moved");
            let (c, buf) =
                timeout(WAIT, second).await.expect("the second task was woken").unwrap().map_err(|e| e.error).unwrap();
            assert!(c.is_success(), "{name}: {c:?}");
            assert_eq!(&buf.as_slice()[..5], b"moved", "{name}");
        });
    }
}

/// A panic's message (`&str` or `String` payload).
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => {
            payload.downcast_ref::<&str>().map_or_else(|| "<not a message>".to_owned(), |s| (*s).to_owned())
        }
    }
}

/// Polled after it resolved (to a completion, or to an error with the token): a clean panic
/// naming the misuse; the token that came back with the error is still good.
#[test]
fn a_future_polled_after_it_resolved_panics_cleanly() {
    let r = async_rig();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (_, w) = count_waker();
    let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
    send_sync(&r.pd, &r.pair.a, b"once");
    let mut fut = t.into_future();
    let got = rt.block_on(async { poll_with(&mut fut, &w) });
    assert!(matches!(&got, Poll::Ready(Ok((c, _))) if c.is_success()), "{got:?}");
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_with(&mut fut, &w)));
    assert_eq!(panic_message(again.expect_err("a second poll panics")), "OwnedCompletion polled after it resolved");
    drop(fut);
    // Resolved to an error (no channel on its CQ), then polled again.
    let Rig { _ctx, pd, cq } = rig();
    let pair = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let t = pair.b.post_recv_owned(wr::Recv::new(chunks(&pd, 1, 64).remove(0))).unwrap();
    let mut fut = t.into_future();
    let token = match poll_with(&mut fut, &w) {
        Poll::Ready(Err(e)) => {
            assert!(matches!(e.error, Error::NoCompletionChannel { .. }), "{:?}", e.error);
            e.token
        }
        other => panic!("{other:?}"),
    };
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_with(&mut fut, &w)));
    assert_eq!(
        panic_message(again.expect_err("a poll after the error panics")),
        "OwnedCompletion polled after it resolved"
    );
    drop(fut);
    send_sync(&pd, &pair.a, b"still good");
    let (c, buf) = token.wait(WAIT).map_err(|e| e.error).unwrap();
    assert!(c.is_success(), "{c:?}");
    assert_eq!(&buf.as_slice()[..10], b"still good");
}

/// Receives awaited while their QP is reset (`Qp::reset`) or moved to ERR: every future
/// resolves (a flush), with its buffer untouched; a send waiting for the acknowledgement of a
/// peer that was reset resolves when its own QP is reset.
#[test]
fn futures_waiting_across_a_reset_or_a_move_to_err_resolve_with_their_buffers_untouched() {
    const N: usize = 8;
    for (name, rt) in runtimes() {
        for to_err in [false, true] {
            let r = async_rig();
            let AsyncRig { ctx, pd, ch, cq_a, cq_b, pair } = r;
            let RcPair { a, b } = pair;
            let tasks: Vec<_> = (0..N)
                .map(|_| {
                    let mut c = chunks(&pd, 1, 64).remove(0);
                    c.as_mut_slice().fill(0xEE);
                    rt.spawn(b.post_recv_owned(wr::Recv::new(c)).unwrap().into_future())
                })
                .collect();
            rt.block_on(async { sleep(Duration::from_millis(30)).await });
            let b = if to_err {
                let b = b.to_error().map_err(|e| e.error).unwrap();
                drop(b);
                None
            } else {
                Some(b.reset().map_err(|e| e.error).unwrap())
            };
            rt.block_on(async {
                for t in tasks {
                    let got = timeout(WAIT, t).await.expect("a waiting future resolves after the reset").unwrap();
                    let (c, buf) = got.map_err(|e| e.error).unwrap();
                    assert_eq!(c.status(), WcStatus::WrFlushErr, "{name} (to_err {to_err}): {c:?}");
                    assert!(buf.as_slice().iter().all(|&x| x == 0xEE), "{name}: a flushed buffer was written");
                }
            });
            if let Some(b) = b {
                // A send to the reset peer is never acknowledged; it waits until its own QP
                // is reset.
                let t = a.post_send_owned(wr::Send::new(message(&pd, b"into the void"))).unwrap();
                let task = rt.spawn(t.into_future());
                rt.block_on(async { sleep(Duration::from_millis(30)).await });
                let _a = a.reset().map_err(|e| e.error).unwrap();
                let got = rt.block_on(async { timeout(WAIT, task).await }).expect("bounded").unwrap();
                let (c, buf) = got.map_err(|e| e.error).unwrap();
                assert!(matches!(c.status(), WcStatus::WrFlushErr | WcStatus::RetryExcErr), "{name}: {c:?}");
                assert_eq!(buf.as_slice(), b"into the void", "{name}");
                drop(b);
            }
            drop((cq_a, cq_b, ch, pd, ctx));
        }
    }
}

/// A current-thread runtime that is not running (its `block_on` returned) holds a task whose
/// future waits on the channel, so the channel's driver task belongs to it. A future awaited
/// on another runtime must still be served when its completion arrives.
#[test]
fn a_future_on_one_runtime_is_served_while_the_channels_driver_belongs_to_an_idle_runtime() {
    for (name, rt_b) in runtimes() {
        let r = async_rig();
        let rt_a = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // A receive of QP a (on CQ a, nothing is sent to a): the channel's first waiter.
        let parked = r.pair.a.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
        let _holder = rt_a.spawn(parked.into_future());
        // The task runs (its future waits, a driver task on `rt_a` starts), then `rt_a` idles.
        rt_a.block_on(async { sleep(Duration::from_millis(30)).await });
        // On the other runtime: a receive of QP b (on CQ b, the same channel) awaited, whose
        // message arrives after it waits.
        let got = rt_b.block_on(async {
            let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
            let waiting = tokio::spawn(t.into_future());
            sleep(Duration::from_millis(50)).await;
            send_sync(&r.pd, &r.pair.a, b"served?");
            timeout(Duration::from_secs(5), waiting).await
        });
        let (c, buf) = got
            .unwrap_or_else(|_| panic!("{name}: the future hung: the driver task belongs to the idle runtime"))
            .unwrap()
            .map_err(|e| e.error)
            .unwrap();
        assert!(c.is_success(), "{name}: {c:?}");
        assert_eq!(&buf.as_slice()[..7], b"served?", "{name}");
        drop(rt_a);
    }
}

/// An SRQ receive awaited while one QP (on CQ 1) takes from the SRQ; a second QP on CQ 2
/// (the same channel) is attached afterwards, and the message arrives there.
#[test]
fn an_srq_receive_completing_on_a_cq_attached_after_it_started_waiting_resolves() {
    for (name, rt) in runtimes() {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let ch = ctx.create_comp_channel().unwrap();
        let cq1 = ctx.create_cq_with_channel(512, &ch).unwrap();
        let cq2 = ctx.create_cq_with_channel(512, &ch).unwrap();
        let srq = pd.create_srq(16).unwrap();
        let _first = pd.create_qp::<RC>(&QpConfig::new(&cq1).srq(&srq)).unwrap();
        let t = srq.post_recv_owned(wr::Recv::new(chunks(&pd, 1, 64).remove(0))).unwrap();
        let waiting = rt.spawn(t.into_future());
        rt.block_on(async { sleep(Duration::from_millis(30)).await });
        // A second QP on the SRQ, on CQ 2, connected to a sender.
        let sq = pd.create_qp::<RC>(&QpConfig::new(&cq1)).unwrap();
        let rq = pd.create_qp::<RC>(&QpConfig::new(&cq2).srq(&srq)).unwrap();
        let (es, er) = (sq.endpoint(PORT, gid_index(), 0x10).unwrap(), rq.endpoint(PORT, gid_index(), 0x20).unwrap());
        let (sq, _rq) = (connect_rc(sq, Access::NONE, &es, &er), connect_rc(rq, Access::NONE, &er, &es));
        send_sync(&pd, &sq, b"on cq 2");
        let got = rt.block_on(async { timeout(Duration::from_secs(5), waiting).await });
        let (c, buf) = got
            .unwrap_or_else(|_| panic!("{name}: the future hung: it waits on CQ 1 only"))
            .unwrap()
            .map_err(|e| e.error)
            .unwrap();
        assert!(c.is_success(), "{name}: {c:?}");
        assert_eq!(&buf.as_slice()[..7], b"on cq 2", "{name}");
    }
}

/// A tokio runtime built without I/O: nothing can be registered with a reactor there, and
/// tokio panics when asked to. Every async wait of the library fails typed instead (tokio's
/// panic is caught where the library registers a descriptor): an owned token's future that
/// has to wait resolves to the error with its token, which still works (waited for
/// synchronously, its buffer comes back with its message); `CompChannel::wait_async` and
/// `AsyncEvents::next` fail with their verbs. The QP and the channel then serve a future on a
/// runtime with I/O.
#[test]
fn async_waits_in_a_runtime_without_io_fail_typed() {
    let r = async_rig();
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let no_io = |e: &Error, verb: &str| match e {
        Error::Verb { verb: v, context, .. } => {
            assert_eq!(v.name(), verb, "{e}");
            assert!(context.contains("enable_io"), "{e}");
        }
        other => panic!("expected a typed error of {verb}, got {other:?}"),
    };
    let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
    let got = rt.block_on(async { timeout(Duration::from_secs(2), t.into_future()).await }).expect("not a timeout");
    let e = got.map(|_| ()).expect_err("nothing was sent: the future has to wait");
    no_io(&e.error, "ibv_get_cq_event");
    assert_eq!(r.pair.b.parked_buffers(), 0, "the token came back with the error");
    send_sync(&r.pd, &r.pair.a, b"no io...");
    let (c, buf) = e.token.wait(WAIT).map_err(|e| e.error).expect("the token still works");
    assert!(c.is_success(), "{c:?}");
    assert_eq!(&buf.as_slice()[..8], b"no io...");
    let waited =
        rt.block_on(async { timeout(Duration::from_secs(2), r.ch.wait_async()).await }).expect("not a timeout");
    no_io(&waited.map(|_| ()).expect_err("no reactor"), "ibv_get_cq_event");
    let mut events = r.ctx.async_events().unwrap();
    let next = rt.block_on(async { timeout(Duration::from_secs(2), events.next()).await }).expect("not a timeout");
    no_io(&next.map(|_| ()).expect_err("no reactor"), "ibv_get_async_event");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
        let waiting = tokio::spawn(t.into_future());
        sleep(Duration::from_millis(20)).await;
        send_sync(&r.pd, &r.pair.a, b"with I/O");
        let (c, buf) = timeout(WAIT, waiting).await.expect("bounded").unwrap().map_err(|e| e.error).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!(&buf.as_slice()[..8], b"with I/O");
    });
}

/// A hand-written executor outside any runtime whose waker polls the future inline (on the
/// thread that called `CompChannel::dispatch`, under the CQ's routing lock): the woken future
/// resolves there, with its buffer, without a deadlock.
#[test]
fn a_waker_that_polls_its_completed_future_inline_from_dispatch_resolves_it() {
    type Fut = OwnedCompletion<Chunk<Rx>>;
    type Out = <Fut as Future>::Output;
    struct Inline {
        fut: Mutex<Option<Fut>>,
        out: Mutex<Option<Out>>,
        polls: AtomicUsize,
    }
    impl Inline {
        fn poll_inline(self: &Arc<Self>) {
            let waker = Waker::from(Arc::clone(self));
            let mut slot = self.fut.lock().unwrap();
            if let Some(fut) = slot.as_mut() {
                self.polls.fetch_add(1, Ordering::SeqCst);
                if let Poll::Ready(got) = poll_with(fut, &waker) {
                    *slot = None;
                    *self.out.lock().unwrap() = Some(got);
                }
            }
        }
    }
    impl Wake for Inline {
        fn wake(self: Arc<Self>) {
            self.poll_inline();
        }
    }
    let r = async_rig();
    let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
    let exec =
        Arc::new(Inline { fut: Mutex::new(Some(t.into_future())), out: Mutex::new(None), polls: AtomicUsize::new(0) });
    exec.poll_inline();
    assert!(exec.out.lock().unwrap().is_none(), "nothing was sent");
    send_sync(&r.pd, &r.pair.a, b"inline");
    let out = bounded("dispatch with an inline-polling waker", WAIT, {
        let exec = Arc::clone(&exec);
        let ch = r.ch;
        move || {
            let start = Instant::now();
            while exec.out.lock().unwrap().is_none() && start.elapsed() < WAIT {
                if readable(&ch, 100) {
                    ch.dispatch().unwrap();
                }
            }
            (exec.out.lock().unwrap().take(), ch)
        }
    });
    let (c, buf) = out.0.expect("resolved inside dispatch").map_err(|e| e.error).unwrap();
    assert!(c.is_success(), "{c:?}");
    assert_eq!(&buf.as_slice()[..6], b"inline");
    assert!(exec.polls.load(Ordering::SeqCst) <= 3, "{} polls", exec.polls.load(Ordering::SeqCst));
    drop((out.1, r.ctx));
}

/// A hand-written executor whose waker runs its task inline, on the thread that called
/// `CompChannel::dispatch`: the task, woken by one receive's completion, takes it and then
/// polls a second receive's future for the first time, which polls the same CQ. The wake comes
/// after the poll that routed the completion released the CQ's routing lock (not reentrant),
/// so the task neither spins forever on it nor misses anything: the second receive resolves
/// with the next message.
#[test]
fn a_waker_whose_task_polls_the_same_cq_inline_from_dispatch_does_not_deadlock() {
    type Fut = OwnedCompletion<Chunk<Rx>>;
    type Out = <Fut as Future>::Output;
    struct Task {
        futs: [Mutex<Option<Fut>>; 2],
        out: Mutex<Vec<Out>>,
    }
    impl Task {
        /// Polls the first future, and the second only once the first resolved.
        fn run(self: &Arc<Self>) {
            let waker = Waker::from(Arc::clone(self));
            for slot in &self.futs {
                let mut slot = slot.lock().unwrap();
                if let Some(fut) = slot.as_mut() {
                    match poll_with(fut, &waker) {
                        Poll::Ready(got) => {
                            *slot = None;
                            self.out.lock().unwrap().push(got);
                        }
                        Poll::Pending => return,
                    }
                }
            }
        }
    }
    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.run();
        }
    }
    let r = async_rig();
    let mut rx = chunks(&r.pd, 2, 64);
    let t1 = r.pair.b.post_recv_owned(wr::Recv::new(rx.remove(0))).unwrap();
    let t2 = r.pair.b.post_recv_owned(wr::Recv::new(rx.remove(0))).unwrap();
    let task = Arc::new(Task {
        futs: [Mutex::new(Some(t1.into_future())), Mutex::new(Some(t2.into_future()))],
        out: Mutex::new(Vec::new()),
    });
    task.run();
    assert!(task.out.lock().unwrap().is_empty(), "nothing was sent");
    let resolved = |n: usize| {
        let task = Arc::clone(&task);
        let ch = r.ch.clone();
        move || {
            let start = Instant::now();
            while task.out.lock().unwrap().len() < n && start.elapsed() < WAIT {
                if readable(&ch, 100) {
                    ch.dispatch().unwrap();
                }
            }
            task.out.lock().unwrap().len()
        }
    };
    send_sync(&r.pd, &r.pair.a, b"first");
    assert_eq!(bounded("dispatch waking a task that polls the same CQ", WAIT, resolved(1)), 1, "the first receive");
    assert!(task.futs[1].lock().unwrap().is_some(), "the second receive waits for its message");
    send_sync(&r.pd, &r.pair.a, b"second");
    assert_eq!(bounded("dispatch waking the second receive", WAIT, resolved(2)), 2, "the second receive");
    let out: Vec<_> = task.out.lock().unwrap().drain(..).map(|o| o.map_err(|e| e.error).unwrap()).collect();
    for ((c, buf), want) in out.iter().zip([&b"first"[..], &b"second"[..]]) {
        assert!(c.is_success(), "{c:?}");
        assert_eq!(&buf.as_slice()[..want.len()], want);
    }
}

/// poll(2) on the channel's descriptor for `ms` milliseconds: true when it is readable.
#[allow(unsafe_code)] // poll(2): the tests have no safe wrapper for it
fn readable(ch: &CompChannel, ms: i32) -> bool {
    use std::os::fd::{AsFd, AsRawFd};
    let mut pfd = libc::pollfd { fd: ch.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    assert!(n >= 0, "poll(2) on the channel fd: {}", std::io::Error::last_os_error());
    n > 0 && pfd.revents & libc::POLLIN != 0
}

/// A waker whose drop panics.
struct PanicOnDrop;

impl Wake for PanicOnDrop {
    fn wake(self: Arc<Self>) {}
}

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("a hostile waker's drop");
    }
}

/// A waiting future whose registered waker is the last reference to a waker that panics when
/// dropped: dropping the future unwinds from the waker's drop, and still parks the receive's
/// buffer (released once the late message landed in it) and stops waiting: the channel's idle
/// driver task leaves the channel's events to the program's own wait, and ends once the
/// channel and its CQs are dropped (nothing of theirs is kept by the dropped future).
#[test]
fn a_waiting_future_whose_wakers_drop_panics_still_parks_its_buffer_and_stops_waiting() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let r = async_rig();
    rt.block_on(async {
        let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
        let mut fut = t.into_future();
        let waker = Waker::from(Arc::new(PanicOnDrop));
        assert!(poll_with(&mut fut, &waker).is_pending(), "nothing was sent");
        assert_eq!(rt.metrics().num_alive_tasks(), 1, "the future started the channel's driver task");
        // The future's registration now holds the last reference.
        drop(waker);
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(fut)));
        assert!(dropped.is_err(), "the waker's drop panics through the future's drop");
        assert_eq!(r.pair.b.parked_buffers(), 1, "the receive's buffer is parked, not leaked");
        // Let the driver task run: with no future waiting it idles.
        sleep(Duration::from_millis(20)).await;
        r.cq_b.req_notify(false).unwrap();
        send_sync(&r.pd, &r.pair.a, b"late");
        let ev = timeout(WAIT, r.ch.wait_async())
            .await
            .expect("the driver task took the event: the dropped future still counts as waiting")
            .unwrap();
        assert!(ev.cq().same_as(&r.cq_b), "the event names the receive CQ");
    });
    until_unparked(&r.pair.b, &r.cq_b);
    drop(r);
    rt.block_on(async {
        let start = Instant::now();
        while rt.metrics().num_alive_tasks() > 0 {
            assert!(start.elapsed() < WAIT, "the driver task outlived its channel: the dropped future kept its CQ");
            sleep(Duration::from_millis(1)).await;
        }
    });
}

/// A waker that panics when woken (as a hand-written executor's waker that unwraps a send to
/// a queue whose receiver is gone), counting its wakes first: a test shows the panic happened.
#[derive(Default)]
struct PanicOnWake {
    woken: AtomicUsize,
}

impl Wake for PanicOnWake {
    fn wake(self: Arc<Self>) {
        self.woken.fetch_add(1, Ordering::SeqCst);
        panic!("a hostile waker woken");
    }
}

/// A scope's drain polls the CQs of its queues and so routes other requests' completions,
/// waking their futures: a waker that panics there must not cut the drain short. The scope
/// here posts a receive into borrowed memory and forgets its token; the drain first routes a
/// waiting future's completion (its waker panics), then must still wait for the receive or
/// reset its QP before the panic comes out of `scope`. Otherwise the program would hold the
/// region's bytes as `&mut [u8]` again while the receive is still posted.
#[test]
fn a_waker_that_panics_in_a_scopes_drain_does_not_cut_it_short() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let r = async_rig();
    let mut local = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    local.as_mut_slice().fill(0x11);
    // An owned receive, awaited once with the hostile waker: pending, nothing was sent. The
    // runtime does not run again (its driver task never polls the CQ).
    let t = r.pair.b.post_recv_owned(wr::Recv::new(chunks(&r.pd, 1, 64).remove(0))).unwrap();
    let mut fut = t.into_future();
    let hostile = Arc::new(PanicOnWake::default());
    let waker = Waker::from(Arc::clone(&hostile));
    assert!(rt.block_on(async { poll_with(&mut fut, &waker) }).is_pending(), "nothing was sent");
    // Its completion waits in b's CQ: nobody polls it before the scope's drain.
    send_sync(&r.pd, &r.pair.a, b"first");
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scope_with_timeout(Duration::from_millis(500), |s| {
            let t = s.post_recv(&r.pair.b, wr::Recv::new(local.slice_mut(..).unwrap())).unwrap();
            std::mem::forget(t);
        })
    }));
    let panic = unwound.expect_err("the waker's panic comes out of the scope");
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"a hostile waker woken"));
    assert_eq!(hostile.woken.load(Ordering::SeqCst), 1, "the drain woke the waker once");
    assert_eq!(r.pair.b.outstanding(), (0, 0), "the drain went on: the scope's receive was flushed");
    let state = r.pair.b.query_state().unwrap();
    assert!(
        matches!(state, typed_verbs::qp::ObservedState::Err | typed_verbs::qp::ObservedState::Reset),
        "the receive never completed: the drain forced its QP out of RTS ({state:?})"
    );
    // The future's completion was routed before the panic: it resolves with its message.
    let (c, chunk) = rt.block_on(async { timeout(WAIT, fut).await }).expect("the future resolves").unwrap();
    assert!(c.is_success(), "{c:?}");
    assert_eq!(&chunk.as_slice()[..5], b"first");
    // The region is the program's again, untouched.
    assert!(local.as_mut_slice().iter().all(|&b| b == 0x11));
}

/// Two futures on one CQ: H, polled once by hand with a waker that panics, and G, awaited by a
/// task. H's completion is routed by the channel's driver task, whose dispatch then wakes H's
/// waker: its panic must neither leave the CQ unarmed nor end the driver task, or G, whose
/// completion comes later, would wait for an event nobody reads.
#[test]
fn a_waker_that_panics_in_the_driver_task_leaves_the_other_futures_served() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let r = async_rig();
    let mut rx = chunks(&r.pd, 2, 64);
    let th = r.pair.b.post_recv_owned(wr::Recv::new(rx.remove(0))).unwrap();
    let tg = r.pair.b.post_recv_owned(wr::Recv::new(rx.remove(0))).unwrap();
    rt.block_on(async {
        let mut h = th.into_future();
        let hostile = Arc::new(PanicOnWake::default());
        assert!(poll_with(&mut h, &Waker::from(Arc::clone(&hostile))).is_pending(), "nothing was sent");
        let g = tokio::spawn(async move { timeout(WAIT, tg).await });
        sleep(Duration::from_millis(20)).await;
        // H's receive (posted first) completes; the driver routes it and wakes H's waker.
        send_sync(&r.pd, &r.pair.a, b"first");
        sleep(Duration::from_millis(100)).await;
        send_sync(&r.pd, &r.pair.a, b"second");
        // Served at once, not by some later event (a stranded G resolved about 25 s late).
        let served = timeout(Duration::from_secs(5), g).await.expect("G is served after H's waker panicked");
        let (c, chunk) = served.unwrap().expect("G's own bound").map_err(|e| e.error).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!(&chunk.as_slice()[..6], b"second");
        // H's waker was woken, and panicked, once; not in G's task (G resolved with its
        // output, not a `JoinError`), so in the driver task, which went on serving G.
        assert_eq!(hostile.woken.load(Ordering::SeqCst), 1, "H's waker was woken and panicked");
        // H's completion was recorded before its waker ran: polled again, it resolves.
        match poll_with(&mut h, &count_waker().1) {
            Poll::Ready(Ok((c, chunk))) => {
                assert!(c.is_success(), "{c:?}");
                assert_eq!(&chunk.as_slice()[..5], b"first");
            }
            Poll::Ready(Err(e)) => panic!("H: {}", e.error),
            Poll::Pending => panic!("H's completion was routed: it resolves once polled again"),
        }
    });
}
