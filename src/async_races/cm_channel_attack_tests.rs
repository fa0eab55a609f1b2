//! Hostile programs and values against the connection manager's parameters (`src/cm.rs`), the
//! completion channel (`src/channel.rs`) and the asynchronous events (`src/event.rs`) over the
//! fake device: what the CM tells the peer about the program's QP (an SRQ), what a request's
//! event says about the peer (its depths), descriptors that report only an error (a device
//! disassociated under its waits), a read of the channel that fails under the tokio driver, a
//! CQ address reused after a destroy, and port numbers outside a `u8`.

use super::*;
use crate::cm::ConnParam;
use crate::transport::INIT;

/// rdma_connect(3), rdma_accept(3): `srq` "specifies if the QP associated with the connection
/// is using a shared receive queue", and librdmacm ignores it only for a QP created on the
/// identifier (its own `rdma_accept` then reads it off the QP: `!!id->qp->srq`). The library's
/// QPs are the program's own, never created on the identifier: the parameters it sends say
/// whether the QP takes its receives from an SRQ.
#[test]
fn the_cm_tells_the_peer_whether_the_qp_takes_its_receives_from_an_srq() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let srq = w.srq(16);
    let on_srq: Qp<RC, INIT> = Qp::from_fake(w.qp(0x5c1, 4, &cq, Some(srq)));
    let alone: Qp<RC, INIT> = Qp::from_fake(w.qp(0x5c2, 4, &cq, None));
    let param = ConnParam::default();
    for (verb, max) in [("rdma_connect", 56), ("rdma_accept", 196)] {
        let raw = param.raw_for(&on_srq, max, verb).unwrap();
        assert_eq!((raw.qp_num, raw.srq), (0x5c1, 1), "{verb}: a QP on an SRQ");
        let raw = param.raw_for(&alone, max, verb).unwrap();
        assert_eq!((raw.qp_num, raw.srq), (0x5c2, 0), "{verb}: a QP with its own receive queue");
    }
}

/// rdma_get_cm_event(3), `CONNECT_REQUEST`: the event's `responder_resources` "matches the
/// initiator depth specified by the remote node", its `initiator_depth` "matches the responder
/// resources specified by the remote node" (the kernel's CM swaps them to the recipient's view,
/// `cm_format_req_event`). `ConnRequest::peer_depths` says it returns (the peer's responder
/// resources, the peer's initiator depth): a peer that connected with responder resources 2 and
/// initiator depth 4 reads (2, 4), not the recipient's view (4, 2).
#[test]
fn a_requests_peer_depths_are_the_peers_own_not_the_recipients_view() {
    // The event of a peer's rdma_connect with responder_resources 2, initiator_depth 4.
    let (event_responder_resources, event_initiator_depth) = (4, 2);
    assert_eq!(crate::cm::peer_depths(event_responder_resources, event_initiator_depth), (2, 4));
}

/// A completion channel whose descriptor reports only an error (`EPOLLERR` without `EPOLLIN`:
/// a uverbs event file after its device was disassociated, whose reads then fail with EIO):
/// here the write end of a pipe whose read end is closed (its reads fail too, EBADF).
fn erroring_channel(w: &'static World) -> CompChannel {
    let [read, write] = pipe();
    close(read);
    let (ch, _) = w.fake_channel(write, write);
    std::mem::forget(ch.clone());
    ch
}

/// The blocking wait on a descriptor that reports only an error fails typed at once.
#[test]
fn a_channel_whose_descriptor_reports_an_error_fails_the_blocking_wait() {
    let w = World::new();
    let ch = erroring_channel(w);
    let start = std::time::Instant::now();
    let got = ch.wait(Duration::from_secs(5));
    assert!(matches!(got, Err(crate::Error::Verb { .. })), "{got:?}");
    assert!(start.elapsed() < Duration::from_secs(1), "not at once: {:?}", start.elapsed());
}

