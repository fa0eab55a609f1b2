//! Asynchronous events (`Context::next_async_event`, `AsyncEvents`): what Soft-RoCE actually
//! reports.
//!
//! Observed on rxe (kernel 6.12, rdma-core 44), and asserted below:
//! - a CQ overrun: one `IBV_EVENT_CQ_ERR` naming the CQ per completion that did not fit (the
//!   completion is lost, the QP goes on). The library makes an overrun unreachable (a QP's
//!   queue depths must fit in its CQs' room), which `a_cq_cannot_be_overrun_its_queues_must_fit`
//!   shows;
//! - the link of the device's netdev going down: one `IBV_EVENT_PORT_ERR` on port 1; coming back
//!   up: `IBV_EVENT_PORT_ACTIVE` on port 1, once or twice (twice observed, ~190 ms apart);
//! - an address added to the netdev: `IBV_EVENT_GID_CHANGE` on port 1;
//! - an SRQ armed with a limit going below it: `IBV_EVENT_SRQ_LIMIT_REACHED` naming the SRQ;
//! - a QP attached to an SRQ moved to ERR: `IBV_EVENT_QP_LAST_WQE_REACHED` with its QP number
//!   (rxe's one QP event; also on 6.18).
//!
//! Also observed, and *not* reported by rxe as async events (the error only shows in the
//! completions): an RDMA WRITE with a bad rkey (REM_ACCESS_ERR at the requester, nothing at the
//! responder), a receive buffer too small (REM_OP_ERR / LOC_QP_OP_ERR), moving a QP without an
//! SRQ to ERR with `ibv_modify_qp`, the first packet arriving on a QP in RTR (no
//! `IBV_EVENT_COMM_EST`), and a peer QP that was destroyed (no completion at all within 15 s).
//!
//! The same events through [`AsyncEvents`] (`Context::async_events`): its descriptor waited on
//! with poll(2) and read with `try_next_event`, and with the `tokio` feature `next` on current-
//! thread and multi-threaded runtimes, cancelled, bounded by `tokio::time::timeout`, beside a
//! second reader and the blocking `next_async_event` (each event reaches exactly one).

use std::process::Command;
use std::time::{Duration, Instant};

use typed_verbs::device::PortState;
use typed_verbs::prelude::*;

use crate::common::*;

/// How long "no further event" is given before the test concludes there is none, where no
/// observable state says when the kernel is done (a scratch device coming up may report
/// PORT_ACTIVE a second time, from no state the test can watch; its link being down rules out
/// the traffic [`events_until_marker`] needs).
const QUIET: Duration = Duration::from_millis(1500);

/// Every event that arrives until none has come for `QUIET`.
fn events_until_quiet(ctx: &Context) -> Vec<AsyncEvent> {
    let mut got = Vec::new();
    loop {
        match ctx.next_async_event(QUIET) {
            Ok(ev) => got.push(ev),
            Err(Error::Timeout { .. }) => return got,
            Err(e) => panic!("next_async_event failed: {e}"),
        }
        assert!(got.len() < 64, "an endless stream of events: {got:?}");
    }
}

/// A fresh SRQ of its own with 2 receives posted, armed to report when fewer than 2 remain,
/// behind a connected RC pair: [`SrqMarker::fire`] consumes one receive, which raises one
/// SRQ_LIMIT_REACHED naming this SRQ ([`SrqMarker::event`]). The one event the tests can raise
/// on the device under test at will (rxe reports no QP event for bad accesses or a QP moved to
/// ERR). Needs traffic, so only on the device under test (not on a scratch device whose link is
/// down).
struct SrqMarker {
    srq: Srq,
    s: Qp<RC, RTS>,
    /// The receiving QP, on the SRQ.
    r: Qp<RC, RTS>,
    _receives: Vec<OwnedToken<Chunk<access::LocalRw>>>,
    src: Mr<access::LocalRead>,
    _cq: Cq,
    _pd: Pd,
}

