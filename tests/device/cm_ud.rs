//! UD through the RDMA connection manager (`RDMA_PS_UDP`) on the device: a UD service resolved
//! by IP address to its QP number, Q_Key and an address handle; datagrams both ways, the server
//! answering with an address handle made from the client's first datagram; a reject; nobody
//! listening; a QP of the wrong Q_Key refused before the CM sees it; private data above the
//! limits; identifiers dropped in every state; rdma-core's `udaddy` against our
//! `examples/udaddy.rs` in both roles; a multicast group joined through the CM, with rdma-core's
//! `mckey` receiving our sends. Every wait bounded.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use typed_verbs::ah::GrhBytes;
use typed_verbs::cm::{CmEvent, CmId, CmListener, ConnRequest, RouteResolved, UdPeer};
use typed_verbs::owned::OwnedToken;
use typed_verbs::prelude::*;

use crate::common::*;

/// rdma-core's `udaddy` always uses port 7174 (of `RDMA_PS_UDP`): one such test at a time.
static UDADDY: Mutex<()> = Mutex::new(());

/// `RDMA_UDP_QKEY`: the Q_Key the CM gives UD identifiers of `RDMA_PS_UDP`.
const CM_QKEY: u32 = 0x0123_4567;

/// GRH room at the start of every UD receive buffer.
const GRH: usize = 40;

/// The device's address, from its IPv4-mapped RoCE v2 GID.
fn local_ip() -> IpAddr {
    let gid = open().query_gid(PORT, gid_index()).expect("the RoCE v2 GID");
    IpAddr::V4(gid.ipv4().unwrap_or_else(|| panic!("GID {gid:?} is not IPv4-mapped")))
}

/// A context, PD and CQ on `dev`, and UD QPs on them.
struct Side {
    _ctx: Context,
    pd: Pd,
    cq: Cq,
}

impl Side {
    fn on(dev: &str) -> Side {
        let ctx = Context::open(dev).expect("open the CM's device");
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        Side { _ctx: ctx, pd, cq }
    }

    fn qp(&self) -> Qp<UD, RESET> {
        self.pd.create_qp::<UD>(&QpConfig::new(&self.cq)).unwrap()
    }

    /// One owned receive of GRH + `len` bytes on `qp`.
    fn recv(&self, qp: &Qp<UD, RTS>, len: usize) -> OwnedToken<Chunk<access::LocalRw>> {
        let chunk = self.pd.alloc_mr(GRH + len, access::LOCAL_RW).unwrap().into_chunks(GRH + len).unwrap().remove(0);
        qp.post_recv_owned(wr::Recv::new(chunk)).map_err(|e| e.error).unwrap()
    }

    /// Sends `msg` to `(ah, qpn, qkey)` with `imm`, and waits for the completion.
    fn send(&self, qp: &Qp<UD, RTS>, msg: &[u8], ah: &Ah, qpn: u32, qkey: u32, imm: u32) {
        let mut src = self.pd.alloc_mr(msg.len(), access::LOCAL_RW).unwrap();
        src.as_mut_slice().copy_from_slice(msg);
        scope(|s| {
            let t = s.post_send(qp, wr::SendImm::new(src.slice(..).unwrap(), imm).to(ah, qpn, qkey)).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        })
        .unwrap();
    }
}

/// A UD identifier whose address and route to `to` are resolved, on the device under test.
fn resolve(to: SocketAddr) -> CmId<RouteResolved, UD> {
    let id = CmId::new_ud().unwrap().resolve_addr(None, to, WAIT).expect("address resolution");
    let id = id.resolve_route(WAIT).expect("route resolution");
    assert_eq!(id.device_name().as_deref(), Some(device_name().as_str()), "the route is on the device");
    assert_eq!(id.port_num(), PORT);
    id
}

/// A UD listener on the device's address, on a port the system chose.
fn listen() -> (CmListener<UD>, SocketAddr) {
    let listener = CmListener::bind_ud(SocketAddr::new(local_ip(), 0), 4).expect("listen (RDMA_PS_UDP)");
    let port = listener.port();
    assert_ne!(port, 0, "the system chose a port");
    (listener, SocketAddr::new(local_ip(), port))
}

