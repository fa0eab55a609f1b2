//! The RDMA connection manager on the device: an RC connection made by IP address (resolve,
//! route, connect; listen, request, accept), traffic over it, the peer's disconnect seen; a
//! reject with private data; a connect to a port nobody listens on; a port already in use; an
//! address with no route. Every wait bounded; listeners on ports the system chooses.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use typed_verbs::cm::{CmEvent, CmId, CmListener, ConnParam, Connection, PeerEnded};
use typed_verbs::prelude::*;

use crate::common::*;

/// The IPv4 address of the device under test: the one its IPv4-mapped RoCE v2 GID carries.
pub(crate) fn local_ip() -> Ipv4Addr {
    let ctx = open();
    let gid = ctx.query_gid(PORT, gid_index()).expect("the RoCE v2 GID");
    gid.ipv4().unwrap_or_else(|| panic!("GID {:x?} is not IPv4-mapped", gid.0))
}

/// A PD and a CQ on the device named `dev`, and a new RC QP in RESET on them.
pub(crate) struct Side {
    _ctx: Context,
    pub(crate) pd: Pd,
    cq: Cq,
}

impl Side {
    pub(crate) fn on(dev: &str) -> Side {
        let ctx = Context::open(dev).expect("open the CM's device");
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        Side { _ctx: ctx, pd, cq }
    }

    pub(crate) fn qp(&self) -> Qp<RC, RESET> {
        self.pd.create_qp::<RC>(&QpConfig::new(&self.cq)).unwrap()
    }
}

/// Resolves the address and the route to `to`, checking that both name the device under test.
fn resolve(to: SocketAddr) -> CmId<typed_verbs::cm::RouteResolved> {
    let id = CmId::new().unwrap().resolve_addr(None, to, WAIT).expect("address resolution");
    assert_eq!(id.device_name().as_deref(), Some(device_name().as_str()), "the address is on the device");
    let id = id.resolve_route(WAIT).expect("route resolution");
    assert_eq!(id.device_name().as_deref(), Some(device_name().as_str()));
    id
}

/// The passive side of one connection: waits for a request, checks its private data, and
/// accepts it on a QP of its own, or rejects it with `reject`'s bytes.
fn serve(listener: CmListener, reject: Option<&'static [u8]>) -> std::thread::JoinHandle<Option<(Side, Connection)>> {
    std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a connection request");
        assert_eq!(req.private_data().get(..5), Some(&b"hello"[..]), "the connect's private data");
        if let Some(bytes) = reject {
            req.reject(bytes).expect("rdma_reject");
            return None;
        }
        let side = Side::on(&req.device_name().expect("the request's device"));
        let param = ConnParam { private_data: b"welcome".to_vec(), ..ConnParam::default() };
        let conn = req.accept(side.qp(), Access::NONE.remote_write(), &param, WAIT).expect("rdma_accept");
        assert_eq!(conn.peer_private_data().get(..5), Some(&b"hello"[..]));
        Some((side, conn))
    })
}