/// The awaited wait on the same descriptor.
#[cfg(feature = "tokio")]
#[test]
fn a_channel_whose_descriptor_reports_an_error_fails_the_awaited_wait() {
    let w = World::new();
    let ch = erroring_channel(w);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), ch.wait_async()).await });
    assert!(matches!(got, Ok(Err(crate::Error::Verb { .. }))), "{got:?}");
}

/// A channel over a pipe's write end whose read end the test closes when it likes (returned):
/// until then the descriptor reports nothing (its write readiness is not asked for), after it
/// only an error.
#[cfg(feature = "tokio")]
pub(super) fn channel_erroring_later(w: &'static World) -> (CompChannel, i32) {
    let [read, write] = pipe();
    let (ch, _) = w.fake_channel(write, write);
    std::mem::forget(ch.clone());
    (ch, read)
}

/// The awaited wait already waiting when the descriptor starts to report only an error (a
/// device disassociated under it) is woken and fails typed.
#[cfg(feature = "tokio")]
#[test]
fn an_awaited_channel_wait_is_woken_by_its_descriptors_error() {
    let w = World::new();
    let (ch, read_end) = channel_erroring_later(w);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let h = rt.spawn(async move { ch.wait_async().await.map(|_| ()) });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!h.is_finished(), "nothing to read yet: still waiting");
    close(read_end);
    let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), h).await });
    assert!(matches!(got, Ok(Ok(Err(crate::Error::Verb { .. })))), "{got:?}");
}

/// The device's asynchronous events read through the same wait: a context whose `async_fd`
/// reports only an error fails the awaited read typed, as the blocking one.
#[cfg(feature = "tokio")]
#[test]
fn async_events_on_a_descriptor_reporting_an_error_fail_typed() {
    let w = World::new();
    let mut fds = [0i32; 2];
    // SAFETY: a valid out-array; the read end closed at once; the fake context is leaked and
    // this test's alone.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC), 0);
        assert_eq!(libc::close(fds[0]), 0);
        (*w.ctx.ctx.as_ptr()).async_fd = fds[1];
    }
    let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
    let blocking = ctx.next_async_event(Duration::from_secs(5));
    assert!(matches!(blocking, Err(crate::Error::Verb { .. })), "{blocking:?}");
    let mut events = ctx.async_events().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), events.next()).await });
    assert!(matches!(got, Ok(Err(crate::Error::Verb { .. }))), "{got:?}");
}

/// A CQ destroyed and another created at its address (an allocator reuses it; the channel's
/// list of CQs still holds the first one's dead entry): an event naming the address is the
/// live CQ's, whichever entry comes first, and a second event while the live CQ's last handle
/// is gone is acknowledged and skipped (a wait sees nothing).
#[test]
fn an_event_for_a_reused_cq_address_goes_to_the_live_cq() {
    let w = World::new();
    let (first, _fake) = w.droppable_cq();
    let raw = NonNull::new(crate::cq::Cq { inner: Arc::clone(&first) }.as_ptr()).unwrap();
    drop(first);
    let second = CqShared::fake(raw, Arc::clone(&w.ctx), Some(Arc::clone(w.ch.shared())), 64);
    w.ch.attach_fake(&second);
    let desc = raw.as_ptr() as u64;
    // SAFETY: the 8 bytes of `desc` (the handle `ibv_get_cq_event` reads back as the CQ) to the
    // channel's pipe, whose write end is open for the whole test (leaked).
    let write = || unsafe { libc::write(w.write_fd, (&desc as *const u64).cast(), 8) };
    assert_eq!(write(), 8);
    let ev = w.ch.wait(Duration::from_secs(1)).expect("the live CQ's event");
    assert!(ev.is_for(&crate::cq::Cq { inner: Arc::clone(&second) }), "delivered to the live CQ");
    drop(ev);
    drop(second);
    assert_eq!(write(), 8);
    match w.ch.wait(Duration::from_millis(100)) {
        Err(crate::Error::Timeout { .. }) => {}
        other => panic!("an event of a CQ with no handle left: {other:?}"),
    }
}