#[test]
fn a_ud_service_resolved_by_ip_address_exchanges_datagrams_both_ways() {
    let (listener, addr) = listen();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a UD request");
        assert_eq!(req.private_data().get(..5), Some(&b"hello"[..]), "the resolution's private data");
        let side = Side::on(&req.device_name().expect("the request's device"));
        let qp = req.ready_qp(side.qp()).expect("RESET -> RTS with the CM's attributes");
        assert_eq!((qp.qkey().unwrap(), req.qkey().unwrap()), (CM_QKEY, CM_QKEY));
        let recv = side.recv(&qp, 64);
        let port = req.port_num();
        req.accept(&qp, b"svc").expect("rdma_accept (SIDR reply)");
        // The client is known only from its datagram: its address from the completion and
        // the GRH, its QP number from the completion (and, as udaddy does, the immediate).
        let (c, chunk) = recv.wait(WAIT).map_err(|e| e.error).expect("the client's datagram");
        assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, (GRH + 11) as u32), "{c:?}");
        assert!(c.has_grh(), "RoCE datagrams carry a GRH");
        assert_eq!(c.imm(), Some(c.src_qp()), "the immediate names the sender's QP");
        assert_eq!(&chunk.as_slice()[GRH..GRH + 11], b"ping 1 of 1");
        let grh: GrhBytes = chunk.as_slice()[..GRH].try_into().unwrap();
        let back = side.pd.create_ah_from_wc(port, &c, &grh).expect("an address handle from the datagram");
        let dgid = back.address().grh.expect("a global address").dgid;
        assert_eq!(dgid.ipv4().map(IpAddr::V4), Some(local_ip()), "back to the client's address");
        side.send(&qp, b"pong", &back, c.src_qp(), CM_QKEY, qp.qp_num());
        qp.qp_num()
    });

    let id = resolve(addr);
    let side = Side::on(&device_name());
    let qp = id.ready_qp(side.qp()).expect("RESET -> RTS with the CM's attributes");
    assert_eq!(id.qkey().unwrap(), CM_QKEY);
    let recv = side.recv(&qp, 64);
    let peer: UdPeer = id.resolve_peer(&side.pd, b"hello", WAIT).expect("the service's QP and Q_Key");
    assert_eq!((peer.qkey(), peer.private_data().get(..3)), (CM_QKEY, Some(&b"svc"[..])));
    side.send(&qp, b"ping 1 of 1", peer.ah(), peer.qp_num(), peer.qkey(), qp.qp_num());
    let (c, chunk) = recv.wait(WAIT).map_err(|e| e.error).expect("the service's answer");
    assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, (GRH + 4) as u32));
    assert_eq!(&chunk.as_slice()[GRH..GRH + 4], b"pong");
    let server_qpn = server.join().expect("the server thread");
    assert_eq!((peer.qp_num(), c.src_qp(), c.imm()), (server_qpn, server_qpn, Some(server_qpn)));
}

/// Resolves `addr` with a new UD identifier; the error it ends with, and how long it took.
fn resolution_error(addr: SocketAddr, private_data: &[u8]) -> (Error, Duration) {
    let id = resolve(addr);
    let side = Side::on(&device_name());
    let start = Instant::now();
    let e = id.resolve_peer(&side.pd, private_data, WAIT).expect_err("the resolution fails");
    (e, start.elapsed())
}

#[test]
fn a_ud_reject_fails_the_resolution_as_unreachable() {
    let (listener, addr) = listen();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a UD request");
        req.reject(b"no service here").expect("rdma_reject (SIDR reply, REJECT)");
    });
    let (e, took) = resolution_error(addr, b"hello");
    // The SIDR reply's status (IB_SIDR_REJECT, 2) is the event's.
    assert!(matches!(e, Error::Cm { step: Verb::Connect, event: CmEvent::Unreachable, status: 2 }), "{e:?}");
    assert!(took < WAIT, "bounded: {took:?}");
    server.join().expect("the server thread");
}

#[test]
fn resolving_a_ud_port_nobody_listens_on_fails_in_bounded_time() {
    // A port the system chose for a listener that is gone.
    let (_, addr) = listen();
    let (e, took) = resolution_error(addr, &[]);
    // The CM answers a request for no service with IB_SIDR_UNSUPPORTED (1).
    assert!(matches!(e, Error::Cm { step: Verb::Connect, event: CmEvent::Unreachable, status: 1 }), "{e:?}");
    assert!(took < Duration::from_secs(10), "bounded: {took:?}");
}