#[test]
fn an_rc_connection_by_ip_address_carries_traffic_and_sees_the_peers_disconnect() {
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 4).expect("listen");
    let port = listener.port();
    assert_ne!(port, 0, "the system chose a port");
    let server = serve(listener, None);

    let id = resolve(SocketAddr::new(IpAddr::V4(local_ip()), port));
    let side = Side::on(&device_name());
    let param = ConnParam { private_data: b"hello".to_vec(), ..ConnParam::default() };
    let conn = id.connect(side.qp(), Access::NONE.remote_write(), &param, WAIT).expect("rdma_connect");
    assert_eq!(conn.peer_private_data().get(..7), Some(&b"welcome"[..]), "the accept's private data");
    let (peer_side, mut peer) = server.join().expect("the server thread").expect("accepted");

    // An RDMA WRITE and a SEND over the connection, every byte checked.
    let mut src = side.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    fill(&mut src, 9);
    let target = peer_side.pd.alloc_mr(4096, access::REMOTE_RW).unwrap();
    let mut inbox = peer_side.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    scope(|s| {
        let rt = s.post_recv(peer.qp(), wr::Recv::new(inbox.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(conn.qp(), wr::Write::new(src.slice(..).unwrap(), target.remote(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let t = s.post_send(conn.qp(), wr::Send::new(src.slice(..100).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let (c, _) = s.wait(rt, WAIT).unwrap();
        assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 100));
    })
    .unwrap();
    let mut written = vec![0u8; 4096];
    target.read_volatile_into(0, &mut written).unwrap();
    assert_eq!(written, src.as_slice());
    assert_eq!(&inbox.as_slice()[..100], &src.as_slice()[..100]);

    // The active side disconnects; the passive side sees it, then hands its QP back in ERR.
    let qp = conn.disconnect().expect("rdma_disconnect");
    assert_eq!(qp.query_state().unwrap(), typed_verbs::qp::ObservedState::Err);
    assert_eq!(peer.wait_disconnected(WAIT).expect("the peer's disconnect"), PeerEnded::Disconnected);
    let peer_qp = peer.qp_mut();
    assert_eq!(peer_qp.outstanding(), (0, 0));
    let peer_qp = peer.disconnect().expect("disconnect after the peer's");
    assert_eq!(peer_qp.query_state().unwrap(), typed_verbs::qp::ObservedState::Err);
}

#[test]
fn a_reject_hands_the_listeners_private_data_to_the_connecting_side() {
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 4).expect("listen");
    let port = listener.port();
    let server = serve(listener, Some(b"go away: full"));
    let id = resolve(SocketAddr::new(IpAddr::V4(local_ip()), port));
    let side = Side::on(&device_name());
    let param = ConnParam { private_data: b"hello".to_vec(), ..ConnParam::default() };
    match id.connect(side.qp(), Access::NONE, &param, WAIT) {
        Err(Error::Rejected { private_data, status }) => {
            assert_eq!(private_data.get(..13), Some(&b"go away: full"[..]), "status {status}");
        }
        other => panic!("expected the reject, got {:?}", other.map(|_| ())),
    }
    assert!(server.join().expect("the server thread").is_none());
}

#[test]
fn connecting_to_a_port_nobody_listens_on_is_rejected_in_bounded_time() {
    // A port the system chose for a listener that is gone: nobody listens there now.
    let port = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 1).unwrap().port();
    let id = resolve(SocketAddr::new(IpAddr::V4(local_ip()), port));
    let side = Side::on(&device_name());
    let start = Instant::now();
    match id.connect(side.qp(), Access::NONE, &ConnParam::default(), WAIT) {
        Err(Error::Rejected { private_data, status }) => {
            assert!(private_data.iter().all(|&b| b == 0), "no private data from nobody: {private_data:?}");
            assert_ne!(status, 0, "a reject reason");
        }
        other => panic!("expected a reject, got {:?}", other.map(|_| ())),
    }
    assert!(start.elapsed() < WAIT, "answered before the timeout");
}

#[test]
fn a_port_already_in_use_is_a_typed_eaddrinuse() {
    let first = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 1).unwrap();
    let taken = SocketAddr::new(IpAddr::V4(local_ip()), first.port());
    match CmListener::bind(taken, 1) {
        Err(e @ Error::Verb { verb: Verb::BindAddr, .. }) => {
            assert_eq!(e.errno(), Some(libc::EADDRINUSE), "EADDRINUSE: {e}");
        }
        other => panic!("a second listener on {taken}: {other:?}"),
    }
}

#[test]
fn an_address_with_no_route_fails_typed_in_bounded_time() {
    // 198.51.100.1 (TEST-NET-2) is routed nowhere in the test VM.
    let nowhere = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)), 7471);
    let start = Instant::now();
    let r = CmId::new().unwrap().resolve_addr(None, nowhere, Duration::from_secs(2));
    match r {
        Err(Error::Cm { step: Verb::ResolveAddr, event: CmEvent::AddrError, .. }) => {}
        Err(e @ Error::Verb { verb: Verb::ResolveAddr, .. }) => assert!(e.errno().is_some(), "{e}"),
        other => panic!("resolving {nowhere}: {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(10), "bounded: {:?}", start.elapsed());
}

/// Our side of rdma-core's `rdma_server` / `rdma_client` exchange: one 16-byte message each
/// way, the passive side receiving first. `conn`'s receive was posted before the connection
/// (`recv`); sends `msg` and waits for both completions.
fn exchange(
    conn: &Connection,
    side: &Side,
    recv: typed_verbs::owned::OwnedToken<Chunk<access::LocalRw>>,
    msg: &[u8; 16],
) -> Vec<u8> {
    let mut src = side.pd.alloc_mr(16, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(msg);
    scope(|s| {
        let t = s.post_send(conn.qp(), wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    let (c, chunk) = recv.wait(WAIT).map_err(|e| e.error).expect("the peer's message");
    assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 16), "{c:?}");
    chunk.as_slice().to_vec()
}

/// A 16-byte receive buffer, owned, for a receive posted before the connection exists. It is
/// filled with [`RECV_SENTINEL`], so that a message's bytes are seen to land (a fresh region
/// reads as zeros, which is what rdma-core's `rdma_client` and `rdma_server` send).
pub(crate) fn recv_chunk(side: &Side) -> Chunk<access::LocalRw> {
    let mut chunk = side.pd.alloc_mr(16, access::LOCAL_RW).unwrap().into_chunks(16).unwrap().remove(0);
    chunk.as_mut_slice().fill(RECV_SENTINEL);
    chunk
}

/// What [`recv_chunk`] holds until a message lands in it.
const RECV_SENTINEL: u8 = 0xEE;

/// The 16 bytes rdma-core's `rdma_client` and `rdma_server` send: their `send_msg`, a static
/// buffer nothing writes (all zeros); our examples send the same.
const C_CM_MESSAGE: [u8; 16] = [0; 16];

#[test]
fn our_listener_serves_rdma_cores_rdma_client() {
    let port = TcpPort::CmOursWithCClient.get();
    let ip = local_ip();
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(ip), port), 4).expect("listen");
    let args = ["-s".to_string(), ip.to_string(), "-p".to_string(), port.to_string()];
    let mut client = Proc::spawn("rdma_client", &c_tool("rdma_client"), &args);
    let req = listener.next_request(WAIT).expect("rdma_client's request");
    let side = Side::on(&req.device_name().expect("the request's device"));
    let accepting = req.prepare(side.qp(), Access::NONE, ConnParam::default()).expect("INIT, RTR");
    // rdma_client sends as soon as it is connected: the receive goes first.
    let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
    let conn = accepting.accept(WAIT).expect("rdma_accept");
    let got = exchange(&conn, &side, recv, b"from typed-verbs");
    assert_eq!(got, C_CM_MESSAGE, "rdma_client's message, over the receive's sentinel {RECV_SENTINEL:#x}");
    assert_eq!(conn.wait_disconnected(WAIT).expect("rdma_client disconnects when done"), PeerEnded::Disconnected);
    conn.disconnect().expect("our side of the disconnect");
    let out = client.expect_success(WAIT);
    assert!(out.contains("rdma_client: end 0"), "{out}");
}

/// Starts rdma-core's `rdma_server` on `port` and connects to it with a QP of `side` whose
/// 16-byte receive is posted before the connection; `rdma_server` listens a moment after it
/// starts, so the connect is retried while it is refused (bounded).
fn connect_to_c_server(
    side: &Side,
    port: TcpPort,
) -> (Proc, Connection, typed_verbs::owned::OwnedToken<Chunk<access::LocalRw>>) {
    let (ip, port) = (local_ip(), port.get());
    let args = ["-s".to_string(), ip.to_string(), "-p".to_string(), port.to_string()];
    let server = Proc::spawn("rdma_server", &c_tool("rdma_server"), &args);
    let deadline = Instant::now() + WAIT;
    loop {
        let connecting = resolve(SocketAddr::new(IpAddr::V4(ip), port)).prepare(side.qp(), Access::NONE).unwrap();
        let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_chunk(side))).map_err(|e| e.error).unwrap();
        match connecting.connect(&ConnParam::default(), WAIT) {
            Ok(conn) => return (server, conn, recv),
            Err(Error::Rejected { .. }) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("connecting to rdma_server: {e}\n{}", server.output()),
        }
    }
}

