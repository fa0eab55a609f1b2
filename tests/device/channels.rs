//! Completion channels: a thread sleeps in `CompChannel::wait` until an armed CQ gets a
//! completion, and the event names that CQ.

use std::time::{Duration, Instant};

use typed_verbs::prelude::*;

use crate::common::*;

/// Shows that no event is pending on the channel without waiting for a quiet period: arms
/// `cq_a` (which reports to `ch`), sends one marker message from `pair.a` to `pair.b` (a receive
/// into `rview` posted first), and waits (bounded) for the marker's event. It must be the first
/// event read, be for `cq_a`, and nothing may follow it. An event the test's earlier
/// completions had raised would be queued before the marker's (the channel is a FIFO and those
/// completions happened earlier); the marker's own receive completes on `cq_b` before its
/// SEND is acknowledged to `pair.a`, so an event it raised would come first too. Returns the
/// receive view.
fn assert_no_event_then_marker<'s>(
    s: &'s Scope<'s, '_>,
    ch: &CompChannel,
    cq_a: &Cq,
    pair: &'s RcPair,
    src: LocalBuf<'s>,
    rview: LocalBufMut<'s>,
) -> LocalBufMut<'s> {
    cq_a.req_notify(false).unwrap();
    let r = s.post_recv(&pair.b, wr::Recv::new(rview)).unwrap();
    let t = s.post_send(&pair.a, wr::Send::new(src)).unwrap();
    let ev = ch.wait(WAIT).expect("the marker's event");
    assert!(ev.is_for(cq_a), "an event was pending before the marker's: {ev:?}");
    s.wait(t, WAIT).unwrap().0.ok().unwrap();
    let (rc, rview) = s.wait(r, WAIT).unwrap();
    rc.ok().unwrap();
    // Both marker completions have been consumed: anything else would be queued by now.
    assert!(!channel_readable(ch, Duration::ZERO), "an event followed the marker's");
    rview
}

fn assert_timeout<T: std::fmt::Debug>(r: typed_verbs::Result<T>) {
    match r {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected Error::Timeout, got {other:?}"),
    }
}

/// A connected RC pair whose receiving side (`pair.b`) completes on `cq_b`, which reports to
/// the completion channel `ch`; `pair.a` completes on `cq_a`, outside the channel.
struct Rig {
    ctx: Context,
    pd: Pd,
    ch: CompChannel,
    cq_a: Cq,
    cq_b: Cq,
    pair: RcPair,
}

fn rig() -> Rig {
    rig_with(false)
}

/// [`rig`], with `cq_a` also reporting to the channel when `both_on_channel`.
fn rig_with(both_on_channel: bool) -> Rig {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq_a = if both_on_channel { ctx.create_cq_with_channel(256, &ch) } else { ctx.create_cq(256) }.unwrap();
    let cq_b = ctx.create_cq_with_channel(256, &ch).unwrap();
    let pair = rc_pair(&pd, &cq_a, &cq_b, Access::NONE, QpCaps::default());
    Rig { ctx, pd, ch, cq_a, cq_b, pair }
}

#[test]
fn a_receive_completion_fires_the_channel_and_names_the_receive_cq() {
    // Both CQs report to the channel; only the receive CQ is armed.
    let Rig { ctx: _ctx, pd, ch, cq_a, cq_b, pair } = rig_with(true);
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice()[..5].copy_from_slice(b"hello");
    let mut dst = pd.alloc_mr(128, access::LOCAL_RW).unwrap();

    scope(|s| {
        let (d1, marker) = dst.slice_mut(..).unwrap().split_at(64).unwrap();
        let r = s.post_recv(&pair.b, wr::Recv::new(d1)).unwrap();
        cq_b.req_notify(false).unwrap();
        let t = s.post_send(&pair.a, wr::Send::new(src.slice(..5).unwrap())).unwrap();

        let ev = ch.wait(WAIT).unwrap();
        assert!(ev.is_for(&cq_b), "the event must name the receive CQ: {ev:?}");
        assert!(!ev.is_for(&cq_a));
        assert!(ev.cq().same_as(&cq_b.clone()));

        let (rc, _) = s.wait(r, WAIT).unwrap();
        assert_eq!(rc.status(), WcStatus::Success, "{rc:?}");
        assert_eq!(rc.opcode(), WcOpcode::Recv);
        assert_eq!(rc.byte_len(), 5);
        let (sc, _) = s.wait(t, WAIT).unwrap();
        assert_eq!(sc.status(), WcStatus::Success, "{sc:?}");

        // The send CQ was never armed and the receive CQ's arming was used up: no more events.
        assert_no_event_then_marker(s, &ch, &cq_a, &pair, src.slice(..5).unwrap(), marker);
    })
    .unwrap();
    assert_eq!(&dst.as_slice()[..5], b"hello");
}

