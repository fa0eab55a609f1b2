//! The bad flows of RC that safe code can still reach (../shared/notes/softroce.md, "Expected
//! error outcomes on rxe"): receiver not ready, dead peer, a peer process killed mid-transfer,
//! a receive buffer too small, atomics without the rights, a path MTU above the port's, and
//! registrations and queues of impossible sizes. Each asserts the exact completion status or
//! typed error, every wait is bounded, and where a QP breaks, the test recovers it (reset,
//! reconnect with fresh PSNs) and moves data again. A reset leaves no stale completion in a
//! CQ to take the room of the requests after it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use typed_verbs::access::AccessSet;
use typed_verbs::device::Mtu;
use typed_verbs::prelude::*;
use typed_verbs::qp::ObservedState;
use typed_verbs::wc::CompletionSource;

use crate::common::*;

/// How long a test waits for the first error completion of a broken connection.
const ERROR_BOUND: Duration = Duration::from_secs(10);

/// What the RNR and dead-peer tests assert their error took. The configured timers give
/// milliseconds (measured on rxe under QEMU/TCG: RNR_RETRY_EXC_ERR after ~9 ms, RETRY_EXC_ERR
/// after ~30 ms); the margin is for a loaded emulator.
const TIMER_BOUND: Duration = Duration::from_secs(2);