#[test]
fn our_connect_talks_to_rdma_cores_rdma_server() {
    let side = Side::on(&device_name());
    let (mut server, conn, recv) = connect_to_c_server(&side, TcpPort::CmCServerWithOurs);
    let got = exchange(&conn, &side, recv, b"from typed-verbs");
    assert_eq!(got, C_CM_MESSAGE, "rdma_server's answer, over the receive's sentinel {RECV_SENTINEL:#x}");
    assert_eq!(conn.wait_disconnected(WAIT).expect("rdma_server disconnects when done"), PeerEnded::Disconnected);
    conn.disconnect().expect("our side of the disconnect");
    server.expect_success(WAIT);
}

/// The verbs-only bootstrap: the default GID index is the RoCE v2 GID of the interface's IPv4
/// address (the GID table's types say which), endpoints carry random PSNs, and `connect` walks
/// RC and UC QPs from RESET to RTS; traffic over both, every byte checked.
#[test]
fn the_verbs_connect_helper_picks_the_roce_v2_gid_and_random_psns() {
    use typed_verbs::device::GidType;
    use typed_verbs::qp::Link;
    let r = rig();
    let ctx = open();
    let table = ctx.gid_table(PORT).expect("ibv_query_gid_ex");
    let index = ctx.default_gid_index(PORT).expect("a RoCE v2 GID of an IPv4 address");
    let entry = table.iter().find(|e| e.index == index).expect("the default is in the table");
    assert_eq!((entry.gid_type, entry.gid.ipv4()), (GidType::RoceV2, Some(local_ip())), "{table:?}");
    assert!(entry.ifindex != 0, "a RoCE GID belongs to an interface: {entry:?}");
    let len = ctx.query_port(PORT).unwrap().gid_tbl_len();
    assert!(
        table.iter().all(|e| u32::from(e.index) < len && matches!(e.gid_type, GidType::RoceV1 | GidType::RoceV2)),
        "an Ethernet port's table has RoCE entries only: {table:?}"
    );
    let link = Link::default_for(&ctx, PORT).unwrap();
    // Five QPs on one CQ (one refused connect among them): room for all their queues.
    let cq = r._ctx.create_cq(2048).unwrap();
    assert_eq!(link, Link { port: PORT, gid_index: index });

    let (a, b) =
        (r.pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap(), r.pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap());
    let (ea, eb) = (a.local_endpoint(link).unwrap(), b.local_endpoint(link).unwrap());
    assert_ne!(ea.psn, eb.psn, "random initial PSNs");
    assert!(ea.psn <= 0xff_ffff && eb.psn <= 0xff_ffff);
    // Another QP's endpoint as its own.
    assert_refused(
        a.connect(link, Access::NONE.remote_write(), &eb, &ea).map(drop),
        "ibv_modify_qp",
        "the endpoint names QP",
    );
    let a = r.pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let ea = a.local_endpoint(link).unwrap();
    // The path `connect` takes: the port's active MTU, a GRH from the link's GID to the peer's.
    let path = a.path_to(link, &eb).unwrap();
    let grh = path.av.grh.expect("a GRH on RoCE");
    assert_eq!(Some(path.mtu), ctx.query_port(PORT).unwrap().active_mtu());
    assert_eq!((grh.dgid, grh.sgid_index, path.av.port), (eb.gid, index, PORT));
    let a = a.connect(link, Access::NONE.remote_write(), &ea, &eb).expect("RC connect a");
    let b = b.connect(link, Access::NONE.remote_write(), &eb, &ea).expect("RC connect b");
    let (ua, ub) =
        (r.pd.create_qp::<UC>(&QpConfig::new(&cq)).unwrap(), r.pd.create_qp::<UC>(&QpConfig::new(&cq)).unwrap());
    let (eua, eub) = (ua.local_endpoint(link).unwrap(), ub.local_endpoint(link).unwrap());
    let ua = ua.connect(link, Access::NONE.remote_write(), &eua, &eub).expect("UC connect a");
    let _ub = ub.connect(link, Access::NONE.remote_write(), &eub, &eua).expect("UC connect b");

    let mut src = r.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    fill(&mut src, 21);
    let target = r.pd.alloc_mr(2 * 4096, access::REMOTE_RW).unwrap();
    let mut inbox = r.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    scope(|s| {
        let rt = s.post_recv(&b, wr::Recv::new(inbox.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let (c, _) = s.wait(rt, WAIT).unwrap();
        assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 4096));
        for (qp_write, at) in [(0usize, 0usize), (1, 4096)] {
            let dst = target.remote(at..at + 4096).unwrap();
            let t = if qp_write == 0 {
                s.post_send(&a, wr::Write::new(src.slice(..).unwrap(), dst)).unwrap()
            } else {
                s.post_send(&ua, wr::Write::new(src.slice(..).unwrap(), dst)).unwrap()
            };
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        }
    })
    .unwrap();
    assert_eq!(inbox.as_slice(), src.as_slice(), "the RC SEND");
    let mut written = vec![0u8; 2 * 4096];
    target.read_volatile_into(0, &mut written).unwrap();
    assert_eq!(&written[..4096], src.as_slice(), "the RC WRITE");
    // UC: unacknowledged, so the sender's completion says nothing of delivery; poll until the
    // bytes are there (bounded).
    let deadline = Instant::now() + WAIT;
    while written[4096..] != *src.as_slice() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        target.read_volatile_into(0, &mut written).unwrap();
    }
    assert_eq!(&written[4096..], src.as_slice(), "the UC WRITE");
}

