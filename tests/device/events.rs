//! Asynchronous events (`Context::next_async_event`): what Soft-RoCE actually reports.
//!
//! Observed on rxe (kernel 6.12, rdma-core 44), and asserted below:
//! - a CQ overrun: one `IBV_EVENT_CQ_ERR` naming the CQ per completion that did not fit (the
//!   completion is lost, the QP goes on). The library makes an overrun unreachable (a QP's
//!   queue depths must fit in its CQs' room), which `a_cq_cannot_be_overrun_its_queues_must_fit`
//!   shows;
//! - the link of the device's netdev going down: one `IBV_EVENT_PORT_ERR` on port 1; coming back
//!   up: `IBV_EVENT_PORT_ACTIVE` on port 1, once or twice (twice observed, ~190 ms apart);
//! - an address added to the netdev: `IBV_EVENT_GID_CHANGE` on port 1.
//!
//! Also observed, and *not* reported by rxe as async events (the error only shows in the
//! completions): an RDMA WRITE with a bad rkey (REM_ACCESS_ERR at the requester, nothing at the
//! responder), a receive buffer too small (REM_OP_ERR / LOC_QP_OP_ERR), moving a QP to ERR with
//! `ibv_modify_qp`, and a peer QP that was destroyed (no completion at all within 15 s).

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

/// Raises an event the test can recognise and returns every event read before it: a fresh
/// SRQ of its own, armed to report when fewer than 2 of its 2 receives remain, consumes one
/// receive (one SRQ_LIMIT_REACHED naming it), with a bounded wait for it. Events queued earlier
/// come first (the event queue is a FIFO), so this shows that nothing else was pending without
/// waiting for a quiet period. Needs traffic, so only on the device under test (not on a
/// scratch device whose link is down).
fn events_until_marker(ctx: &Context) -> Vec<AsyncEvent> {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let srq = pd.create_srq(4).unwrap();
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 0, max_recv_sge: 0, ..QpCaps::default() };
    let r = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps).srq(&srq)).unwrap();
    let s_caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, max_recv_sge: 1, ..caps };
    let s = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(s_caps)).unwrap();
    let (es, er) = (s.endpoint(PORT, gid_index(), 11).unwrap(), r.endpoint(PORT, gid_index(), 13).unwrap());
    let (s, _r) = (connect_rc(s, Access::NONE, &es, &er), connect_rc(r, Access::NONE, &er, &es));
    let chunks = pd.alloc_mr(2 * 64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap();
    let _receives: Vec<_> = chunks.into_iter().map(|c| srq.post_recv_owned(wr::Recv::new(c)).unwrap()).collect();
    srq.arm_limit(2).unwrap();
    let want = AsyncEvent::SrqLimitReached { srq: srq.handle_id() };
    let mut src = pd.alloc_mr(8, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(1);
    scope(|sc| {
        let t = sc.post_send(&s, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(sc.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
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
    assert!(matches!(e, Error::InvalidArgument { verb: "ibv_create_qp", .. }), "{e:?}");
    // Both queues on one CQ: their depths add up.
    let e = pd.create_qp::<RC>(&QpConfig::new(&small).caps(QpCaps { max_send_wr: room, max_recv_wr: 1, ..caps(1) }));
    assert!(matches!(e, Err(Error::InvalidArgument { verb: "ibv_create_qp", .. })), "{e:?}");
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
struct ScratchRxe {
    dev: String,
    ndev: String,
    peer: String,
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{cmd} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn must(r: Result<(), String>) {
    if let Err(e) = r {
        panic!("{e} (this test creates its own rxe device on a veth pair: it needs root, iproute2 and the rdma_rxe module, as inside scripts/softroce-run)");
    }
}

impl ScratchRxe {
    /// `tag` keeps the names of tests running in parallel apart.
    fn create(tag: &str) -> ScratchRxe {
        let s = ScratchRxe { dev: format!("tvrxe_{tag}"), ndev: format!("tv{tag}0"), peer: format!("tv{tag}1") };
        // Leftovers of an interrupted run.
        s.remove();
        must(run("ip", &["link", "add", &s.ndev, "type", "veth", "peer", "name", &s.peer]));
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
    fn open_active(&self) -> Context {
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
    let scratch = ScratchRxe::create("port");
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
    let scratch = ScratchRxe::create("gid");
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