impl SrqMarker {
    fn armed(ctx: &Context) -> SrqMarker {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let srq = pd.create_srq(4).unwrap();
        let caps = QpCaps { max_send_wr: 4, max_recv_wr: 0, max_recv_sge: 0, ..QpCaps::default() };
        let r = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps).srq(&srq)).unwrap();
        let s_caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, max_recv_sge: 1, ..caps };
        let s = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(s_caps)).unwrap();
        let (es, er) = (s.endpoint(PORT, gid_index(), 11).unwrap(), r.endpoint(PORT, gid_index(), 13).unwrap());
        let (s, r) = (connect_rc(s, Access::NONE, &es, &er), connect_rc(r, Access::NONE, &er, &es));
        let chunks = pd.alloc_mr(2 * 64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap();
        let receives = chunks.into_iter().map(|c| srq.post_recv_owned(wr::Recv::new(c)).unwrap()).collect();
        srq.arm_limit(2).unwrap();
        let mut src = pd.alloc_mr(8, access::LOCAL_READ).unwrap();
        src.as_mut_slice().fill(1);
        SrqMarker { srq, s, r, _receives: receives, src, _cq: cq, _pd: pd }
    }

    /// The event [`fire`](Self::fire) raises.
    fn event(&self) -> AsyncEvent {
        AsyncEvent::SrqLimitReached { srq: self.srq.handle_id() }
    }

    /// One SEND into the SRQ, completed: its receive is consumed, and the limit fires.
    fn fire(&self) {
        scope(|sc| {
            let t = sc.post_send(&self.s, wr::Send::new(self.src.slice(..).unwrap())).unwrap();
            assert!(sc.wait(t, WAIT).unwrap().0.is_success());
        })
        .unwrap();
    }
}

/// Raises an event the test can recognise ([`SrqMarker`]) and returns every event read before
/// it, with a bounded wait for it. Events queued earlier come first (the event queue is a
/// FIFO), so this shows that nothing else was pending without waiting for a quiet period.
fn events_until_marker(ctx: &Context) -> Vec<AsyncEvent> {
    let marker = SrqMarker::armed(ctx);
    marker.fire();
    let want = marker.event();
    let mut before = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev =
            ctx.next_async_event(left).unwrap_or_else(|e| panic!("the marker's SRQ_LIMIT ({before:?} before): {e}"));
        if ev == want {
            return before;
        }
        before.push(ev);
        assert!(before.len() < 64, "an endless stream of events: {before:?}");
    }
}

#[test]
fn no_pending_event_times_out_in_bounded_time() {
    let ctx = open();
    let start = Instant::now();
    match ctx.next_async_event(Duration::from_millis(200)) {
        Err(Error::Timeout { after, .. }) => assert_eq!(after, Duration::from_millis(200)),
        other => panic!("expected Error::Timeout, got {other:?}"),
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(200), "returned early, after {took:?}");
    assert!(took < Duration::from_secs(5), "the 200 ms wait took {took:?}");
    assert!(matches!(ctx.next_async_event(Duration::ZERO), Err(Error::Timeout { .. })));
}