/// Runs `server` and then `client` (each `rdma_server` / `rdma_client`, ours or rdma-core's) on
/// `port` of the device's address; both must exit 0, the client printing `end 0`. Neither
/// client retries a refused connect (both exit 1): the test re-runs it until the server
/// listens, bounded.
fn server_and_client(server: &std::path::Path, client: &std::path::Path, port: TcpPort) {
    let ip = local_ip().to_string();
    let port = port.get().to_string();
    let args = ["-s".to_string(), ip, "-p".to_string(), port];
    // The C server prints to a pipe, buffered: nothing shows it listens. The client is re-run
    // until it gets through (a refused connect exits 1), bounded.
    let mut srv = Proc::spawn("rdma_server", server, &args);
    let deadline = Instant::now() + WAIT;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let mut cli = Proc::spawn("rdma_client", client, &args);
        let Some((status, _)) = cli.wait_exit(WAIT) else {
            cli.stop();
            panic!("rdma_client did not exit:\n{}", cli.output());
        };
        if status.success() {
            assert!(cli.output().contains("rdma_client: end 0"), "{}", cli.output());
            break;
        }
        assert!(Instant::now() < deadline, "rdma_client kept failing:\n{}\n{}", cli.output(), srv.output());
    }
    srv.expect_success(WAIT);
}

#[test]
fn our_rdma_server_example_serves_rdma_cores_rdma_client() {
    server_and_client(&example("rdma_server"), &c_tool("rdma_client"), TcpPort::CmOurServerExampleWithCClient);
}

#[test]
fn our_rdma_client_example_talks_to_rdma_cores_rdma_server() {
    server_and_client(&c_tool("rdma_server"), &example("rdma_client"), TcpPort::CmCServerWithOurClientExample);
}

/// The peer process killed after the connection is established (rdma-core's `rdma_server`,
/// waiting for our message): its identifier dies with it, this side sees `DISCONNECTED` in
/// bounded time, and the receive it had posted comes back, flushed, with its buffer.
#[test]
fn a_killed_peer_is_seen_as_a_disconnect_and_every_buffer_comes_back() {
    let side = Side::on(&device_name());
    let (mut server, conn, recv) = connect_to_c_server(&side, TcpPort::CmKilledCServer);
    server.stop();
    let start = Instant::now();
    // The server is killed while it waits for our message: after its accept returned
    // (DISCONNECTED), or, if it had not yet seen the connection established, REJECTED (28, the
    // consumer's reject: its identifier destroyed with its process).
    match conn.wait_disconnected(WAIT).expect("the killed peer's end of the connection") {
        PeerEnded::Disconnected | PeerEnded::Rejected { status: 28 } => {}
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < WAIT);
    let qp = conn.disconnect().expect("our side");
    let (c, chunk) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive, flushed");
    assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
    assert_eq!(chunk.len(), 16, "the buffer came back");
    assert_eq!(qp.outstanding(), (0, 0));
}