#[test]
fn two_armed_cqs_on_one_channel_each_fire_once() {
    let Rig { ctx: _ctx, pd, ch, cq_a, cq_b, pair } = rig_with(true);
    let src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let mut dst = pd.alloc_mr(128, access::LOCAL_RW).unwrap();

    scope(|s| {
        let (d1, marker) = dst.slice_mut(..).unwrap().split_at(64).unwrap();
        let r = s.post_recv(&pair.b, wr::Recv::new(d1)).unwrap();
        cq_a.req_notify(false).unwrap();
        cq_b.req_notify(false).unwrap();
        let t = s.post_send(&pair.a, wr::Send::new(src.slice(..8).unwrap())).unwrap();
        let first = ch.wait(WAIT).unwrap();
        let second = ch.wait(WAIT).unwrap();
        let fired_a = [&first, &second].iter().filter(|e| e.is_for(&cq_a)).count();
        let fired_b = [&first, &second].iter().filter(|e| e.is_for(&cq_b)).count();
        assert_eq!((fired_a, fired_b), (1, 1), "one event per armed CQ: {first:?} {second:?}");
        s.wait(r, WAIT).unwrap().0.ok().unwrap();
        s.wait(t, WAIT).unwrap().0.ok().unwrap();
        // Both armings are used up: no third event.
        assert_no_event_then_marker(s, &ch, &cq_a, &pair, src.slice(..8).unwrap(), marker);
    })
    .unwrap();
}

#[test]
fn waiting_with_nothing_posted_times_out_in_bounded_time() {
    let ctx = open();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(16, &ch).unwrap();
    cq.req_notify(false).unwrap();
    let start = Instant::now();
    let r = ch.wait(Duration::from_millis(200));
    let took = start.elapsed();
    match r {
        Err(Error::Timeout { after, .. }) => assert_eq!(after, Duration::from_millis(200)),
        other => panic!("expected Error::Timeout, got {other:?}"),
    }
    assert!(took >= Duration::from_millis(200), "returned early, after {took:?}");
    assert!(took < Duration::from_secs(5), "the 200 ms wait took {took:?}");
    // A zero timeout only looks.
    assert_timeout(ch.wait(Duration::ZERO));
}

/// IBV_SEND_SOLICITED end to end: a CQ armed for solicited completions only ignores an ordinary
/// SEND and wakes for a `.solicited()` one.
#[test]
fn solicited_only_arming_fires_for_a_solicited_send_and_not_for_an_unsolicited_one() {
    let Rig { ctx: _ctx, pd, ch, cq_a, cq_b, pair } = rig_with(true);
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice()[..4].copy_from_slice(b"solo");
    let mut dst = pd.alloc_mr(192, access::LOCAL_RW).unwrap();

    scope(|s| {
        let (d1, rest) = dst.slice_mut(..).unwrap().split_at(64).unwrap();
        let (d2, marker) = rest.split_at(64).unwrap();
        let r1 = s.post_recv(&pair.b, wr::Recv::new(d1)).unwrap();
        cq_b.req_notify(true).unwrap();

        // An ordinary SEND: its receive completion is in the CQ, yet no event.
        let t1 = s.post_send(&pair.a, wr::Send::new(src.slice(..4).unwrap())).unwrap();
        let (rc1, _) = s.wait(r1, WAIT).unwrap();
        assert_eq!(rc1.status(), WcStatus::Success, "{rc1:?}");
        s.wait(t1, WAIT).unwrap().0.ok().unwrap();
        // (The marker's receive is unsolicited too: it must not fire cq_b either.)
        assert_no_event_then_marker(s, &ch, &cq_a, &pair, src.slice(..4).unwrap(), marker);

        // A solicited SEND wakes the waiter (the arming survived the unsolicited completions).
        let r2 = s.post_recv(&pair.b, wr::Recv::new(d2)).unwrap();
        let t2 = s.post_send(&pair.a, wr::Send::new(src.slice(..4).unwrap()).solicited()).unwrap();
        let ev = ch.wait(WAIT).unwrap();
        assert!(ev.is_for(&cq_b), "{ev:?}");
        let (rc2, _) = s.wait(r2, WAIT).unwrap();
        assert_eq!(rc2.status(), WcStatus::Success, "{rc2:?}");
        assert_eq!(rc2.byte_len(), 4);
        s.wait(t2, WAIT).unwrap().0.ok().unwrap();
    })
    .unwrap();
}