#[test]
fn a_cq_cannot_be_overrun_its_queues_must_fit() {
    // rxe reports a CQ overrun as one CQ_ERR per lost completion, and a lost completion would
    // make a failed request read as done. The library makes it unreachable: a QP is created
    // only if the CQ has room for every completion its queues can have outstanding, and each
    // queue refuses requests beyond its depth.
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let small = ctx.create_cq(4).unwrap();
    let other = ctx.create_cq(256).unwrap();
    let room = small.capacity();
    let caps = |send: u32| QpCaps { max_send_wr: send, ..QpCaps::default() };
    let e = pd
        .create_qp::<RC>(&QpConfig { send_cq: &small, recv_cq: &other, caps: caps(room + 1), srq: None })
        .expect_err("a send queue deeper than its CQ");
    assert_invalid(&e, "ibv_create_qp", "a CQ smaller than its queues could overrun");
    // Both queues on one CQ: their depths add up.
    let e = pd.create_qp::<RC>(&QpConfig::new(&small).caps(QpCaps { max_send_wr: room, max_recv_wr: 1, ..caps(1) }));
    assert_refused(e, "ibv_create_qp", "a CQ smaller than its queues could overrun");
    // A send queue exactly as deep as the CQ fits; it then refuses the request that would
    // overrun the CQ, before the provider sees it.
    let a = pd.create_qp::<RC>(&QpConfig { send_cq: &small, recv_cq: &other, caps: caps(room), srq: None }).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&other).caps(caps(room))).unwrap();
    let (ea, eb) = (a.endpoint(PORT, gid_index(), 21).unwrap(), b.endpoint(PORT, gid_index(), 23).unwrap());
    let (a, _b) =
        (connect_rc(a, Access::NONE.remote_write(), &ea, &eb), connect_rc(b, Access::NONE.remote_write(), &eb, &ea));
    let src = pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    let dst = pd.alloc_mr(8, access::REMOTE_RW).unwrap();
    scope(|s| {
        let tokens: Vec<_> = (0..room)
            .map(|_| s.post_send(&a, wr::Write::new(src.slice(..).unwrap(), dst.remote(..).unwrap())).unwrap())
            .collect();
        let e =
            s.post_send(&a, wr::Write::new(src.slice(..).unwrap(), dst.remote(..).unwrap())).expect_err("one too many");
        assert!(matches!(e.error, Error::QueueFull { .. }), "{:?}", e.error);
        for t in tokens {
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        }
    })
    .unwrap();
    // No CQ_ERR was raised: the next event is the marker.
    assert_eq!(events_until_marker(&ctx), vec![]);
}

/// A Soft-RoCE device of the test's own, on a veth pair of its own, so that taking its link
/// down disturbs no other test. Removed on drop (after the contexts on it are closed: declare
/// it before them).
pub(crate) struct ScratchRxe {
    pub(crate) dev: String,
    pub(crate) ndev: String,
    peer: String,
}

pub(crate) fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{cmd} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

pub(crate) fn must(r: Result<(), String>) {
    if let Err(e) = r {
        panic!("{e} (this test creates its own rxe device on a veth pair: it needs root, iproute2 and the rdma_rxe module, as inside scripts/softroce-run)");
    }
}

impl ScratchRxe {
    /// `tag` keeps the names of tests running in parallel apart. With `ipv6` false the netdev
    /// gets no IPv6 addresses, whose GID entries come and go with the link (a GID_CHANGE that
    /// can arrive after the link came up, or before a link-down's PORT_ERR).
    pub(crate) fn create(tag: &str, ipv6: bool) -> ScratchRxe {
        let s = ScratchRxe { dev: format!("tvrxe_{tag}"), ndev: format!("tv{tag}0"), peer: format!("tv{tag}1") };
        // Leftovers of an interrupted run.
        s.remove();
        must(run("ip", &["link", "add", &s.ndev, "type", "veth", "peer", "name", &s.peer]));
        if !ipv6 {
            let knob = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", s.ndev);
            must(std::fs::write(&knob, "1").map_err(|e| format!("write {knob}: {e}")));
        }
        must(run("ip", &["link", "set", &s.ndev, "up"]));
        must(run("ip", &["link", "set", &s.peer, "up"]));
        must(run("rdma", &["link", "add", &s.dev, "type", "rxe", "netdev", &s.ndev]));
        s
    }

    fn remove(&self) {
        let _ = run("rdma", &["link", "delete", &self.dev]);
        let _ = run("ip", &["link", "delete", &self.ndev]);
    }