/// Identifiers dropped in every state, and a request dropped unanswered: nothing blocks, and
/// the side that connected to the dropped request is refused in bounded time.
#[test]
fn identifiers_dropped_in_every_state_end_cleanly() {
    let ip = local_ip();
    drop(CmId::new().unwrap());
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(ip), 0), 4).unwrap();
    let port = listener.port();
    let to = SocketAddr::new(IpAddr::V4(ip), port);
    drop(CmId::new().unwrap().resolve_addr(None, to, WAIT).unwrap());
    drop(resolve(to));
    let side = Side::on(&device_name());
    drop(resolve(to).prepare(side.qp(), Access::NONE).unwrap());
    // A request dropped without an answer: the connecting side fails, in bounded time.
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a request");
        drop(req);
        listener
    });
    let start = Instant::now();
    let r = resolve(to).connect(side.qp(), Access::NONE, &ConnParam::default(), WAIT);
    assert!(matches!(r, Err(Error::Rejected { .. }) | Err(Error::Cm { .. })), "{:?}", r.map(|_| ()));
    assert!(start.elapsed() < WAIT, "{:?}", start.elapsed());
    drop(server.join().expect("the listener thread"));
}

/// A listener dropped with a connect request queued on its channel and never read: the drop
/// returns at once (`rdma_destroy_id` does not wait for an event nobody read: every event read
/// is acknowledged at once, and unread ones are not counted), and the connecting side is
/// refused in bounded time.
#[test]
fn a_listener_dropped_with_an_unread_request_returns_at_once_and_the_connect_fails_bounded() {
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 4).expect("listen");
    let to = SocketAddr::new(IpAddr::V4(local_ip()), listener.port());
    let side = Side::on(&device_name());
    let connecting = resolve(to).prepare(side.qp(), Access::NONE).expect("prepared");
    let client = std::thread::spawn(move || {
        let start = Instant::now();
        let r = connecting.connect(&ConnParam::default(), WAIT).map(|_| ());
        (r, start.elapsed())
    });
    // Long enough for the request to be queued on the listener's channel, unread.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    drop(listener);
    assert!(t.elapsed() < Duration::from_secs(2), "the listener's drop blocked for {:?}", t.elapsed());
    let (r, took) = client.join().expect("the client thread");
    assert!(matches!(r, Err(Error::Rejected { .. }) | Err(Error::Cm { .. })), "{r:?}");
    assert!(took < WAIT, "{took:?}");
}

/// A request read, its listener dropped, then the request accepted: the connection carries a
/// SEND whose bytes land, and the passive side sees the active side's disconnect.
#[test]
fn an_rc_request_outlives_its_listener_and_is_accepted_after_it_is_gone() {
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 4).expect("listen");
    let to = SocketAddr::new(IpAddr::V4(local_ip()), listener.port());
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a request");
        drop(listener);
        let side = Side::on(&req.device_name().expect("the request's device"));
        let conn = req.accept(side.qp(), Access::NONE, &ConnParam::default(), WAIT).expect("accepted late");
        (side, conn)
    });
    let side = Side::on(&device_name());
    let conn = resolve(to).connect(side.qp(), Access::NONE, &ConnParam::default(), WAIT).expect("connected");
    let (peer_side, peer) = server.join().expect("the server thread");
    let mut src = side.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(&[0x5a; 64]);
    let mut inbox = peer_side.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let rt = s.post_recv(peer.qp(), wr::Recv::new(inbox.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(conn.qp(), wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let (c, _) = s.wait(rt, WAIT).unwrap();
        assert!(c.is_success() && c.byte_len() == 64, "{c:?}");
    })
    .unwrap();
    assert_eq!(inbox.as_slice(), &[0x5a; 64][..], "the SEND landed over the late-accepted connection");
    drop(conn.disconnect().expect("disconnect"));
    assert_eq!(peer.wait_disconnected(WAIT).expect("the end"), PeerEnded::Disconnected);
}

// ---------------------------------------------------------------------------------------------
// Attacks on the connection manager (branch attack-cm).