/// An event the kernel queued for a CQ that is then destroyed is discarded with the CQ: no
/// stale event, no hang in `ibv_destroy_cq` (every event read was acknowledged).
#[test]
fn an_unread_event_dies_with_its_cq() {
    let Rig { ctx: _ctx, pd, ch, cq_a: _cq_a, cq_b, pair } = rig();
    let src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let mut dst = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let r = s.post_recv(&pair.b, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        cq_b.req_notify(false).unwrap();
        let t = s.post_send(&pair.a, wr::Send::new(src.slice(..8).unwrap())).unwrap();
        s.wait(r, WAIT).unwrap().0.ok().unwrap();
        s.wait(t, WAIT).unwrap().0.ok().unwrap();
    })
    .unwrap();
    // The event is queued on the channel, unread: its fd is readable (poll(2), which does not
    // consume the event).
    assert!(channel_readable(&ch, WAIT), "no event was queued for the armed CQ");
    assert!(channel_readable(&ch, Duration::ZERO), "looking consumed the event");
    // Destroy the CQ (the QPs first: they use it).
    drop(pair);
    let start = Instant::now();
    drop(cq_b);
    assert!(start.elapsed() < Duration::from_secs(5), "ibv_destroy_cq blocked");
    // ibv_destroy_cq has returned: the event went with the CQ, the channel has nothing to read.
    assert!(!channel_readable(&ch, Duration::ZERO), "the destroyed CQ's event is still queued");
    assert_timeout(ch.wait(Duration::ZERO));
}

/// Whether the channel's fd polls readable within `within` (poll(2) on it; reads nothing).
/// The fd is taken from the channel's `Debug` output, the only place the library shows it.
#[allow(unsafe_code)] // poll(2): the tests have no safe wrapper for it
fn channel_readable(ch: &CompChannel, within: Duration) -> bool {
    let shown = format!("{ch:?}");
    let fd: i32 = shown
        .split("fd: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fd in {shown}"));
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = i32::try_from(within.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd; the channel (and so its fd) lives for the whole call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    assert!(n >= 0, "poll(2) on the channel fd {fd}: {}", std::io::Error::last_os_error());
    assert_eq!(pfd.revents & !libc::POLLIN, 0, "poll(2) on fd {fd}: revents {:#x}", pfd.revents);
    n == 1
}

#[cfg(feature = "tokio")]
#[test]
fn wait_async_resolves_on_the_receive_completion() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap();
    let Rig { ctx: _ctx, pd, ch, cq_a: _cq_a, cq_b, pair } = rig();
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice()[..5].copy_from_slice(b"async");
    let mut dst = pd.alloc_mr(64, access::LOCAL_RW).unwrap();

    scope(|s| {
        // Nothing armed yet: the future stays pending (bounded by the timer), and dropping it
        // loses nothing.
        cq_b.req_notify(false).unwrap();
        assert!(!channel_readable(&ch, Duration::ZERO), "nothing was posted, yet an event is queued");
        let idle = rt.block_on(async {
            let mut f = std::pin::pin!(ch.wait_async());
            std::future::poll_fn(|cx| std::task::Poll::Ready(std::future::Future::poll(f.as_mut(), cx).is_pending()))
                .await
        });
        assert!(idle, "no completion yet, the future must still be pending");

        let r = s.post_recv(&pair.b, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&pair.a, wr::Send::new(src.slice(..5).unwrap())).unwrap();
        let ev = rt.block_on(async { tokio::time::timeout(WAIT, ch.wait_async()).await }).expect("timed out").unwrap();
        assert!(ev.is_for(&cq_b), "{ev:?}");
        let (rc, _) = s.wait(r, WAIT).unwrap();
        assert_eq!(rc.byte_len(), 5);
        s.wait(t, WAIT).unwrap().0.ok().unwrap();
    })
    .unwrap();
    assert_eq!(&dst.as_slice()[..5], b"async");

    // Outside a runtime: an error, not a panic.
    let r = futures_lite_block_on(ch.wait_async());
    assert!(matches!(r, Err(Error::Verb { .. })), "{r:?}");
}

/// Polls a future to completion on this thread, outside any tokio runtime.
#[cfg(feature = "tokio")]
fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context as TaskContext, Poll, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let waker = Waker::from(std::sync::Arc::new(Noop));
    let mut cx = TaskContext::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let deadline = Instant::now() + WAIT;
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(Instant::now() < deadline, "the future never resolved");
        std::thread::sleep(Duration::from_millis(10));
    }
}