    /// Opens the device once it is listed and its port 1 is ACTIVE, with no event pending.
    pub(crate) fn open_active(&self) -> Context {
        let start = Instant::now();
        loop {
            if let Ok(ctx) = Context::open(&self.dev) {
                if matches!(ctx.query_port(1).map(|p| p.state()), Ok(PortState::Active)) {
                    events_until_quiet(&ctx);
                    return ctx;
                }
            }
            assert!(start.elapsed() < WAIT, "{} did not become ACTIVE", self.dev);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ScratchRxe {
    fn drop(&mut self) {
        self.remove();
    }
}

#[test]
fn link_down_and_up_report_port_err_then_port_active() {
    let scratch = ScratchRxe::create("port", false);
    let ctx = scratch.open_active();

    must(run("ip", &["link", "set", &scratch.ndev, "down"]));
    let ev = ctx.next_async_event(WAIT).unwrap();
    assert_eq!(ev, AsyncEvent::PortError { port: 1 }, "{ev}");
    assert_eq!(ev.port(), Some(1));
    assert_eq!(ev.name(), "IBV_EVENT_PORT_ERR");
    assert_eq!(ctx.query_port(1).unwrap().state(), PortState::Down);
    // rxe sets the port down and dispatches PORT_ERR in the same netdev notifier, which has
    // run to its end before `ip link set down` returned: a second event would be queued now.
    assert_no_event_pending(&ctx);

    must(run("ip", &["link", "set", &scratch.ndev, "up"]));
    let ev = ctx.next_async_event(WAIT).unwrap();
    assert_eq!(ev, AsyncEvent::PortActive { port: 1 }, "{ev}");
    // rxe may report PORT_ACTIVE a second time (observed: ~190 ms later), nothing else.
    let more = events_until_quiet(&ctx);
    assert!(more.len() <= 1 && more.iter().all(|e| *e == AsyncEvent::PortActive { port: 1 }), "{more:?}");
    assert_eq!(ctx.query_port(1).unwrap().state(), PortState::Active);
    drop(ctx);
}

#[test]
fn an_address_on_the_netdev_reports_gid_change() {
    let scratch = ScratchRxe::create("gid", true);
    let ctx = scratch.open_active();
    // A documentation address, on a veth that exists only for this test.
    must(run("ip", &["addr", "add", "198.51.100.1/24", "dev", &scratch.ndev]));
    // The kernel adds the address's GID entry (::ffff:198.51.100.1; one entry with that value
    // is listed by ibv_query_gid, observed) from a work item, and dispatches GID_CHANGE from the
    // same cache update: wait (bounded) until the entry is in the table, then every event it
    // raised has been queued.
    let gid: std::net::Ipv6Addr = "::ffff:198.51.100.1".parse().unwrap();
    let len = ctx.query_port(1).unwrap().gid_tbl_len();
    let deadline = Instant::now() + WAIT;
    loop {
        // The table is filled from index 0 (observed: the link-local GID, then the address's);
        // the first all-zero entry ends the used part (querying all of it is slow under TCG).
        let used: Vec<Gid> = (0..=u8::MAX)
            .take_while(|&i| u32::from(i) < len)
            .map_while(|i| ctx.query_gid(1, i).ok().filter(|g| g.0 != [0; 16]))
            .collect();
        let entries = used.iter().filter(|g| g.0 == gid.octets()).count();
        if entries == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{entries} GID entries for {gid} after {WAIT:?}: {used:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Observed: exactly one event.
    let ev = ctx.next_async_event(WAIT).unwrap();
    assert_eq!(ev, AsyncEvent::GidChange { port: 1 }, "{ev}");
    assert_no_event_pending(&ctx);
    drop(ctx);
}

/// Nothing is queued on the context's async event channel (a look, no wait).
fn assert_no_event_pending(ctx: &Context) {
    match ctx.next_async_event(Duration::ZERO) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected no pending event, got {other:?}"),
    }
}

/// The descriptor of `events` is readable within `within` (poll(2): what an event loop of its
/// own would wait on).
#[allow(unsafe_code)] // poll(2): the tests have no safe wrapper for it
fn fd_readable(events: &AsyncEvents, within: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let fd = events.as_raw_fd();
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = i32::try_from(within.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd; `events` (and so its descriptor) lives for the whole call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    assert!(n >= 0, "poll(2) on the async events' fd {fd}: {}", std::io::Error::last_os_error());
    assert_eq!(pfd.revents & !libc::POLLIN, 0, "poll(2) on fd {fd}: revents {:#x}", pfd.revents);
    n == 1
}

#[test]
fn an_event_loop_of_its_own_reads_async_events_through_the_fd() {
    // The runtime-agnostic core: wait for the descriptor with poll(2), then read without
    // blocking until the queue is empty.
    let ctx = open();
    let events = ctx.async_events().unwrap();
    assert!(events.try_next_event().unwrap().is_none(), "an event was pending before the test raised one");
    assert!(!fd_readable(&events, Duration::ZERO), "the fd is readable with no event queued");
    let marker = SrqMarker::armed(&ctx);
    marker.fire();
    assert!(fd_readable(&events, WAIT), "no event within {WAIT:?}");
    let ev = events.try_next_event().unwrap().expect("the fd was readable");
    assert_eq!(ev, marker.event(), "{ev}");
    assert_eq!((ev.name(), ev.qp_num(), ev.port()), ("IBV_EVENT_SRQ_LIMIT_REACHED", None, None));
    assert!(events.try_next_event().unwrap().is_none(), "one arming raised two events");
    assert!(!fd_readable(&events, Duration::ZERO), "the fd stays readable after the queue was drained");
    assert_eq!(events.context().device_name(), ctx.device_name());
}

#[cfg(feature = "tokio")]
fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap()
}

/// Polls `f` once in the current task: true if it is still pending (it then has registered
/// its waker).
#[cfg(feature = "tokio")]
async fn pending_once<F: std::future::Future + Unpin>(f: &mut F) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx).is_pending())).await
}