/// The READ/atomic depths of a QP (`ibv_query_qp` on its raw handle, a query `typed_verbs::raw`
/// allows): (max_rd_atomic, max_dest_rd_atomic).
#[allow(unsafe_code)]
fn depths(qp: &Qp<RC, RTS>) -> (u8, u8) {
    let mut attr = typed_verbs_sys::ibv_qp_attr::default();
    let mut init = typed_verbs_sys::ibv_qp_init_attr::default();
    let mask = typed_verbs_sys::IBV_QP_MAX_QP_RD_ATOMIC | typed_verbs_sys::IBV_QP_MAX_DEST_RD_ATOMIC;
    // SAFETY: the QP is alive (borrowed); both out-pointers are valid; a query only.
    let ret = unsafe { typed_verbs_sys::ibv_query_qp(qp.as_raw(), &mut attr, mask as i32, &mut init) };
    assert_eq!(ret, 0, "ibv_query_qp");
    (attr.max_rd_atomic, attr.max_dest_rd_atomic)
}

/// One connection between `active` and `passive` parameters; the depths each QP got:
/// ((active max_rd_atomic, active max_dest_rd_atomic), (passive ..., passive ...)).
fn connect_with_depths(active: ConnParam, passive: ConnParam) -> ((u8, u8), (u8, u8)) {
    let ip = local_ip();
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(ip), 0), 4).unwrap();
    let port = listener.port();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a request");
        let side = Side::on(&req.device_name().unwrap());
        let conn = req.accept(side.qp(), Access::NONE.remote_read(), &passive, WAIT).expect("accept");
        (side, conn)
    });
    let side = Side::on(&device_name());
    let conn = resolve(SocketAddr::new(IpAddr::V4(ip), port))
        .connect(side.qp(), Access::NONE.remote_read(), &active, WAIT)
        .expect("connect");
    let (pside, pconn) = server.join().unwrap();
    let a = depths(conn.qp());
    let p = depths(pconn.qp());
    drop((conn, pconn, side, pside));
    (a, p)
}

/// The IBTA rule the CM's depths exist for: a QP never has more RDMA READ / atomic requests
/// outstanding (`max_rd_atomic`) than its peer has responder resources for
/// (`max_dest_rd_atomic`), and neither side exceeds what its `ConnParam` asked. With unequal
/// depths on the two sides (the passive one accepting fewer, then the active one), the
/// passive QP was moved to RTS before `rdma_accept` with the kernel's value, which is the
/// REQ's responder resources (the peer's offer), not the accept's initiator depth: it could
/// issue 4 READs at a peer QP that takes 1. Both sides asking for the CM's value (255) get the
/// peer's offer, at most the device's limits (librdmacm's `rdma_accept` and `rdma_connect` cap
/// there; a QP asked for more is refused by `ibv_modify_qp`).
#[test]
fn depths_never_exceed_the_peers_responder_resources() {
    let dev = open().query_device().expect("ibv_query_device");
    let (max_dest, max_rd) = (dev.max_qp_rd_atom(), dev.max_qp_init_rd_atom());
    for (a, p) in [(4u8, 1u8), (1, 4), (u8::MAX, u8::MAX)] {
        let active = ConnParam { responder_resources: a, initiator_depth: a, ..ConnParam::default() };
        let passive = ConnParam { responder_resources: p, initiator_depth: p, ..ConnParam::default() };
        let ((a_rd, a_dest), (p_rd, p_dest)) = connect_with_depths(active, passive);
        let what = format!(
            "active asks {a}/{a}, passive {p}/{p}: active max_rd_atomic {a_rd} max_dest_rd_atomic {a_dest}, \
             passive max_rd_atomic {p_rd} max_dest_rd_atomic {p_dest}"
        );
        assert!(p_rd <= a_dest, "the passive QP may issue more READs than the active one takes: {what}");
        assert!(a_rd <= p_dest, "the active QP may issue more READs than the passive one takes: {what}");
        assert!(a_rd <= a && p_rd <= p, "a QP issues more READs than its initiator depth: {what}");
        assert!(a_dest <= a && p_dest <= p, "a QP takes more READs than its responder resources: {what}");
        let limits = format!("{what}; the device's max_qp_init_rd_atom {max_rd}, max_qp_rd_atom {max_dest}");
        assert!(
            u32::from(a_rd.max(p_rd)) <= max_rd && u32::from(a_dest.max(p_dest)) <= max_dest,
            "a QP exceeds the device's limits: {limits}"
        );
        if a == u8::MAX {
            // The CM's value on both sides: each QP takes what the device and its peer allow.
            let both = max_rd.min(max_dest);
            assert!(both > 0, "{limits}");
            assert_eq!((u32::from(a_rd), u32::from(p_rd)), (both, both), "{limits}");
        }
    }
}

/// A request's `peer_depths` are what the peer gave its `rdma_connect` (its responder
/// resources, its initiator depth), not the event's recipient view, which carries them swapped
/// (rdma_get_cm_event(3)).
#[test]
fn a_requests_peer_depths_are_what_the_peer_asked_for() {
    let ip = local_ip();
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(ip), 0), 4).unwrap();
    let port = listener.port();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a request");
        let depths = req.peer_depths();
        drop(req.reject(&[]));
        depths
    });
    let id = resolve(SocketAddr::new(IpAddr::V4(ip), port));
    let side = Side::on(&device_name());
    let param = ConnParam { responder_resources: 3, initiator_depth: 2, ..ConnParam::default() };
    let refused = id.connect(side.qp(), Access::NONE, &param, WAIT);
    assert!(refused.is_err(), "the server rejects");
    assert_eq!(server.join().expect("the server thread"), (3, 2), "(responder resources, initiator depth)");
}