#[test]
fn a_ud_accept_with_a_qp_of_another_qkey_is_refused_before_the_cm() {
    let (listener, addr) = listen();
    let server = std::thread::spawn(move || {
        let req: ConnRequest<UD> = listener.next_request(WAIT).expect("a UD request");
        let side = Side::on(&req.device_name().unwrap());
        // ibv_ud_pingpong's Q_Key, not the CM's: the client's datagrams would be dropped.
        let qp = ud_qp(&side.pd, &side.cq, QpCaps::default());
        match req.accept(&qp, &[]) {
            Err(Error::InvalidArgument { verb: "rdma_accept", reason }) => {
                assert!(reason.contains("Q_Key"), "{reason}");
            }
            other => panic!("a QP of Q_Key {QKEY:#x} accepted: {other:?}"),
        }
    });
    // The request went unanswered (dropped): the resolution fails, bounded.
    let (e, took) = resolution_error(addr, &[]);
    assert!(matches!(e, Error::Cm { event: CmEvent::Unreachable, .. } | Error::Timeout { .. }), "{e:?}");
    assert!(took <= WAIT + Duration::from_secs(1), "bounded: {took:?}");
    server.join().expect("the server thread");
}

#[test]
fn ud_private_data_above_the_sidr_limits_is_refused_before_the_cm() {
    let (listener, addr) = listen();
    let side = Side::on(&device_name());
    let too_long = [7u8; 181];
    match resolve(addr).resolve_peer(&side.pd, &too_long, WAIT) {
        Err(Error::InvalidArgument { verb: "rdma_connect", reason }) => {
            assert!(reason.contains("at most 180"), "{reason}")
        }
        other => panic!("181 bytes of SIDR private data: {other:?}"),
    }
    // 180 bytes arrive whole; an accept of 137 bytes is refused before the CM (the request,
    // consumed, goes unanswered and the resolution fails).
    let client = std::thread::spawn(move || resolution_error(addr, &[7u8; 180]).0);
    let req = listener.next_request(WAIT).expect("the request");
    assert_eq!(req.private_data().get(..180), Some(&[7u8; 180][..]));
    let qp = req.ready_qp(side.qp()).unwrap();
    match req.accept(&qp, &[1u8; 137]) {
        Err(Error::InvalidArgument { verb: "rdma_accept", reason }) => {
            assert!(reason.contains("at most 136"), "{reason}")
        }
        other => panic!("137 bytes of SIDR reply private data: {other:?}"),
    }
    let e = client.join().expect("the client thread");
    assert!(matches!(e, Error::Cm { event: CmEvent::Unreachable, .. } | Error::Timeout { .. }), "{e:?}");
}

#[test]
fn an_address_handle_from_a_completion_that_is_not_a_receive_is_refused() {
    let r = rig();
    let a = ud_qp(&r.pd, &r.cq, QpCaps::default());
    let b = ud_qp(&r.pd, &r.cq, QpCaps::default());
    let ah =
        r.pd.create_ah(&AddressVector::global(PORT, open().query_gid(PORT, gid_index()).unwrap(), gid_index()))
            .unwrap();
    let src = r.pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    let c = scope(|s| {
        let t = s.post_send(&a, wr::Send::new(src.slice(..).unwrap()).to(&ah, b.qp_num(), QKEY)).unwrap();
        s.wait(t, WAIT).unwrap().0
    })
    .unwrap();
    assert!(c.is_success(), "{c:?}");
    match r.pd.create_ah_from_wc(PORT, &c, &[0u8; 40]) {
        Err(Error::InvalidArgument { verb: "ibv_create_ah_from_wc", reason }) => {
            assert!(reason.contains("Send"), "{reason}")
        }
        other => panic!("an address handle from a send completion: {other:?}"),
    }
}

#[test]
fn ud_identifiers_dropped_in_every_state_leave_the_peer_a_bounded_failure() {
    let (listener, addr) = listen();
    drop(CmId::new_ud().unwrap());
    drop(CmId::new_ud().unwrap().resolve_addr(None, addr, WAIT).unwrap());
    let routed = resolve(addr);
    let side = Side::on(&device_name());
    let qp = routed.ready_qp(side.qp()).unwrap();
    drop(routed);
    assert_eq!(qp.query_state().unwrap(), typed_verbs::qp::ObservedState::Rts, "the QP outlives the identifier");
    // A request dropped unanswered: the resolving side fails, bounded.
    let client = std::thread::spawn(move || resolution_error(addr, &[]));
    drop(listener.next_request(WAIT).expect("the request"));
    let (e, took) = client.join().expect("the client thread");
    assert!(matches!(e, Error::Cm { event: CmEvent::Unreachable, .. } | Error::Timeout { .. }), "{e:?}");
    assert!(took <= WAIT + Duration::from_secs(1), "bounded: {took:?}");
}