#[cfg(feature = "tokio")]
#[test]
fn async_events_stream_an_srq_limit_event_through_tokio() {
    let ctx = open();
    let mut events = ctx.async_events().unwrap();
    let marker = SrqMarker::armed(&ctx);
    let rt = current_thread_runtime();
    let ev = rt.block_on(async {
        let mut next = Box::pin(tokio::time::timeout(WAIT, events.next()));
        // Registered with the reactor and waiting: nothing is queued yet.
        assert!(pending_once(&mut next).await, "an event was pending before the test raised one");
        marker.fire();
        next.await.expect("no event within WAIT").unwrap()
    });
    assert_eq!(ev, marker.event(), "{ev}");
    assert_eq!(ev.to_string().split(' ').next(), Some("IBV_EVENT_SRQ_LIMIT_REACHED"));
    // In a `while let` as a stream: nothing follows (bounded by the runtime's timer).
    let rest = rt.block_on(async {
        let mut rest = Vec::new();
        while let Ok(Ok(ev)) = tokio::time::timeout(Duration::from_millis(300), events.next()).await {
            rest.push(ev);
        }
        rest
    });
    assert_eq!(rest, vec![], "one arming raised more than one event");
}

#[cfg(feature = "tokio")]
#[test]
fn async_events_wait_is_bounded_by_tokio_timeout_and_consumes_nothing() {
    let ctx = open();
    let mut events = ctx.async_events().unwrap();
    let rt = current_thread_runtime();
    let start = Instant::now();
    let r = rt.block_on(async { tokio::time::timeout(Duration::from_millis(200), events.next()).await });
    let took = start.elapsed();
    assert!(r.is_err(), "expected the timer to expire, got {r:?}");
    assert!(took >= Duration::from_millis(200), "returned early, after {took:?}");
    assert!(took < Duration::from_secs(5), "the 200 ms wait took {took:?}");
    // The expired wait read nothing: an event raised afterwards is the next one, on either API.
    let marker = SrqMarker::armed(&ctx);
    marker.fire();
    assert_eq!(ctx.next_async_event(WAIT).unwrap(), marker.event());
    assert_no_event_pending(&ctx);
}

#[cfg(feature = "tokio")]
#[test]
fn a_dropped_pending_async_event_future_loses_no_event() {
    let ctx = open();
    let mut events = ctx.async_events().unwrap();
    let marker = SrqMarker::armed(&ctx);
    let rt = current_thread_runtime();
    let ev = rt.block_on(async {
        {
            let mut next = Box::pin(events.next());
            assert!(pending_once(&mut next).await, "an event was pending before the test raised one");
            marker.fire();
            // The reactor sees the descriptor readable and wakes the future's task, but the
            // future is dropped without being polled again.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(fd_readable(&events_probe(&ctx), Duration::ZERO), "the event is not queued");
        }
        tokio::time::timeout(WAIT, events.next()).await.expect("the event was lost").unwrap()
    });
    assert_eq!(ev, marker.event(), "{ev}");
    assert_no_event_pending(&ctx);
}

