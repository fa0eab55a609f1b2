//! Asynchronous events (`Context::next_async_event`): what Soft-RoCE actually reports.
//!
//! Observed on rxe (kernel 6.12, rdma-core 44), and asserted below:
//! - a CQ overrun: one `IBV_EVENT_CQ_ERR` naming the CQ per completion that did not fit (the
//!   completion is lost, the QP goes on);
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

/// Raises an event the test can recognise and returns every event read before it: a fresh CQ
/// of its own is overrun by one completion (one CQ_ERR naming it, as the test below shows),
/// with a bounded wait for it. Events queued earlier come first (the event queue is a FIFO),
/// so this shows that nothing else was pending without waiting for a quiet period. Needs
/// traffic, so only on the device under test (not on a scratch device whose link is down).
fn events_until_marker(ctx: &Context) -> Vec<AsyncEvent> {
    let pd = ctx.alloc_pd().unwrap();
    let marker = ctx.create_cq(1).unwrap();
    let other = ctx.create_cq(16).unwrap();
    let pair = rc_pair(&pd, &marker, &other, QpAccess::REMOTE_WRITE, QpCaps::default());
    let src = pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    let dst = pd.alloc_mr(8, access::REMOTE_RW).unwrap();
    let want = AsyncEvent::CqError { cq: marker.handle_id() };
    let mut before = Vec::new();
    // The lost completion can never be collected: the scope forces the marker's QP to RESET.
    let r = scope_with_timeout(Duration::from_secs(1), |s| {
        for _ in 0..=marker.capacity() {
            let t = s.post_send(&pair.a, Write::new(src.slice(..).unwrap(), dst.remote(..).unwrap())).unwrap();
            std::mem::forget(t);
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev =
                ctx.next_async_event(left).unwrap_or_else(|e| panic!("the marker's CQ_ERR ({before:?} before): {e}"));
            if ev == want {
                break;
            }
            before.push(ev);
            assert!(before.len() < 64, "an endless stream of events: {before:?}");
        }
    });
    assert!(matches!(r, Err(Error::QpBroken { qp_num }) if qp_num == pair.a.qp_num()), "{r:?}");
    before
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
fn a_cq_overrun_reports_cq_err_naming_the_cq() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let small = ctx.create_cq(1).unwrap();
    let other = ctx.create_cq(64).unwrap();
    let pair = rc_pair(&pd, &small, &other, QpAccess::REMOTE_WRITE, QpCaps::default());
    let src = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let dst = pd.alloc_mr(64, access::REMOTE_RW).unwrap();
    let extra = 4;
    let n = small.capacity() as usize + extra;

    let r = scope_with_timeout(Duration::from_secs(1), |s| {
        for _ in 0..n {
            let t = s.post_send(&pair.a, Write::new(src.slice(..8).unwrap(), dst.remote(..8).unwrap())).unwrap();
            std::mem::forget(t);
        }
        // Nothing polls the CQ inside the scope: every completion beyond its capacity is lost,
        // and each loss is reported.
        for i in 0..extra {
            let ev = ctx.next_async_event(WAIT).unwrap_or_else(|e| panic!("CQ_ERR {i}: {e}"));
            assert_eq!(ev, AsyncEvent::CqError { cq: small.handle_id() }, "{ev}");
            assert_ne!(ev, AsyncEvent::CqError { cq: other.handle_id() });
        }
        // Every completion has been attempted (the lost ones are the last 4). A fifth CQ_ERR
        // would be queued before the marker's: the next event must be the marker.
        assert_eq!(events_until_marker(&ctx), vec![], "one CQ_ERR per lost completion");
    });
    // The lost completions can never be collected: the scope had to force the QP to RESET.
    assert!(matches!(r, Err(Error::QpBroken { qp_num }) if qp_num == pair.a.qp_num()), "{r:?}");
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
        let used: Vec<Gid> = (0..len).map_while(|i| ctx.query_gid(1, i).ok().filter(|g| g.0 != [0; 16])).collect();
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