#[test]
fn our_udaddy_server_answers_rdma_cores_udaddy_client() {
    let _port = UDADDY.lock().unwrap_or_else(|e| e.into_inner());
    let ip = local_ip().to_string();
    let mut server =
        Proc::spawn("udaddy (ours)", &example("udaddy"), &["-C".into(), "5".into(), "-S".into(), "200".into()]);
    server.wait_for_line("udaddy: starting server", WAIT).expect("our server listens");
    let args = ["-s".to_string(), ip, "-C".into(), "5".into(), "-S".into(), "200".into()];
    let mut client = Proc::spawn("udaddy (rdma-core)", &c_tool("udaddy"), &args);
    let out = client.expect_success(WAIT);
    assert_lines_in_order(&out, UDADDY_CLIENT_LINES);
    let out = server.expect_success(WAIT);
    assert_lines_in_order(&out, UDADDY_SERVER_LINES);
}

#[test]
fn our_udaddy_client_talks_to_rdma_cores_udaddy_server() {
    let _port = UDADDY.lock().unwrap_or_else(|e| e.into_inner());
    let ip = local_ip().to_string();
    let mut server = Proc::spawn("udaddy (rdma-core)", &c_tool("udaddy"), &["-C".into(), "5".into()]);
    // Its output is buffered until it exits, and it listens a moment after it starts: the first
    // resolutions may find nobody (UNREACHABLE), and are tried again (bounded).
    let deadline = Instant::now() + WAIT;
    let out = loop {
        let mut client =
            Proc::spawn("udaddy (ours)", &example("udaddy"), &["-s".into(), ip.clone(), "-C".into(), "5".into()]);
        match client.wait_exit(WAIT) {
            Some((st, _)) if st.success() => break client.output(),
            Some(_) if client.output().contains("Unreachable") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            _ => {
                client.stop();
                panic!("our client failed:\n{}\n{}", client.output(), server.output());
            }
        }
    };
    assert_lines_in_order(&out, UDADDY_CLIENT_LINES);
    let out = server.expect_success(WAIT);
    assert_lines_in_order(&out, UDADDY_SERVER_LINES);
}

#[test]
fn our_udaddy_pair_runs_two_connections() {
    let port = TcpPort::CmUdaddyOurs.get().to_string();
    let ip = local_ip().to_string();
    let common = ["-c".to_string(), "2".into(), "-C".into(), "4".into(), "--port".into(), port];
    let mut server = Proc::spawn("udaddy server", &example("udaddy"), &common);
    server.wait_for_line("udaddy: starting server", WAIT).expect("our server listens");
    let mut args = vec!["-s".to_string(), ip];
    args.extend(common.iter().cloned());
    let out = Proc::spawn("udaddy client", &example("udaddy"), &args).expect_success(WAIT);
    assert_lines_in_order(&out, UDADDY_CLIENT_LINES);
    let out = server.expect_success(WAIT);
    assert_lines_in_order(&out, UDADDY_SERVER_LINES);
}

// --- multicast --------------------------------------------------------------------------------

/// A UD identifier bound to the device's address with `group` resolved (no route: a multicast
/// address needs none), and a UD QP of `side` readied by it.
fn member_of(side: &Side, group: IpAddr) -> (CmId<typed_verbs::cm::AddrResolved, UD>, Qp<UD, RTS>) {
    let id = CmId::new_ud()
        .unwrap()
        .resolve_addr(Some(SocketAddr::new(local_ip(), 0)), SocketAddr::new(group, 0), WAIT)
        .expect("the group's address resolved from the device's");
    assert_eq!(id.device_name().as_deref(), Some(device_name().as_str()));
    let qp = id.ready_qp(side.qp()).expect("RESET -> RTS with the CM's attributes");
    (id, qp)
}

/// A multicast group of its own for each test (tests run in parallel).
fn group(n: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(239, 7, 0, n))
}

/// The multicast QP number (IBTA: 0xFFFFFF), where sends to a group go.
const MULTICAST_QPN: u32 = 0xFF_FFFF;