/// Waits (bounded) until `qp` is observed in `want`: rxe writes the error completion before it
/// moves the QP to ERR (rxe_comp.c: `do_complete` then `rxe_qp_error`), so a query right after
/// the completion may still see RTS for a moment.
fn wait_state<T: typed_verbs::transport::Transport, S: typed_verbs::transport::QpState>(
    qp: &Qp<T, S>,
    want: ObservedState,
) -> (ObservedState, Duration) {
    let start = Instant::now();
    loop {
        let st = qp.query_state().expect("ibv_query_qp");
        if st == want || start.elapsed() > Duration::from_secs(5) {
            return (st, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Resets both QPs of a broken connection and connects them again with fresh PSNs, default
/// timers; returns them in RTS.
fn reconnect(
    a: Qp<RC, RTS>,
    b: Qp<RC, RTS>,
    access: impl AccessSet,
    psn_a: u32,
    psn_b: u32,
) -> (Qp<RC, RTS>, Qp<RC, RTS>) {
    let a = a.reset().expect("reset a");
    let b = b.reset().expect("reset b");
    assert_eq!(a.query_state().unwrap(), ObservedState::Reset);
    assert_eq!(a.outstanding(), (0, 0));
    let ea = a.endpoint(PORT, gid_index(), psn_a).unwrap();
    let eb = b.endpoint(PORT, gid_index(), psn_b).unwrap();
    (connect_rc(a, access, &ea, &eb), connect_rc(b, access, &eb, &ea))
}

/// One SEND of `len` bytes from `a` to `b` (a receive posted first); asserts both completions
/// succeed and the bytes arrived.
fn send_ok(pd: &Pd, a: &Qp<RC, RTS>, b: &Qp<RC, RTS>, len: usize, seed: u8) {
    let mut src = pd.alloc_mr(len, access::LOCAL_READ).unwrap();
    fill(&mut src, seed);
    let mut dst = pd.alloc_mr(len, access::LOCAL_RW).unwrap();
    scope(|s| {
        let r = s.post_recv(b, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::Send), "{c:?}");
        let (c, _) = s.wait(r, WAIT).unwrap();
        assert_eq!((c.status(), c.byte_len() as usize), (WcStatus::Success, len), "{c:?}");
    })
    .unwrap();
    assert_eq!(dst.as_slice(), src.as_slice());
}

// --- receiver not ready ---------------------------------------------------------------------

#[test]
fn rnr_retry_exceeded_then_flush_then_reset_and_reconnect() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0x10).unwrap();
    let eb = b.endpoint(PORT, gid_index(), 0x20).unwrap();
    // The sender gives up after one RNR retry; the responder asks for the shortest RNR wait
    // (timer code 1: 0.01 ms) in its RNR NAKs.
    let a = connect_rc_with(a, Access::NONE, &ea, &eb, |_| {}, |rts| rts.rnr_retry = 1);
    let b = connect_rc_with(b, Access::NONE, &eb, &ea, |rtr| rtr.min_rnr_timer = 1, |_| {});
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    fill(&mut src, 1);

    // No receive posted at b.
    let started = Instant::now();
    let (first, elapsed, flushed) = scope(|s| {
        let t = s.post_send(&a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        let (c, view) = s.wait(t, ERROR_BOUND).expect("the RNR error completes within the bound");
        let elapsed = started.elapsed();
        // The QP went to ERR behind its type: a later post is accepted and flushed.
        let t = s.post_send(&a, wr::Send::new(view)).unwrap();
        let (flushed, _view) = s.wait(t, WAIT).unwrap();
        (c, elapsed, flushed)
    })
    .unwrap();
    eprintln!("RNR: {:?} after {elapsed:?}", first.status());
    assert_eq!(first.status(), WcStatus::RnrRetryExcErr, "{first:?}");
    assert_eq!(first.qp_num(), a.qp_num());
    assert!(elapsed < TIMER_BOUND, "{elapsed:?}");
    assert_eq!(flushed.status(), WcStatus::WrFlushErr, "{flushed:?}");
    let (state, after) = wait_state(&a, ObservedState::Err);
    assert_eq!(state, ObservedState::Err, "the sender is in ERR after RNR_RETRY_EXC_ERR");
    eprintln!("RNR: sender observed in ERR {after:?} after the completion was consumed");
    assert_eq!(b.query_state().unwrap(), ObservedState::Rts, "the responder is not affected");
    assert_eq!(a.outstanding(), (0, 0));

    // Recover: reset both, reconnect with fresh PSNs, traffic resumes.
    let (a, b) = reconnect(a, b, Access::NONE, 0x1234, 0x5678);
    send_ok(&pd, &a, &b, 64, 2);
    send_ok(&pd, &b, &a, 100, 3);
    assert_eq!(a.query_state().unwrap(), ObservedState::Rts);
}

// --- dead peer ------------------------------------------------------------------------------

#[test]
fn dead_peer_retry_exceeded_hands_the_buffers_back_then_reconnect_to_a_new_peer() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0x100).unwrap();
    let eb = b.endpoint(PORT, gid_index(), 0x200).unwrap();
    // ACK timeout code 10 (4.096 us * 2^10 = 4.2 ms), one retry: 8.4 ms configured.
    let a = connect_rc_with(
        a,
        Access::NONE,
        &ea,
        &eb,
        |_| {},
        |rts| {
            rts.timeout = 10;
            rts.retry_cnt = 1;
        },
    );
    let b = connect_rc(b, Access::NONE.remote_write(), &eb, &ea);
    let target = pd.alloc_mr(4096, access::REMOTE_RW).unwrap();
    let remote = target.remote(..256).unwrap();
    drop(b); // the peer QP is destroyed: nothing answers a's packets any more

    let mut chunks = pd.alloc_mr(2 * 256, access::LOCAL_RW).unwrap().into_chunks(256).unwrap();
    let mut chunk = chunks.pop().unwrap();
    chunk.as_mut_slice().fill(0xab);
    let addr = chunk.addr();
    let mut view_mr = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    fill(&mut view_mr, 4);

    let started = Instant::now();
    let token = a.post_send_owned(wr::Write::new(chunk, remote)).unwrap();
    let (c, chunk) = token.wait(ERROR_BOUND).expect("RETRY_EXC_ERR within the bound");
    let elapsed = started.elapsed();
    eprintln!("dead peer: {:?} after {elapsed:?} (configured: 4.096 us * 2^10 * 2 = 8.4 ms)", c.status());
    assert_eq!(c.status(), WcStatus::RetryExcErr, "{c:?}");
    assert_eq!(c.source(), CompletionSource::Own);
    // Measured ~30 ms on rxe under TCG (rxe's retransmit timer counts whole jiffies).
    assert!(elapsed < TIMER_BOUND, "{elapsed:?}");
    // The owned buffer comes back with the error completion, usable.
    assert_eq!(chunk.addr(), addr);
    assert!(chunk.as_slice().iter().all(|&x| x == 0xab));
    // A scoped view posted after the failure comes back with a flush.
    scope(|s| {
        let t = s.post_send(&a, wr::Send::new(view_mr.slice(..).unwrap())).unwrap();
        let (c, view) = s.wait(t, WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
        assert_eq!(view.len(), 64);
    })
    .unwrap();
    assert_eq!(wait_state(&a, ObservedState::Err).0, ObservedState::Err);
    view_mr.as_mut_slice().fill(5); // the view's region is ours again

    // Reconnect a to a new peer (fresh PSNs on both sides) and move data both ways.
    let a = a.reset().expect("reset");
    let c_qp = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0x300).unwrap();
    let ec = c_qp.endpoint(PORT, gid_index(), 0x400).unwrap();
    let a = connect_rc(a, Access::NONE, &ea, &ec);
    let c_qp = connect_rc(c_qp, Access::NONE.remote_write(), &ec, &ea);
    send_ok(&pd, &a, &c_qp, 200, 6);
    let token = a.post_send_owned(wr::Write::new(chunk, target.remote(..256).unwrap())).unwrap();
    let (c, _chunk) = token.wait(WAIT).unwrap();
    assert_eq!(c.status(), WcStatus::Success, "{c:?}");
    let mut got = [0u8; 256];
    target.read_volatile_into(0, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0xab));
    drop(chunks);
}