/// `Duration::MAX` is a legal timeout ("wait as long as it takes"): every CM wait takes it
/// without panicking (`timeout + 1s` and `Instant::now() + timeout` overflowed).
#[test]
fn waits_take_duration_max_without_panicking() {
    let ip = local_ip();
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(ip), 0), 4).unwrap();
    let port = listener.port();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(Duration::MAX).expect("a request");
        let side = Side::on(&req.device_name().unwrap());
        let conn = req.accept(side.qp(), Access::NONE, &ConnParam::default(), Duration::MAX).expect("accept");
        (side, conn)
    });
    let to = SocketAddr::new(IpAddr::V4(ip), port);
    let id = CmId::new().unwrap().resolve_addr(None, to, Duration::MAX).expect("resolve_addr");
    let id = id.resolve_route(Duration::MAX).expect("resolve_route");
    let side = Side::on(&device_name());
    let conn = id.connect(side.qp(), Access::NONE, &ConnParam::default(), Duration::MAX).expect("connect");
    let (pside, pconn) = server.join().expect("the server thread");
    drop(conn.disconnect().expect("disconnect"));
    assert_eq!(pconn.wait_disconnected(Duration::MAX).expect("the disconnect"), PeerEnded::Disconnected);
    drop((pconn, side, pside));
}

/// Owned receives posted on `Connecting::qp` (the documented way: before the peer can send)
/// when the connect then fails: the QP is dropped inside `connect`, but the tokens keep it
/// alive in INIT, where a receive never completes. The buffers must come back (flushed), not
/// wait forever for a completion that cannot come.
#[test]
fn receives_posted_before_a_failed_connect_come_back_flushed() {
    let port = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 1).unwrap().port();
    let side = Side::on(&device_name());
    let connecting = resolve(SocketAddr::new(IpAddr::V4(local_ip()), port)).prepare(side.qp(), Access::NONE).unwrap();
    let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
    let r = connecting.connect(&ConnParam::default(), WAIT);
    assert!(matches!(r, Err(Error::Rejected { .. })), "nobody listens: {:?}", r.map(|_| ()));
    let (c, chunk) = recv.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("the receive back, flushed");
    assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
    assert_eq!(chunk.len(), 16);
}

/// Two threads wait for requests on one listener while six clients connect at once: each
/// request goes to one of them, whole (a request's identifier leaves the listener's channel
/// before another thread reads it, so no thread takes an event of another's request), and every
/// client is connected with the private data it sent echoed back.
#[test]
fn six_concurrent_clients_are_served_whole_by_two_threads_waiting_on_one_listener() {
    const CLIENTS: usize = 6;
    let listener = std::sync::Arc::new(CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 8).unwrap());
    let to = SocketAddr::new(IpAddr::V4(local_ip()), listener.port());
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let servers: Vec<_> = (0..2)
        .map(|_| {
            let (listener, accepted) = (listener.clone(), accepted.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + WAIT;
                let mut conns = Vec::new();
                while accepted.load(std::sync::atomic::Ordering::SeqCst) < CLIENTS && Instant::now() < deadline {
                    let req = match listener.next_request(Duration::from_millis(200)) {
                        Ok(req) => req,
                        Err(Error::Timeout { .. }) => continue,
                        Err(e) => panic!("a waiting thread got {e:?}"),
                    };
                    accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let side = Side::on(&req.device_name().expect("the request's device"));
                    let param = ConnParam { private_data: req.private_data()[..1].to_vec(), ..ConnParam::default() };
                    let conn = req.accept(side.qp(), Access::NONE, &param, WAIT).expect("rdma_accept");
                    conns.push((side, conn));
                }
                conns
            })
        })
        .collect();
    let clients: Vec<_> = (0..CLIENTS as u8)
        .map(|i| {
            std::thread::spawn(move || {
                let side = Side::on(&device_name());
                let param = ConnParam { private_data: vec![i], ..ConnParam::default() };
                let conn = resolve(to).connect(side.qp(), Access::NONE, &param, WAIT).expect("rdma_connect");
                assert_eq!(conn.peer_private_data().first(), Some(&i), "client {i}'s own request was answered");
                (side, conn)
            })
        })
        .collect();
    let connected: Vec<_> = clients.into_iter().map(|c| c.join().expect("a client")).collect();
    let served: Vec<_> = servers.into_iter().map(|s| s.join().expect("a waiting thread")).collect();
    assert_eq!(connected.len(), CLIENTS);
    assert_eq!(served.iter().map(Vec::len).sum::<usize>(), CLIENTS, "every request accepted once");
}