#[test]
fn a_multicast_group_joined_through_the_cm_delivers_a_members_datagrams_until_it_leaves() {
    let g = group(1);
    let rx = Side::on(&device_name());
    let (rx_id, rx_qp) = member_of(&rx, g);
    let recvs: Vec<_> = (0..3).map(|_| rx.recv(&rx_qp, 64)).collect();
    let rx_group = rx_id.join_multicast(g, &rx_qp, &rx.pd, WAIT).expect("joined and attached");
    assert_eq!(rx_group.gid().ipv4().map(IpAddr::V4), Some(g), "the group's GID is its IPv4-mapped address");
    assert_eq!((rx_group.peer().qp_num(), rx_group.peer().qkey()), (MULTICAST_QPN, CM_QKEY));

    let tx = Side::on(&device_name());
    let (tx_id, tx_qp) = member_of(&tx, g);
    let tx_group = tx_id.join_multicast(g, &tx_qp, &tx.pd, WAIT).expect("the sender joins too");
    let to = tx_group.peer();
    for i in 0..3u8 {
        tx.send(&tx_qp, &[b'm', b'c', b'0' + i], to.ah(), to.qp_num(), to.qkey(), tx_qp.qp_num());
    }
    for (i, r) in recvs.into_iter().enumerate() {
        let (c, chunk) = r.wait(WAIT).map_err(|e| e.error).expect("a datagram to the group");
        assert_eq!((c.status(), c.byte_len(), c.src_qp()), (WcStatus::Success, (GRH + 3) as u32, tx_qp.qp_num()));
        assert_eq!(&chunk.as_slice()[GRH..GRH + 3], &[b'm', b'c', b'0' + i as u8]);
    }

    // Left and detached: a datagram to the group no longer reaches the former member.
    let late = rx.recv(&rx_qp, 64);
    rx_group.leave().expect("detach and leave");
    tx.send(&tx_qp, b"gone", to.ah(), to.qp_num(), to.qkey(), tx_qp.qp_num());
    match late.wait(Duration::from_secs(2)) {
        Err(e) => assert!(matches!(e.error, Error::Timeout { .. }), "{:?}", e.error),
        Ok((c, _)) => panic!("a datagram after leaving: {c:?}"),
    }
    drop(tx_group);
}

#[test]
fn a_multicast_join_refuses_a_unicast_address_and_a_qp_of_another_qkey() {
    let side = Side::on(&device_name());
    let (id, qp) = member_of(&side, group(2));
    match id.join_multicast(local_ip(), &qp, &side.pd, WAIT) {
        Err(Error::InvalidArgument { verb: "rdma_join_multicast", reason }) => {
            assert!(reason.contains("not a multicast"), "{reason}")
        }
        other => panic!("a join of a unicast address: {other:?}"),
    }
    // ibv_ud_pingpong's Q_Key, not the group's: refused before the QP is attached (and the
    // group left again: a second member joins it afterwards).
    let (id, _) = member_of(&side, group(2));
    let wrong = ud_qp(&side.pd, &side.cq, QpCaps::default());
    match id.join_multicast(group(2), &wrong, &side.pd, WAIT) {
        Err(Error::InvalidArgument { verb: "rdma_join_multicast", reason }) => {
            assert!(reason.contains("Q_Key"), "{reason}")
        }
        other => panic!("a QP of Q_Key {QKEY:#x} joined: {other:?}"),
    }
    let (id, qp) = member_of(&side, group(2));
    let joined = id.join_multicast(group(2), &qp, &side.pd, WAIT).expect("the group can be joined again");
    joined.leave().expect("and left");
}

// rdma-core's `mckey` as the sender is not among these tests: it posts its datagrams
// unsignaled and leaves and destroys its QP right after posting, and rxe sends them after
// `ibv_post_send` returns, so they are lost with the QP (0 or 1 of 5 or 20 leave the device,
// by rxe's `sent_pkts`; DESIGN §9). Our member receiving our own sends is tested above.

#[test]
fn rdma_cores_mckey_receives_our_multicast_sends() {
    let g = group(4);
    // Line-buffered, so that its "joined" line is seen before it exits.
    let args = [
        "-oL".to_string(),
        c_tool("mckey").display().to_string(),
        "-m".into(),
        g.to_string(),
        "-b".into(),
        local_ip().to_string(),
        "-C".into(),
        "5".into(),
    ];
    let mut receiver = Proc::spawn("mckey (rdma-core)", &c_tool("stdbuf"), &args);
    receiver.wait_for_line("mckey: joined", WAIT).expect("the C receiver joins");
    let tx = Side::on(&device_name());
    let (id, qp) = member_of(&tx, g);
    let joined = id.join_multicast(g, &qp, &tx.pd, WAIT).expect("joined");
    let to = joined.peer();
    for _ in 0..5 {
        tx.send(&qp, &[0x6d; 100], to.ah(), to.qp_num(), to.qkey(), qp.qp_num());
    }
    let out = receiver.expect_success(WAIT);
    assert!(out.contains("data transfers complete") && out.contains("return status 0"), "{out}");
    joined.leave().expect("detach and leave");
}