/// The same dead peer, but the retry timers outlast the scope's drain: the scope cannot wait for
/// the error completion, so it flushes the QP, forces it to RESET and reports `QpBroken`; the
/// buffer is free when `scope` returns, the QP refuses posts until it is reset and reconnected.
#[test]
fn a_scope_that_cannot_drain_a_dead_peer_breaks_the_qp_until_it_is_reset() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0x900).unwrap();
    let eb = b.endpoint(PORT, gid_index(), 0xa00).unwrap();
    // ACK timeout code 20 (4.3 s), 7 retries: RETRY_EXC_ERR only after ~34 s (never on rxe,
    // which retries forever at retry_cnt 7).
    let a = connect_rc_with(a, Access::NONE, &ea, &eb, |_| {}, |rts| rts.timeout = 20);
    let b = connect_rc(b, Access::NONE.remote_write(), &eb, &ea);
    let target = pd.alloc_mr(256, access::REMOTE_RW).unwrap();
    let remote = target.remote(..).unwrap();
    drop(b);
    let mut src = pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    fill(&mut src, 10);

    let started = Instant::now();
    let r = scope_with_timeout(Duration::from_millis(500), |s| {
        let _dropped = s.post_send(&a, wr::Write::new(src.slice(..).unwrap(), remote)).unwrap();
        "the closure's result is lost"
    });
    let took = started.elapsed();
    eprintln!("undrainable scope returned {r:?} after {took:?}");
    match r {
        Err(Error::QpBroken { qp_num }) => assert_eq!(qp_num, a.qp_num()),
        other => panic!("expected QpBroken, got {other:?}"),
    }
    assert!(took < Duration::from_secs(10), "drain 0.5 s + flush wait at most 5 s: {took:?}");
    src.as_mut_slice().fill(11); // the device no longer uses it
    assert_eq!(a.outstanding(), (0, 0));
    assert_eq!(a.query_state().unwrap(), ObservedState::Reset, "the drain forced the QP to RESET");
    // Its type still says RTS, but it refuses posts until reset.
    scope(|s| match s.post_send(&a, wr::Send::new(src.slice(..).unwrap())) {
        Err(e) => assert!(matches!(e.error, Error::QpBroken { .. }), "{:?}", e.error),
        Ok(_) => panic!("a broken QP accepted a post"),
    })
    .unwrap();
    let a = a.reset().expect("reset");
    let c_qp = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0xb00).unwrap();
    let ec = c_qp.endpoint(PORT, gid_index(), 0xc00).unwrap();
    let a = connect_rc(a, Access::NONE, &ea, &ec);
    let c_qp = connect_rc(c_qp, Access::NONE, &ec, &ea);
    send_ok(&pd, &a, &c_qp, 128, 12);
}

// --- peer process killed mid-transfer -------------------------------------------------------

/// True once some socket listens on TCP `port` (from /proc/net/tcp{,6}; connecting to find out
/// would take the C server's one accept).
fn listening(port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        let table = std::fs::read_to_string(f).unwrap_or_default();
        table.lines().skip(1).any(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.len() > 3 && fields[1].ends_with(&suffix) && fields[3] == "0A"
        })
    })
}

/// Packets the client must have sent before the server is killed (of the test's 1,000,000
/// iterations: far from the end, well into the transfer).
const MID_TRANSFER: u32 = 20;

/// The hexadecimal number after `key` on the first line of `out` containing `line` (the C
/// tools' address lines: `QPN 0x000011, PSN 0xabcdef`).
fn hex_after(out: &str, line: &str, key: &str) -> Option<u32> {
    let l = out.lines().find(|l| l.contains(line))?;
    let at = l.find(key)? + key.len();
    let digits = l[at..].trim_start_matches("0x");
    let end = digits.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(digits.len());
    u32::from_str_radix(&digits[..end], 16).ok()
}