/// A second reader of `ctx`'s events, only to look at its descriptor.
#[cfg(feature = "tokio")]
fn events_probe(ctx: &Context) -> AsyncEvents {
    ctx.async_events().unwrap()
}

#[cfg(feature = "tokio")]
#[test]
fn two_async_readers_on_one_reactor_and_the_blocking_reader_each_event_goes_to_one() {
    let ctx = open();
    let (mut a, mut b) = (ctx.async_events().unwrap(), ctx.async_events().unwrap());
    let rt = current_thread_runtime();
    // Both registered with one reactor (each its own duplicate of async_fd): no EEXIST.
    let first = SrqMarker::armed(&ctx);
    let (ra, rb) = rt.block_on(async {
        let (mut na, mut nb) = (Box::pin(a.next()), Box::pin(b.next()));
        assert!(pending_once(&mut na).await && pending_once(&mut nb).await, "an event was pending");
        first.fire();
        let bound = Duration::from_millis(1500);
        tokio::join!(tokio::time::timeout(bound, na), tokio::time::timeout(bound, nb))
    });
    let got: Vec<AsyncEvent> =
        [&ra, &rb].iter().filter_map(|r| r.as_ref().ok()).map(|r| *r.as_ref().unwrap()).collect();
    assert_eq!(got, vec![first.event()], "the event must reach exactly one reader: a {ra:?}, b {rb:?}");

    // With both waiting, the blocking reader takes the next event; neither async reader gets
    // it, and both go on waiting (bounded).
    let second = SrqMarker::armed(&ctx);
    let (ra, rb, sync) = rt.block_on(async {
        let (mut na, mut nb) = (Box::pin(a.next()), Box::pin(b.next()));
        assert!(pending_once(&mut na).await && pending_once(&mut nb).await, "an event was pending");
        second.fire();
        let sync = ctx.next_async_event(WAIT);
        let bound = Duration::from_millis(500);
        let (ra, rb) = tokio::join!(tokio::time::timeout(bound, na), tokio::time::timeout(bound, nb));
        (ra, rb, sync)
    });
    assert_eq!(sync.unwrap(), second.event());
    assert!(ra.is_err() && rb.is_err(), "an async reader got an event the blocking reader read: {ra:?} {rb:?}");
}

#[cfg(feature = "tokio")]
#[test]
fn async_events_on_a_multi_threaded_runtime() {
    let ctx = open();
    let mut events = ctx.async_events().unwrap();
    let marker = SrqMarker::armed(&ctx);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let task = rt.spawn(async move {
        let mut next = Box::pin(events.next());
        let pending = pending_once(&mut next).await;
        tx.send(pending).unwrap();
        let ev = tokio::time::timeout(WAIT, next).await;
        (ev, std::thread::current().id())
    });
    // The worker has polled the future once (registered, pending) before the event is raised.
    assert!(rx.recv_timeout(WAIT).expect("the task never ran"), "an event was pending before the test raised one");
    marker.fire();
    let (ev, worker) = rt.block_on(async { tokio::time::timeout(WAIT, task).await }).expect("the task hung").unwrap();
    assert_eq!(ev.expect("no event within WAIT").unwrap(), marker.event());
    assert_ne!(worker, std::thread::current().id(), "the task ran on a worker thread");
    assert_no_event_pending(&ctx);
}