/// Port numbers of asynchronous events as the provider gives them: a port number that is no
/// `u8` (negative, above 255) reads as port 0, never a truncated other port (257 is not port
/// 1), and does not panic. (A QP event naming no QP is not among them: libibverbs' own
/// `ibv_ack_async_event` locks the QP it names.)
#[test]
fn async_events_with_out_of_range_ports_decode_to_port_zero() {
    let (w, wfd) = world_with_events();
    let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
    for (element, event_type, want) in [
        (257, sys::IBV_EVENT_PORT_ACTIVE, crate::event::AsyncEvent::PortActive { port: 0 }),
        (u64::from(u32::MAX), sys::IBV_EVENT_PORT_ERR, crate::event::AsyncEvent::PortError { port: 0 }),
        (255, sys::IBV_EVENT_LID_CHANGE, crate::event::AsyncEvent::LidChange { port: 255 }),
    ] {
        inject_event(wfd, element, event_type);
        assert_eq!(ctx.next_async_event(Duration::from_secs(1)).unwrap(), want, "element {element:#x}");
    }
}

/// A channel whose descriptor the reactor sees readable (`poll_fd`, a pipe's read end the test
/// writes into) while `ibv_get_cq_event` fails on it (the fake reads the C channel's `fd`, here
/// a pipe's write end: EBADF): a read that fails with the descriptor readable. Returns the
/// channel and the write end of `poll_fd`'s pipe.
#[cfg(feature = "tokio")]
fn channel_whose_reads_fail(w: &'static World) -> (CompChannel, *mut sys::ibv_comp_channel, i32) {
    let (polled, read) = (pipe(), pipe());
    let (ch, chp) = w.fake_channel(read[1], polled[0]);
    std::mem::forget(ch.clone());
    (ch, chp, polled[1])
}

/// The tokio driver's `dispatch` fails reading the channel (the descriptor readable, the read
/// failing): the driver ends and every future waiting on the channel's CQs is woken; polled
/// again, each serves its CQ itself and starts a new driver, whose first dispatch fails the
/// same way and wakes it again. (Waking them is what every failed dispatch does: the future
/// neither resolves nor is left unwoken while the read fails.) A future polled by hand, the
/// runtime's driver started by each of its polls.
#[cfg(feature = "tokio")]
#[test]
fn a_driver_whose_read_of_the_channel_fails_wakes_the_waiting_futures_again_and_again() {
    let w = World::new();
    let (ch, chp, poll_write) = channel_whose_reads_fail(w);
    // Readable from the start.
    // SAFETY: one byte to the open write end of the polled pipe (leaked).
    assert_eq!(unsafe { libc::write(poll_write, [1u8].as_ptr().cast(), 1) }, 1);
    let (cq, fake) = w.fake_cq_on(&ch, chp, poll_write, 1 << 20);
    std::mem::forget(Arc::clone(&cq));
    let qp = w.qp(0x5e1, 16, &cq, None);
    let mut f = post_send(&qp, true).into_future();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let wakes = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&wakes));
    for round in 1..=5 {
        rt.block_on(async { assert!(poll(&mut f, &waker).is_pending(), "round {round}: nothing completed") });
        let until = std::time::Instant::now() + Duration::from_secs(3);
        while wakes.get() < round {
            assert!(std::time::Instant::now() < until, "round {round}: the failed read woke no waiting future");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(cq.waiters.load(SeqCst), 1, "still waiting: the failure is not the future's result");
    // Its request completes: the future resolves (served by its own poll).
    fake.complete(send_wc(0x5e1, 0, sys::IBV_WC_SUCCESS));
    let got = rt.block_on(async { poll(&mut f, &waker) });
    assert!(matches!(got, Poll::Ready(Ok(_))), "resolved by its own serving");
    drop(rt);
}