/// The send queue PSN of QP `qpn` on the device under test, as the kernel reports it
/// (`rdma res show qp lqpn N`: `... sq-psn N ...`); `None` while the QP is not listed.
fn sq_psn(qpn: u32) -> Option<u32> {
    let out = std::process::Command::new("rdma")
        .args(["res", "show", "qp", "link", &format!("{}/{PORT}", device_name()), "lqpn", &qpn.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run `rdma` (iproute2): {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    words.by_ref().find(|&w| w == "sq-psn")?;
    words.next()?.parse().ok()
}

#[test]
fn killing_the_c_server_mid_transfer_fails_our_client_within_its_timeout() {
    let tcp_port = TcpPort::KilledCServer.get();
    const CLIENT_TIMEOUT_S: u64 = 5;
    let common: Vec<String> = vec![
        "-d".into(),
        device_name(),
        "-g".into(),
        gid_index().to_string(),
        "-p".into(),
        tcp_port.to_string(),
        "-n".into(),
        "1000000".into(),
    ];
    let c_tool = ["/usr/bin/ibv_rc_pingpong", "/usr/local/bin/ibv_rc_pingpong"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("ibv_rc_pingpong (ibverbs-utils) is installed");
    let mut server = Proc::spawn("ibv_rc_pingpong (server)", &c_tool, &common);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !listening(tcp_port) {
        assert!(Instant::now() < deadline, "ibv_rc_pingpong never listened on {tcp_port}:\n{}", server.output());
        if let Some(st) = server.poll() {
            panic!("ibv_rc_pingpong exited early ({st}):\n{}", server.output());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut args = common.clone();
    args.extend(["--timeout".into(), CLIENT_TIMEOUT_S.to_string(), "127.0.0.1".into()]);
    let mut client = Proc::spawn("rc_pingpong (client)", &example("rc_pingpong"), &args);
    if let Err(e) = client.wait_for_line("remote address", Duration::from_secs(60)) {
        panic!("our client did not connect: {e}\n{}\n--- server:\n{}", client.output(), server.output());
    }
    // Wait until the ping-pong is demonstrably under way: the client's send queue PSN (as the
    // kernel reports it for its QP) has moved MID_TRANSFER packets past its initial PSN. Then
    // kill the server mid-transfer.
    let out = client.output();
    let qpn = hex_after(&out, "local address", "QPN ").unwrap_or_else(|| panic!("no local QPN:\n{out}"));
    let psn0 = hex_after(&out, "local address", "PSN ").unwrap_or_else(|| panic!("no local PSN:\n{out}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sent = sq_psn(qpn).map(|psn| psn.wrapping_sub(psn0) & 0xff_ffff);
        if sent.is_some_and(|n| n >= MID_TRANSFER) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the client's QP {qpn:#x} sent {sent:?} packets in 60 s, not {MID_TRANSFER}:\n{}\n--- server:\n{}",
            client.output(),
            server.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.poll().is_none(), "the server finished already:\n{}", server.output());
    server.stop(); // kills and reaps it
                   // Bound: the client's completion timeout, plus the scope's 1 s drain and the flush.
    let bound = Duration::from_secs(CLIENT_TIMEOUT_S + 20);
    let Some((status, took)) = client.wait_exit(bound) else {
        panic!("our client did not exit within {bound:?} of the server's death:\n{}", client.output());
    };
    let out = client.output();
    eprintln!("client exited {status} {took:?} after the kill:\n{out}");
    assert!(!status.success(), "our client must fail:\n{out}");
    assert_eq!(status.code(), Some(1), "{out}");
    let err_line =
        out.lines().find(|l| l.starts_with("rc_pingpong: ")).unwrap_or_else(|| panic!("no error line:\n{out}"));
    // Where the kill lands decides the outcome. Either the client waits for the server's next
    // message, which never comes (its receive wait times out after --timeout; a receiver cannot
    // detect a dead peer in RC), or the client's SEND is never ACKed: the dead server's QP is
    // destroyed and rxe drops packets for it unanswered (rxe_recv.c hdr_check), so only the
    // retransmit timer (code 14, ~67 ms) runs. The example sets retry_cnt 7, as ibv_rc_pingpong
    // does. By the IBTA that is 7 retries, then RETRY_EXC_ERR; but rxe treats 7 as "retry
    // forever" (rxe_comp.c, COMPST_ERROR_RETRY: `if (qp->comp.retry_cnt != 7)
    // qp->comp.retry_cnt--;`), so on Soft-RoCE the SEND never completes and the client's send
    // wait times out instead (observed: completer_retry_err +87, retry_exceeded_err +0 in the
    // ~5.8 s until the client gave up). Either way the scope then forces the QP to RESET.
    let send_failed = err_line.contains(": work request on QP") && err_line.contains("completed with RetryExcErr");
    let timed_out = |what: &str| {
        err_line.contains(&format!("timed out after {CLIENT_TIMEOUT_S}s waiting for the completion of {what} request"))
    };
    let soft_roce = is_soft_roce(&open());
    let send_timed_out = soft_roce && timed_out("send");
    let recv_timed_out = timed_out("receive");
    assert!(send_failed || send_timed_out || recv_timed_out, "unexpected failure: {err_line}");
    // Then the scope's drain forced the QP to RESET: `Error::QpBroken`, which says it refuses posts.
    assert!(err_line.contains("refuses posts"), "{err_line}");
    assert!(took < bound, "{took:?}");
}

// --- receive buffer too small ---------------------------------------------------------------

#[test]
fn rc_receive_buffer_too_small_fails_both_sides() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    fill(&mut src, 7);
    let mut rbuf = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let (sent, received) = scope(|s| {
        let r = s.post_recv(&p.b, wr::Recv::new(rbuf.slice_mut(..16).unwrap())).unwrap();
        let t = s.post_send(&p.a, wr::Send::new(src.slice(..64).unwrap())).unwrap();
        let (sent, _) = s.wait(t, ERROR_BOUND).unwrap();
        let (received, _) = s.wait(r, ERROR_BOUND).unwrap();
        (sent, received)
    })
    .unwrap();
    eprintln!("too small: sender {:?}, receiver {:?}", sent.status(), received.status());
    // softroce.md (from rdma-core's tests) expects REM_INV_REQ_ERR on both sides. Observed on
    // rxe (kernel 6.12): REM_OP_ERR at the sender and LOC_QP_OP_ERR on the receiver's receive,
    // the pair rxe_resp.c uses for a "malformed WQE" (class A error) rather than the length
    // error (REM_INV_REQ_ERR) path: the overlong SEND fails the copy into the receive's
    // scatter list with an errno other than ENOSPC. Another device reports its own pair (a
    // length error); both sides fail either way.
    if is_soft_roce(&ctx) {
        assert_eq!(sent.status(), WcStatus::RemOpErr, "{sent:?}");
        assert_eq!(received.status(), WcStatus::LocQpOpErr, "{received:?}");
    } else {
        assert!(!sent.is_success() && !received.is_success(), "{sent:?} {received:?}");
    }
    assert_eq!(wait_state(&p.a, ObservedState::Err).0, ObservedState::Err);
    assert_eq!(wait_state(&p.b, ObservedState::Err).0, ObservedState::Err);
    assert_eq!((p.a.outstanding(), p.b.outstanding()), ((0, 0), (0, 0)));
    // Recover and send what fits.
    let (a, b) = reconnect(p.a, p.b, Access::NONE, 0x77, 0x88);
    send_ok(&pd, &a, &b, 16, 8);
}

// --- atomics without the rights -------------------------------------------------------------

/// A FAA from a to `remote` on a pair whose responder grants `access`; its status.
fn faa_status(
    access_b: impl AccessSet,
    target_rights: impl FnOnce(&Pd) -> (Box<dyn std::any::Any>, RemoteSlice<access::RemoteAll>),
) -> WcStatus {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0x500).unwrap();
    let eb = b.endpoint(PORT, gid_index(), 0x600).unwrap();
    let a = connect_rc(a, Access::NONE, &ea, &eb);
    let b = connect_rc(b, access_b, &eb, &ea);
    let (_keep, remote) = target_rights(&pd);
    let mut result = pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    let c = scope(|s| {
        let t = s.post_send(&a, wr::FetchAdd::new(result.slice_mut(..).unwrap(), remote, 1)).unwrap();
        s.wait(t, ERROR_BOUND).unwrap().0
    })
    .unwrap();
    assert_eq!(wait_state(&a, ObservedState::Err).0, ObservedState::Err, "{c:?}");
    let _ = b;
    c.status()
}

#[test]
fn atomic_on_a_region_without_remote_atomic_is_a_remote_access_error() {
    // The rkey of a REMOTE_RW region, claimed on the wire to carry REMOTE_ATOMIC: the type
    // cannot know, the responder checks.
    let status = faa_status(Access::NONE.remote_write().remote_read().remote_atomic(), |pd| {
        let mr = pd.alloc_mr(64, access::REMOTE_RW).unwrap();
        let forged = RemoteSlice::<access::RemoteAll>::from_wire(mr.addr(), 8, mr.remote(..).unwrap().rkey());
        (Box::new(mr), forged)
    });
    assert_eq!(status, WcStatus::RemAccessErr);
}

#[test]
fn atomic_towards_a_qp_without_remote_atomic_access_is_a_remote_invalid_request() {
    let status = faa_status(Access::NONE.remote_write().remote_read(), |pd| {
        let mr = pd.alloc_mr(64, access::REMOTE_ALL).unwrap();
        let remote = mr.remote(0..8).unwrap();
        (Box::new(mr), remote)
    });
    assert_eq!(status, WcStatus::RemInvReqErr);
}

// --- path MTU above the port's --------------------------------------------------------------

#[test]
fn a_path_mtu_above_the_port_mtu_is_refused_and_the_qp_stays_in_init() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let active = ctx.query_port(PORT).unwrap().active_mtu().expect("an active MTU");
    assert!(active < Mtu::Mtu4096, "this test needs a port MTU below 4096 (rxe over veth: 1024), got {active:?}");
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0x700).unwrap();
    let eb = b.endpoint(PORT, gid_index(), 0x800).unwrap();
    let a = a.to_init(&ConnectedInit::new(PORT, Access::NONE)).unwrap();
    let av = AddressVector::global(PORT, eb.gid, gid_index());
    let too_big = RcRtr { path_mtu: Mtu::Mtu4096, ..RcRtr::new(av, eb.qp_num, eb.psn) };
    let e = a.to_rtr(&too_big).expect_err("path MTU 4096 above the port's");
    match &e.error {
        Error::InvalidArgument { verb, reason } => {
            assert_eq!(*verb, "ibv_modify_qp");
            assert!(reason.contains("4096") && reason.contains(&active.bytes().to_string()), "{reason}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let a = e.qp;
    assert_eq!(a.query_state().unwrap(), ObservedState::Init, "the QP is handed back in INIT");
    // The same QP now transitions with the port's MTU and carries traffic.
    let a = a.to_rtr(&RcRtr { path_mtu: active, ..too_big }).unwrap().to_rts(&RcRts::new(ea.psn)).unwrap();
    let b = connect_rc(b, Access::NONE, &eb, &ea);
    send_ok(&pd, &a, &b, 3000, 9); // several MTU-sized packets
}

// --- impossible sizes -----------------------------------------------------------------------
// basics.rs covers a zero-length region and CQs of 0 and max_cqe + 1 entries.

#[test]
fn impossible_sizes_are_typed_errors() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    // 1 PiB: more than the address space; the allocation fails, no abort.
    match pd.alloc_mr(1 << 50, access::LOCAL_RW) {
        Err(Error::Verb { verb: Verb::RegMr, source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::OutOfMemory, "{source}")
        }
        other => panic!("1 PiB region: {other:?}"),
    }
    // A length the allocator cannot even lay out.
    assert_refused(pd.alloc_mr(usize::MAX, access::REMOTE_RW), "ibv_reg_mr", "bytes cannot be allocated");
    // Shared receive queues of 0 and above the device's max_srq_wr: each refused for its size.
    let max_srq = ctx.query_device().unwrap().max_srq_wr();
    for n in [0, max_srq + 1] {
        assert_refused(pd.create_srq(n), "ibv_create_srq", &format!("max_wr = {n}; the device allows 1..="));
    }
    // Queue pairs with empty queues: each refused for the queue that is empty.
    for (caps, what) in [
        (QpCaps { max_send_wr: 0, ..QpCaps::default() }, "max_send_wr = 0;"),
        (QpCaps { max_recv_sge: 0, ..QpCaps::default() }, "max_recv_sge = 0;"),
    ] {
        assert_refused(pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps)).map(|q| q.qp_num()), "ibv_create_qp", what);
    }
    // Chunks of 0 bytes.
    let mr = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    assert_refused(mr.into_chunks(0).map(|c| c.len()), "Mr::into_chunks", "chunk length 0 is not in 1..=");
    // Everything still works afterwards.
    pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    pd.create_srq(16).unwrap();
}

/// A QP whose send queue is as deep as its CQ, and RC WRITEs (owned) to a peer on another CQ.
struct FullCq {
    ctx: Context,
    pd: Pd,
    small: Cq,
    other: Cq,
    room: u32,
}

fn full_cq() -> FullCq {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let small = ctx.create_cq(4).unwrap();
    let other = ctx.create_cq(256).unwrap();
    let room = small.capacity();
    FullCq { ctx, pd, small, other, room }
}

impl FullCq {
    /// `a` (its sends on the small CQ, exactly as deep as it) connected to `b`, which takes
    /// RDMA WRITEs only with `b_access`.
    fn pair(&self, b_access: impl AccessSet, psn: u32) -> (Qp<RC, RTS>, Qp<RC, RTS>) {
        let caps = QpCaps { max_send_wr: self.room, ..QpCaps::default() };
        let cfg = QpConfig { send_cq: &self.small, recv_cq: &self.other, caps, srq: None };
        let a = self.pd.create_qp::<RC>(&cfg).unwrap();
        let b = self.pd.create_qp::<RC>(&QpConfig::new(&self.other).caps(caps)).unwrap();
        self.connect(a, b, b_access, psn)
    }

    fn connect(
        &self,
        a: Qp<RC, RESET>,
        b: Qp<RC, RESET>,
        b_access: impl AccessSet,
        psn: u32,
    ) -> (Qp<RC, RTS>, Qp<RC, RTS>) {
        let ea = a.endpoint(PORT, gid_index(), psn).unwrap();
        let eb = b.endpoint(PORT, gid_index(), psn + 2).unwrap();
        (connect_rc(a, Access::NONE.remote_write(), &ea, &eb), connect_rc(b, b_access, &eb, &ea))
    }
}

/// The device completes a full CQ's worth of signaled WRITEs nobody polls, then the program
/// resets and reconnects the pair: the tokens come back flushed by the reset, and the queue
/// takes its whole depth again. Those requests must all complete, with nothing lost and no CQ
/// error: the reset took the stale completions off the CQ (rxe leaves them there), which was
/// sized for one queue's depth.
#[test]
fn a_reset_takes_the_stale_completions_off_the_cq_so_the_next_requests_fit() {
    let f = full_cq();
    let (a, b) = f.pair(Access::NONE.remote_write(), 21);
    let dst = f.pd.alloc_mr(64, access::REMOTE_RW).unwrap();
    let mut chunks = f.pd.alloc_mr(8 * f.room as usize, access::LOCAL_RW).unwrap().into_chunks(8).unwrap();
    let first: Vec<_> =
        chunks.drain(..).map(|c| a.post_send_owned(wr::Write::new(c, dst.remote(..8).unwrap())).unwrap()).collect();
    // Completed by the device (a WRITE on rxe takes well under this), polled by nobody.
    std::thread::sleep(Duration::from_millis(500));
    let (a, b) = (a.reset().map_err(|e| e.error).unwrap(), b.reset().map_err(|e| e.error).unwrap());
    assert_eq!(a.outstanding(), (0, 0));
    let (a, _b) = f.connect(a, b, Access::NONE.remote_write(), 31);
    for t in first {
        let (c, chunk) = t.wait(WAIT).unwrap();
        assert_eq!(c.source(), CompletionSource::ForcedReset, "{c:?}");
        chunks.push(chunk);
    }
    let second: Vec<_> = chunks
        .drain(..)
        .map(|c| a.post_send_owned(wr::Write::new(c, dst.remote(..8).unwrap())).expect("the queue has its depth"))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for t in second {
        let (c, _) = t.wait(WAIT).map_err(|e| e.error).expect("every completion of the second round arrives");
        assert!(c.is_success(), "{c:?}");
        assert_eq!(c.source(), CompletionSource::Own, "{c:?}");
    }
    while let Ok(ev) = f.ctx.next_async_event(Duration::from_millis(300)) {
        assert!(!matches!(ev, AsyncEvent::CqError { .. }), "the CQ overran: {ev:?}");
    }
    assert_eq!(f.small.progress().unwrap(), 0, "nothing left in the CQ");
}

/// The same reset, then an unsignaled WRITE the peer refuses (its QP no longer allows remote
/// writes) and a signaled one after it: the refused WRITE's error completion must find room
/// in the CQ and come back as an error, never as a success implied by the later request.
#[test]
fn after_a_reset_a_refused_unsignaled_write_is_reported_as_refused() {
    let f = full_cq();
    let (a, b) = f.pair(Access::NONE.remote_write(), 41);
    let dst = f.pd.alloc_mr(64, access::REMOTE_RW).unwrap();
    let mut chunks = f.pd.alloc_mr(8 * (f.room as usize + 2), access::LOCAL_RW).unwrap().into_chunks(8).unwrap();
    let first: Vec<_> =
        chunks.drain(2..).map(|c| a.post_send_owned(wr::Write::new(c, dst.remote(..8).unwrap())).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let (a, b) = (a.reset().map_err(|e| e.error).unwrap(), b.reset().map_err(|e| e.error).unwrap());
    // The peer now refuses RDMA WRITEs.
    let (a, _b) = f.connect(a, b, Access::NONE, 51);
    drop(first);
    let refused = a.post_send_owned(wr::Write::new(chunks.remove(0), dst.remote(..8).unwrap()).unsignaled()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let next = a.post_send_owned(wr::Write::new(chunks.remove(0), dst.remote(..8).unwrap())).unwrap();
    let (c_next, _) = next.wait(WAIT).map_err(|e| e.error).unwrap();
    assert!(!c_next.is_success(), "the QP is in ERR after the refusal: {c_next:?}");
    let (c, _) = refused.wait(WAIT).map_err(|e| e.error).unwrap();
    // rxe answers a WRITE to a QP without REMOTE_WRITE with an invalid-request NAK.
    assert_eq!(c.status(), WcStatus::RemInvReqErr, "{c:?} ({:?})", c.source());
    assert_eq!(c.source(), CompletionSource::Own, "{c:?}");
}

// --- transition attributes beyond the device's limits -------------------------------------

/// `ibv_modify_qp` attributes the device bounds are refused typed before the provider sees
/// them, the QP handed back in its state: a port that does not exist (0, one past the last), a
/// P_Key index outside the port's table, a source GID index outside it (where the table has
/// fewer than 256 entries: rxe's has 1024, which no `u8` index leaves), a service level above
/// 15 in the address vector, RDMA READ/atomic depths
/// above `max_qp_init_rd_atom` / `max_qp_rd_atom`. The same QP then connects with attributes
/// in range.
#[test]
fn transition_attributes_beyond_the_devices_limits_are_refused_typed() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let dev = ctx.query_device().unwrap();
    let port = ctx.query_port(PORT).unwrap();
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.endpoint(PORT, gid_index(), 0x900).unwrap();
    let eb = b.endpoint(PORT, gid_index(), 0xa00).unwrap();
    // Ports.
    let e = a.to_init(&ConnectedInit::new(0, Access::NONE)).expect_err("port 0");
    assert!(refused(&e.error, "port 0 does not exist"), "{:?}", e.error);
    let past = dev.phys_port_cnt() + 1;
    let e = e.qp.to_init(&ConnectedInit::new(past, Access::NONE)).expect_err("a port past the last");
    assert!(refused(&e.error, &format!("port {past} does not exist")), "{:?}", e.error);
    let a = e.qp;
    assert_eq!(a.query_state().unwrap(), ObservedState::Reset, "handed back in RESET");
    // A P_Key index outside the port's table (UD's INIT sets it).
    let ud = pd.create_qp::<UD>(&QpConfig::new(&cq)).unwrap();
    let e = ud.to_init(&UdInit { port: PORT, pkey_index: port.pkey_tbl_len(), qkey: 0x11 }).expect_err("P_Key index");
    assert!(refused(&e.error, "P_Key index"), "{:?}", e.error);
    assert!(e.qp.to_init(&UdInit { port: PORT, pkey_index: 0, qkey: 0x11 }).is_ok(), "P_Key index 0 is in range");
    // A source GID index outside the table, and a responder depth above the device's.
    let a = a.to_init(&ConnectedInit::new(PORT, Access::NONE)).unwrap();
    let av = AddressVector::global(PORT, eb.gid, gid_index());
    let rtr = RcRtr::new(av, eb.qp_num, eb.psn);
    let a = match u8::try_from(port.gid_tbl_len()) {
        Ok(beyond) => {
            let bad = RcRtr { av: AddressVector::global(PORT, eb.gid, beyond), ..rtr };
            let e = a.to_rtr(&bad).expect_err("source GID index");
            assert!(refused(&e.error, "source GID index"), "{:?}", e.error);
            assert_eq!(e.qp.query_state().unwrap(), ObservedState::Init, "handed back in INIT");
            e.qp
        }
        // A table of 256 or more: no u8 index is outside it.
        Err(_) => a,
    };
    let bad = RcRtr { av: AddressVector { sl: 16, ..rtr.av }, ..rtr };
    let e = a.to_rtr(&bad).expect_err("service level 16");
    assert!(refused(&e.error, "service level 16"), "{:?}", e.error);
    assert_eq!(e.qp.query_state().unwrap(), ObservedState::Init, "handed back in INIT");
    let a = e.qp;
    finish_in_range(&dev, a, b, rtr, &ea, &eb);
}

/// `ibv_create_ah` gets the same checks as a QP's address vector, before the provider indexes
/// its tables by them: a port that does not exist (0, one past the last), a source GID index
/// outside the port's table, a service level, source path bits or flow label wider than
/// their header bits (4, 7, 20) and a static rate that is no `IBV_RATE_*` value are refused
/// typed, naming `ibv_create_ah`; in range, the handle is made.
#[test]
fn address_vectors_beyond_the_devices_limits_are_refused_typed() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let dev = ctx.query_device().unwrap();
    let port = ctx.query_port(PORT).unwrap();
    let gid = ctx.query_gid(PORT, gid_index()).unwrap();
    let by_ah = |e: &Error, what: &str| matches!(e, Error::InvalidArgument { verb, reason } if *verb == "ibv_create_ah" && reason.contains(what));
    let e = pd.create_ah(&AddressVector::global(0, gid, gid_index())).expect_err("port 0");
    assert!(by_ah(&e, "port 0 does not exist"), "{e:?}");
    let past = dev.phys_port_cnt() + 1;
    let e = pd.create_ah(&AddressVector::global(past, gid, gid_index())).expect_err("a port past the last");
    assert!(by_ah(&e, &format!("port {past} does not exist")), "{e:?}");
    match u8::try_from(port.gid_tbl_len()) {
        Ok(beyond) => {
            let e = pd.create_ah(&AddressVector::global(PORT, gid, beyond)).expect_err("source GID index");
            assert!(by_ah(&e, "source GID index"), "{e:?}");
        }
        // A table of 256 entries or more (rxe's has 1024): no u8 index is outside it.
        Err(_) => assert!(port.gid_tbl_len() >= 256, "{}", port.gid_tbl_len()),
    }
    let av = AddressVector::global(PORT, gid, gid_index());
    let mut flow = av;
    flow.grh.as_mut().unwrap().flow_label = 1 << 20;
    for (bad, what) in [
        (AddressVector { sl: 16, ..av }, "service level 16"),
        (AddressVector { src_path_bits: 0x80, ..av }, "source path bits 0x80"),
        (flow, "flow label 0x100000"),
        (AddressVector { static_rate: 25, ..av }, "static rate 25"),
    ] {
        let e = pd.create_ah(&bad).expect_err(what);
        assert!(by_ah(&e, what), "{e:?}");
    }
    let mut widest = AddressVector { sl: 15, src_path_bits: 0x7f, ..av };
    widest.grh.as_mut().unwrap().flow_label = 0xfffff;
    assert!(pd.create_ah(&av).is_ok(), "in range");
    assert!(pd.create_ah(&widest).is_ok(), "the widest values that fit");
}

/// `e` is the typed refusal of a transition attribute, before the provider: `InvalidArgument`
/// naming `ibv_modify_qp`, the reason mentioning `what`.
fn refused(e: &Error, what: &str) -> bool {
    matches!(e, Error::InvalidArgument { verb, reason } if *verb == "ibv_modify_qp" && reason.contains(what))
}

/// The rest of the test above: the RDMA READ/atomic depths, then the QP connected in range.
fn finish_in_range(
    dev: &typed_verbs::device::DeviceAttr,
    a: Qp<RC, INIT>,
    b: Qp<RC, RESET>,
    rtr: RcRtr,
    ea: &Endpoint,
    eb: &Endpoint,
) {
    let a = match u8::try_from(dev.max_qp_rd_atom() + 1) {
        Ok(over) => {
            let e = a.to_rtr(&RcRtr { max_dest_rd_atomic: over, ..rtr }).expect_err("max_dest_rd_atomic");
            assert!(refused(&e.error, "max_dest_rd_atomic"), "{:?}", e.error);
            e.qp
        }
        Err(_) => a,
    };
    let a = a.to_rtr(&rtr).unwrap();
    let a = match u8::try_from(dev.max_qp_init_rd_atom() + 1) {
        Ok(over) => {
            let e = a.to_rts(&RcRts { max_rd_atomic: over, ..RcRts::new(ea.psn) }).expect_err("max_rd_atomic");
            assert!(refused(&e.error, "max_rd_atomic"), "{:?}", e.error);
            assert_eq!(e.qp.query_state().unwrap(), ObservedState::Rtr, "handed back in RTR");
            e.qp
        }
        Err(_) => a,
    };
    let a = a.to_rts(&RcRts::new(ea.psn)).unwrap();
    let b = connect_rc(b, Access::NONE, eb, ea);
    assert_eq!((a.query_state().unwrap(), b.query_state().unwrap()), (ObservedState::Rts, ObservedState::Rts));
}