/// Outside a runtime with nothing registered, and outside one with a registration made by a
/// current-thread runtime (here shut down since), a poll is a typed error (no panic, no hang);
/// polled by a task of another runtime, the reader is registered there and gets the next event.
/// (A multi-threaded runtime's registration, kept outside a runtime, reports its reactor's
/// shutdown: unit test
/// `channel::tests::a_kept_registration_whose_runtime_shuts_down_wakes_its_waiter_with_an_error`.)
#[cfg(feature = "tokio")]
#[test]
fn async_events_outside_a_runtime_are_typed_errors_and_another_runtime_takes_over() {
    use std::task::{Context as TaskContext, Poll, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let ctx = open();
    let mut events = ctx.async_events().unwrap();
    let waker = Waker::from(std::sync::Arc::new(Noop));
    match events.poll_next_event(&mut TaskContext::from_waker(&waker)) {
        Poll::Ready(Err(Error::Verb { verb: Verb::GetAsyncEvent, context, .. })) => {
            assert!(context.contains("outside a tokio runtime"), "{context}")
        }
        other => panic!("expected a typed error naming ibv_get_async_event, got {other:?}"),
    }
    // Registered with a current-thread runtime (then shut down): polled outside any runtime, a
    // typed error naming it instead of a wait nothing ends.
    let rt = current_thread_runtime();
    rt.block_on(async {
        let mut next = Box::pin(events.next());
        assert!(pending_once(&mut next).await, "an event was pending");
    });
    drop(rt);
    match events.poll_next_event(&mut TaskContext::from_waker(&waker)) {
        Poll::Ready(Err(Error::Verb { verb: Verb::GetAsyncEvent, context, .. })) => {
            assert!(context.contains("current-thread runtime"), "{context}")
        }
        other => panic!("expected a typed error naming ibv_get_async_event, got {other:?}"),
    }
    // A task of another runtime: registered with that one, it gets the next event, and
    // nothing was consumed meanwhile.
    let other = current_thread_runtime();
    let marker = SrqMarker::armed(&ctx);
    marker.fire();
    let ev = other
        .block_on(async { tokio::time::timeout(WAIT, events.next()).await })
        .expect("no event within WAIT in the other runtime")
        .unwrap();
    assert_eq!(ev, marker.event());
}

#[test]
fn a_qp_on_an_srq_moved_to_err_reports_last_wqe_reached() {
    // rxe's one QP event: a QP attached to an SRQ that enters the error state will take no
    // more receives from it (IBV_EVENT_QP_LAST_WQE_REACHED, naming the QP).
    let ctx = open();
    let SrqMarker { r, srq, s, _receives, src, _cq, _pd } = SrqMarker::armed(&ctx);
    let qp_num = r.qp_num();
    let r = r.to_error().unwrap();
    let ev = ctx.next_async_event(WAIT).unwrap();
    assert_eq!(ev, AsyncEvent::LastWqeReached { qp_num }, "{ev}");
    assert_eq!((ev.name(), ev.qp_num()), ("IBV_EVENT_QP_LAST_WQE_REACHED", Some(qp_num)));
    assert_eq!(ev.to_string(), format!("IBV_EVENT_QP_LAST_WQE_REACHED on QP {qp_num:#x}"));
    assert_no_event_pending(&ctx);
    // The QP outside the SRQ raises nothing.
    let _s = s.to_error().unwrap();
    drop((r, srq, src));
    assert_eq!(events_until_marker(&ctx), vec![]);
}

#[cfg(feature = "tokio")]
#[test]
fn async_events_report_a_qp_event_with_its_qp_number() {
    let ctx = open();
    let mut events = ctx.async_events().unwrap();
    let SrqMarker { r, srq: _srq, s: _s, _receives, src: _src, _cq, _pd } = SrqMarker::armed(&ctx);
    let qp_num = r.qp_num();
    let rt = current_thread_runtime();
    let (ev, _r) = rt.block_on(async {
        let mut next = Box::pin(tokio::time::timeout(WAIT, events.next()));
        assert!(pending_once(&mut next).await, "an event was pending before the test raised one");
        let r = r.to_error().unwrap();
        (next.await.expect("no event within WAIT").unwrap(), r)
    });
    assert_eq!(ev, AsyncEvent::LastWqeReached { qp_num }, "{ev}");
    assert_eq!(ev.qp_num(), Some(qp_num));
    assert_no_event_pending(&ctx);
}