/// A `Connection` dropped, not disconnected, with an owned receive outstanding on its QP: the
/// token keeps the QP alive, and the drop moves it to ERR, so the receive comes back flushed in
/// bounded time instead of waiting on a connection nobody serves; the peer sees the disconnect.
#[test]
fn receives_outstanding_when_a_connection_is_dropped_come_back_flushed() {
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 4).expect("listen");
    let port = listener.port();
    let server = serve(listener, None);
    let id = resolve(SocketAddr::new(IpAddr::V4(local_ip()), port));
    let side = Side::on(&device_name());
    let param = ConnParam { private_data: b"hello".to_vec(), ..ConnParam::default() };
    let conn = id.connect(side.qp(), Access::NONE.remote_write(), &param, WAIT).expect("rdma_connect");
    let (_peer_side, peer) = server.join().expect("the server thread").expect("accepted");
    let recv = conn.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
    drop(conn);
    let (c, chunk) = recv.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("the receive back, flushed");
    assert_eq!((c.status(), chunk.len()), (WcStatus::WrFlushErr, 16), "{c:?}");
    assert_eq!(peer.wait_disconnected(WAIT).expect("the peer's view"), PeerEnded::Disconnected);
}

/// A `Connecting` and an `Accepting` dropped without connecting or accepting hand the receives
/// posted on their QPs back, flushed (the QP moves to ERR), as a failed step does; the peer of
/// the dropped request fails in bounded time.
#[test]
fn receives_posted_before_a_step_never_taken_come_back_flushed() {
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(local_ip()), 0), 4).unwrap();
    let to = SocketAddr::new(IpAddr::V4(local_ip()), listener.port());
    let side = Side::on(&device_name());
    let flushed = |recv: typed_verbs::owned::OwnedToken<Chunk<access::LocalRw>>| {
        let (c, chunk) = recv.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("the receive back, flushed");
        assert_eq!((c.status(), chunk.len()), (WcStatus::WrFlushErr, 16), "{c:?}");
    };
    let connecting = resolve(to).prepare(side.qp(), Access::NONE).unwrap();
    let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
    drop(connecting);
    flushed(recv);

    let client = std::thread::spawn(move || {
        let side = Side::on(&device_name());
        resolve(to).connect(side.qp(), Access::NONE, &ConnParam::default(), WAIT).map(|_| ())
    });
    let req = listener.next_request(WAIT).expect("a request");
    let accepting = req.prepare(side.qp(), Access::NONE, ConnParam::default()).expect("prepare");
    let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
    drop(accepting);
    flushed(recv);
    let r = client.join().expect("the client thread");
    assert!(matches!(r, Err(Error::Rejected { .. } | Error::Cm { .. })), "{r:?}");
}

/// The same on the passive side: a receive posted on `Accepting::qp`, then an accept that
/// fails (private data above the REP's 196 bytes, refused typed after the QP went to RTR).
#[test]
fn receives_posted_before_a_failed_accept_come_back_flushed() {
    let ip = local_ip();
    let listener = CmListener::bind(SocketAddr::new(IpAddr::V4(ip), 0), 4).unwrap();
    let port = listener.port();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a request");
        let side = Side::on(&req.device_name().unwrap());
        let param = ConnParam { private_data: vec![7; 197], ..ConnParam::default() };
        let accepting = req.prepare(side.qp(), Access::NONE, param).expect("prepare");
        let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        let r = accepting.accept(WAIT);
        assert_refused(r.map(drop), "rdma_accept", "bytes of private data; at most");
        let (c, chunk) = recv.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("the receive back, flushed");
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
        assert_eq!(chunk.len(), 16);
        drop(side);
    });
    let side = Side::on(&device_name());
    let r =
        resolve(SocketAddr::new(IpAddr::V4(ip), port)).connect(side.qp(), Access::NONE, &ConnParam::default(), WAIT);
    assert!(r.is_err(), "the accept failed");
    server.join().expect("the server thread");
}

/// Two threads waiting on one listener through `&self` at once (`next_request` takes `&self`,
/// `CmListener` is `Sync`): each gets one of two requests, nothing is lost or duplicated.
#[test]
fn two_threads_waiting_on_one_listener_each_get_one_request() {
    let ip = local_ip();
    let listener = std::sync::Arc::new(CmListener::bind(SocketAddr::new(IpAddr::V4(ip), 0), 4).unwrap());
    let port = listener.port();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let l = std::sync::Arc::clone(&listener);
            std::thread::spawn(move || {
                let req = l.next_request(WAIT).expect("a request");
                let side = Side::on(&req.device_name().unwrap());
                let conn = req.accept(side.qp(), Access::NONE, &ConnParam::default(), WAIT).expect("accept");
                (side, conn)
            })
        })
        .collect();
    let side = Side::on(&device_name());
    let conns: Vec<_> = (0..2)
        .map(|_| {
            resolve(SocketAddr::new(IpAddr::V4(ip), port))
                .connect(side.qp(), Access::NONE, &ConnParam::default(), WAIT)
                .expect("connect")
        })
        .collect();
    let passive: Vec<_> = waiters.into_iter().map(|w| w.join().expect("a waiter")).collect();
    let mut theirs: Vec<u32> = passive.iter().map(|(_, c)| c.qp().qp_num()).collect();
    theirs.sort();
    theirs.dedup();
    assert_eq!(theirs.len(), 2, "two distinct connections");
    drop((conns, passive, side));
}
