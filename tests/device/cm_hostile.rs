//! Hostile safe programs against the connection manager's UD identifiers, multicast groups,
//! `Pd::create_ah_from_wc` and the async waits: each asserts the typed outcome (an error, a
//! flushed or withheld buffer, a bounded wait), never a crash, a hang or a buffer handed back
//! while the device may still write it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use typed_verbs::ah::GrhBytes;
use typed_verbs::cm::{AddrResolved, CmEvent, CmId, CmListener, ConnRequest, RouteResolved};
use typed_verbs::owned::OwnedToken;
use typed_verbs::prelude::*;

use crate::common::*;
use crate::events::{must, run, ScratchRxe};

/// GRH room at the start of every UD receive buffer.
const GRH: usize = 40;

/// `RDMA_UDP_QKEY`.
const CM_QKEY: u32 = 0x0123_4567;

fn local_ip() -> IpAddr {
    IpAddr::V4(crate::cm::local_ip())
}

/// A context, PD and CQ on the device under test, and UD QPs on them.
struct Side {
    ctx: Context,
    pd: Pd,
    cq: Cq,
}

impl Side {
    fn new() -> Side {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        Side { ctx, pd, cq }
    }

    fn qp(&self) -> Qp<UD, RESET> {
        self.pd.create_qp::<UD>(&QpConfig::new(&self.cq)).unwrap()
    }

    /// One owned receive of GRH + `len` bytes, its buffer filled with `0xEE` first.
    fn recv(&self, qp: &Qp<UD, RTS>, len: usize) -> OwnedToken<Chunk<access::LocalRw>> {
        let mut mr = self.pd.alloc_mr(GRH + len, access::LOCAL_RW).unwrap();
        mr.as_mut_slice().fill(0xEE);
        let chunk = mr.into_chunks(GRH + len).unwrap().remove(0);
        qp.post_recv_owned(wr::Recv::new(chunk)).map_err(|e| e.error).unwrap()
    }

    /// Sends `msg` to `(ah, qpn, qkey)` from `qp`; the send's completion.
    fn send(&self, qp: &Qp<UD, RTS>, msg: &[u8], ah: &Ah, qpn: u32, qkey: u32) -> Completion {
        let mut src = self.pd.alloc_mr(msg.len(), access::LOCAL_RW).unwrap();
        src.as_mut_slice().copy_from_slice(msg);
        scope(|s| {
            let t = s.post_send(qp, wr::SendImm::new(src.slice(..).unwrap(), qp.qp_num()).to(ah, qpn, qkey)).unwrap();
            s.wait(t, WAIT).unwrap().0
        })
        .unwrap()
    }
}

/// A multicast group of its own for each test here (tests run in parallel; cm_ud uses
/// 239.7.0.x).
fn group(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(239, 8, 0, n))
}

/// A UD identifier bound to the device's address with `group` resolved.
fn bound_to(group: IpAddr) -> CmId<AddrResolved, UD> {
    CmId::new_ud()
        .unwrap()
        .resolve_addr(Some(SocketAddr::new(local_ip(), 0)), SocketAddr::new(group, 0), WAIT)
        .expect("the group's address resolved from the device's")
}

/// A member of `g` on `side`: its identifier's QP, readied by the CM.
fn member(side: &Side, g: IpAddr) -> (CmId<AddrResolved, UD>, Qp<UD, RTS>) {
    let id = bound_to(g);
    let qp = id.ready_qp(side.qp()).expect("RESET -> RTS with the CM's attributes");
    (id, qp)
}

/// Whether a datagram arrived at `r` within `within`: `Some(payload)` or `None` (the token,
/// still outstanding, is dropped: its buffer parks with the QP).
fn arrived(r: OwnedToken<Chunk<access::LocalRw>>, within: Duration, len: usize) -> Option<Vec<u8>> {
    match r.wait(within) {
        Ok((c, chunk)) => {
            assert_eq!(c.status(), WcStatus::Success, "{c:?}");
            Some(chunk.as_slice()[GRH..GRH + len].to_vec())
        }
        Err(e) => {
            assert!(matches!(e.error, Error::Timeout { .. }), "{:?}", e.error);
            None
        }
    }
}

/// An RDMA READ of `remote` (a region of `side`'s PD) over a loopback RC pair of that PD, on a
/// CQ of its own: the READ's status and the bytes it read.
fn read_over_rc<A: typed_verbs::access::HasRemoteRead>(side: &Side, remote: RemoteSlice<A>) -> (WcStatus, Vec<u8>) {
    let cq = side.ctx.create_cq(256).unwrap();
    let p = rc_pair(&side.pd, &cq, &cq, Access::NONE.remote_read(), QpCaps::default());
    let len = usize::try_from(remote.len()).unwrap();
    let mut back = side.pd.alloc_mr(len, access::LOCAL_RW).unwrap();
    let status = scope(|s| {
        let t = s.post_send(&p.a, wr::Read::new(back.slice_mut(..).unwrap(), remote)).unwrap();
        s.wait(t, WAIT).unwrap().0.status()
    })
    .unwrap();
    (status, back.as_slice().to_vec())
}

// --- multicast ---------------------------------------------------------------------------------

#[test]
fn a_qp_that_joined_one_group_twice_stays_attached_until_its_last_membership_leaves() {
    let g = group(1);
    let rx = Side::new();
    let (id1, qp) = member(&rx, g);
    let first = id1.join_multicast(g, &qp, &rx.pd, WAIT).expect("the first membership");
    let second = bound_to(g).join_multicast(g, &qp, &rx.pd, WAIT).expect("a second membership of the same QP");
    assert_eq!((first.peer().qkey(), second.peer().qkey(), first.gid()), (CM_QKEY, CM_QKEY, second.gid()));

    let tx = Side::new();
    let (tx_id, tx_qp) = member(&tx, g);
    let sender = tx_id.join_multicast(g, &tx_qp, &tx.pd, WAIT).expect("the sender joins");
    let to = sender.peer().clone();

    // Both memberships live: one copy per datagram (the QP is attached once).
    let r = rx.recv(&qp, 4);
    assert!(tx.send(&tx_qp, b"both", to.ah(), to.qp_num(), to.qkey()).is_success());
    assert_eq!(arrived(r, WAIT, 4).as_deref(), Some(&b"both"[..]));

    // The first leaves; the second still holds the QP attached.
    first.leave().expect("the first membership leaves");
    let r = rx.recv(&qp, 4);
    assert!(tx.send(&tx_qp, b"left", to.ah(), to.qp_num(), to.qkey()).is_success());
    assert_eq!(
        arrived(r, Duration::from_secs(5), 4).as_deref(),
        Some(&b"left"[..]),
        "the second membership is alive: its QP must still receive the group's datagrams"
    );

    // The last leaves: nothing arrives any more, and its leave reports no error.
    second.leave().expect("the second membership detaches and leaves");
    let r = rx.recv(&qp, 4);
    assert!(tx.send(&tx_qp, b"gone", to.ah(), to.qp_num(), to.qkey()).is_success());
    assert_eq!(arrived(r, Duration::from_secs(2), 4), None, "a datagram after the last membership left");
    drop(sender);
}

#[test]
fn a_qp_in_two_groups_leaving_one_keeps_receiving_the_other() {
    let (ga, gb) = (group(5), group(6));
    let rx = Side::new();
    let (ida, qp) = member(&rx, ga);
    let a = ida.join_multicast(ga, &qp, &rx.pd, WAIT).expect("group a");
    let b = bound_to(gb).join_multicast(gb, &qp, &rx.pd, WAIT).expect("group b, same QP");
    let tx = Side::new();
    let (tx_ida, tx_qp) = member(&tx, ga);
    let to_a = tx_ida.join_multicast(ga, &tx_qp, &tx.pd, WAIT).expect("the sender joins a");
    let to_b = bound_to(gb).join_multicast(gb, &tx_qp, &tx.pd, WAIT).expect("the sender joins b");
    a.leave().expect("a left");
    let r = rx.recv(&qp, 4);
    let (pa, pb) = (to_a.peer().clone(), to_b.peer().clone());
    assert!(tx.send(&tx_qp, b"to-a", pa.ah(), pa.qp_num(), pa.qkey()).is_success());
    assert!(tx.send(&tx_qp, b"to-b", pb.ah(), pb.qp_num(), pb.qkey()).is_success());
    assert_eq!(arrived(r, WAIT, 4).as_deref(), Some(&b"to-b"[..]), "only group b's datagram");
    let r = rx.recv(&qp, 4);
    assert_eq!(arrived(r, Duration::from_secs(2), 4), None, "nothing more: group a's datagram was not delivered");
    b.leave().expect("b left");
    drop((to_a, to_b));
}

/// A join given no time for its MULTICAST_JOIN event ends in bounded time, timed out or joined
/// (which of the two is the kernel's timing: its join event comes from a work queue, and under
/// load it can be there before the first look, three times in three), and the group can be
/// joined again afterwards.
#[test]
fn a_join_given_no_time_ends_in_bounded_time_and_the_group_can_be_joined_again() {
    let g = group(7);
    let side = Side::new();
    for _ in 0..3 {
        let (id, qp) = member(&side, g);
        let t = Instant::now();
        // No time at all for the MULTICAST_JOIN event: a timeout (or the join); either way the
        // membership ends without waiting for an unread event.
        match id.join_multicast(g, &qp, &side.pd, Duration::ZERO) {
            Err(Error::Timeout { .. }) => {}
            Ok(joined) => joined.leave().expect("left"),
            Err(e) => panic!("{e:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(10), "bounded: {:?}", t.elapsed());
    }
    let (id, qp) = member(&side, g);
    let joined = id.join_multicast(g, &qp, &side.pd, WAIT).expect("the group is joined again");
    joined.leave().expect("and left");
}

/// A QP whose membership is leaked (`mem::forget`) stays attached to the group, so its drop
/// fails to destroy it (EBUSY: the kernel counts attachments): the receive buffer parked with
/// it is leaked, not released (its region, which nothing else holds, is still registered: an
/// RDMA READ of it returns the bytes written before), and the leaked QP, which still receives
/// the group's datagrams on the shared CQ, takes none of a live member's.
#[test]
fn a_leaked_membership_keeps_its_qp_and_buffers_and_misroutes_nothing_on_the_shared_cq() {
    let g = group(2);
    let rx = Side::new();
    let (id, qp) = member(&rx, g);
    // A receive posted, its token dropped: its buffer parks with the QP. The buffer is its
    // region's only chunk (releasing it deregisters the region), peers may read it, and it
    // holds a sentinel.
    let mut region = rx.pd.alloc_mr(GRH + 8, Access::NONE.local_write().remote_read()).unwrap();
    let sentinel: Vec<u8> = (0..GRH + 8).map(|i| i as u8 ^ 0xA5).collect();
    region.as_mut_slice().copy_from_slice(&sentinel);
    let buffer = region.into_chunks(GRH + 8).unwrap().remove(0);
    let parked = buffer.remote();
    drop(qp.post_recv_owned(wr::Recv::new(buffer)).map_err(|e| e.error).unwrap());
    assert_eq!(qp.parked_buffers(), 1, "the dropped receive's buffer parks with the QP");
    let joined = id.join_multicast(g, &qp, &rx.pd, WAIT).expect("joined");
    std::mem::forget(joined);
    // The borrow is over: the QP can be dropped while still attached. Its destroy fails
    // (EBUSY: the kernel counts attachments); the parked buffer stays with the library.
    let t = Instant::now();
    drop(qp);
    assert!(t.elapsed() < Duration::from_secs(5), "the drop of an attached QP returns: {:?}", t.elapsed());
    let (status, bytes) = read_over_rc(&rx, parked);
    assert_eq!(status, WcStatus::Success, "the parked buffer's region was deregistered: the buffer was released");
    assert_eq!(bytes, sentinel, "the parked buffer's bytes changed");

    // A new member on the same CQ: the leaked QP's datagrams (it still exists) land on the
    // CQ too, and must reach nobody else.
    let (id2, qp2) = member(&rx, g);
    let r2: Vec<_> = (0..2).map(|_| rx.recv(&qp2, 8)).collect();
    let joined2 = id2.join_multicast(g, &qp2, &rx.pd, WAIT).expect("a second member joins");
    let tx = Side::new();
    let (tx_id, tx_qp) = member(&tx, g);
    let sender = tx_id.join_multicast(g, &tx_qp, &tx.pd, WAIT).expect("the sender joins");
    let to = sender.peer();
    for m in [b"first-1!", b"second-2"] {
        assert!(tx.send(&tx_qp, m, to.ah(), to.qp_num(), to.qkey()).is_success());
    }
    let got: Vec<_> = r2.into_iter().map(|r| arrived(r, WAIT, 8).expect("the live member's datagram")).collect();
    assert_eq!(got, [b"first-1!".to_vec(), b"second-2".to_vec()], "each datagram once, in order, to the live QP");
    assert_eq!(rx.cq.progress().expect("polling the shared CQ"), 0, "nothing left to route");
    joined2.leave().expect("the live member leaves");
    drop(sender);
}

#[test]
fn a_groups_address_handle_in_another_pd_is_refused_at_post_and_outlives_the_membership() {
    let g = group(3);
    let side = Side::new();
    let other_pd = side.ctx.alloc_pd().unwrap();
    let (id, qp) = member(&side, g);
    // The PD of the group's address handle is the program's choice: another PD of the device.
    let joined = id.join_multicast(g, &qp, &other_pd, WAIT).expect("joined, the handle in another PD");
    let peer = joined.peer().clone();
    let src = side.pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    scope(|s| {
        match s.post_send(&qp, wr::Send::new(src.slice(..).unwrap()).to(peer.ah(), peer.qp_num(), peer.qkey())) {
            Err(e) => match e.error {
                Error::InvalidArgument { verb: "ibv_post_send", reason } => {
                    assert!(reason.contains("address handle"), "{reason}")
                }
                other => panic!("{other:?}"),
            },
            Ok(_) => panic!("a send through an address handle of another PD was posted"),
        }
    })
    .unwrap();
    // The handle outlives the membership and its PD handle: a send through it (from a QP of
    // its PD) completes; the former member receives nothing.
    let late = side.recv(&qp, 8);
    drop(joined);
    let qp2 = ud_qp(&other_pd, &side.cq, QpCaps::default());
    let src2 = other_pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    drop(other_pd);
    let c = scope(|s| {
        let t = s
            .post_send(&qp2, wr::Send::new(src2.slice(..).unwrap()).to(peer.ah(), peer.qp_num(), peer.qkey()))
            .unwrap();
        s.wait(t, WAIT).unwrap().0
    })
    .unwrap();
    assert!(c.is_success(), "{c:?}");
    assert_eq!(arrived(late, Duration::from_secs(2), 8), None, "the former member got a datagram");
}

#[test]
fn joins_of_ipv6_and_non_multicast_groups_fail_typed_and_bounded() {
    let side = Side::new();
    // An IPv6 multicast group from the device's IPv4 address: the resolution fails.
    let t = Instant::now();
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0xff0e, 0, 0, 0, 0, 0, 0, 0x77)), 0);
    // The kernel refuses the mismatched families at once (EINVAL, on 6.12 and 6.18).
    match CmId::new_ud().unwrap().resolve_addr(Some(SocketAddr::new(local_ip(), 0)), v6, Duration::from_secs(2)) {
        Err(Error::Verb { verb, source, .. }) => {
            assert_eq!(verb.name(), "rdma_resolve_addr");
            assert_eq!(source.raw_os_error(), Some(libc::EINVAL), "{source}");
        }
        other => panic!("an IPv6 group resolved from an IPv4 address: {:?}", other.map(|_| ())),
    }
    assert!(t.elapsed() < Duration::from_secs(10), "bounded: {:?}", t.elapsed());
    // Broadcast and unspecified addresses are not multicast: refused before the CM.
    for bad in [IpAddr::V4(Ipv4Addr::BROADCAST), IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V6(Ipv6Addr::LOCALHOST)] {
        let (id, qp) = member(&side, group(4));
        let joined = id.join_multicast(bad, &qp, &side.pd, WAIT);
        match joined {
            Err(Error::InvalidArgument { verb: "rdma_join_multicast", reason }) => {
                assert!(reason.contains("not a multicast"), "{reason}")
            }
            other => panic!("a join of {bad}: {other:?}"),
        }
    }
}

// --- UD through the CM ------------------------------------------------------------------------

fn listen_ud() -> (CmListener<UD>, SocketAddr) {
    let listener = CmListener::bind_ud(SocketAddr::new(local_ip(), 0), 4).expect("listen (RDMA_PS_UDP)");
    let addr = SocketAddr::new(local_ip(), listener.port());
    (listener, addr)
}

fn resolve_ud(to: SocketAddr) -> CmId<RouteResolved, UD> {
    let id = CmId::new_ud().unwrap().resolve_addr(None, to, WAIT).expect("address resolution");
    id.resolve_route(WAIT).expect("route resolution")
}

#[test]
fn a_ud_request_outlives_its_listener_and_is_answered_after_it_is_gone() {
    let (listener, addr) = listen_ud();
    let server = std::thread::spawn(move || {
        let req: ConnRequest<UD> = listener.next_request(WAIT).expect("a UD request");
        drop(listener);
        let side = Side::new();
        let qp = req.ready_qp(side.qp()).expect("readied after the listener is gone");
        req.accept(&qp, b"late").expect("accepted after the listener is gone");
        qp.qp_num()
    });
    let side = Side::new();
    let peer = resolve_ud(addr).resolve_peer(&side.pd, &[], WAIT).expect("the service");
    assert_eq!((peer.qp_num(), peer.private_data().get(..4)), (server.join().unwrap(), Some(&b"late"[..])));
}

#[test]
fn a_ud_reject_above_136_bytes_is_refused_and_the_resolution_fails_bounded() {
    let (listener, addr) = listen_ud();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a UD request");
        match req.reject(&[9u8; 137]) {
            Err(Error::InvalidArgument { verb: "rdma_reject", reason }) => {
                assert!(reason.contains("at most 136"), "{reason}")
            }
            other => panic!("137 bytes of SIDR reject private data: {other:?}"),
        }
    });
    let side = Side::new();
    let t = Instant::now();
    let e = resolve_ud(addr).resolve_peer(&side.pd, &[], WAIT).expect_err("unanswered");
    assert!(matches!(e, Error::Cm { event: CmEvent::Unreachable, .. } | Error::Timeout { .. }), "{e:?}");
    assert!(t.elapsed() <= WAIT + Duration::from_secs(1), "bounded: {:?}", t.elapsed());
    server.join().unwrap();
}

#[test]
fn a_ud_peer_outlives_its_pd_and_context_and_is_refused_by_a_qp_of_another_pd() {
    let (listener, addr) = listen_ud();
    let server = std::thread::spawn(move || {
        let req = listener.next_request(WAIT).expect("a UD request");
        let side = Side::new();
        let qp = req.ready_qp(side.qp()).unwrap();
        let r = side.recv(&qp, 8);
        req.accept(&qp, &[]).unwrap();
        // Whatever arrives, arrives whole or not at all; nothing is expected.
        arrived(r, Duration::from_secs(3), 8)
    });
    let peer = {
        let ctx = open();
        let pd = ctx.alloc_pd().unwrap();
        resolve_ud(addr).resolve_peer(&pd, &[], WAIT).expect("the service")
        // The PD and the context are dropped here; the peer's handle keeps what it needs.
    };
    let side = Side::new();
    let qp = ud_qp(&side.pd, &side.cq, QpCaps::default());
    let src = side.pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    scope(|s| match s.post_send(&qp, wr::Send::new(src.slice(..).unwrap()).to(peer.ah(), peer.qp_num(), peer.qkey())) {
        Err(e) => assert!(
            matches!(&e.error, Error::InvalidArgument { verb: "ibv_post_send", reason } if reason.contains("address handle")),
            "{:?}",
            e.error
        ),
        Ok(_) => panic!("a send through the handle of a dropped PD of another context was posted"),
    })
    .unwrap();
    assert_eq!(server.join().unwrap(), None, "nothing was sent");
    drop(peer);
}

#[test]
fn the_two_port_spaces_never_meet_a_ud_resolution_finds_no_rc_listener_and_back() {
    // An RC listener (RDMA_PS_TCP): a UD resolution (RDMA_PS_UDP) of its port finds no service.
    let rc = CmListener::bind(SocketAddr::new(local_ip(), 0), 4).expect("an RC listener");
    let rc_addr = SocketAddr::new(local_ip(), rc.port());
    let side = Side::new();
    let t = Instant::now();
    let e = resolve_ud(rc_addr).resolve_peer(&side.pd, b"ud?", WAIT).expect_err("no UD service there");
    assert!(matches!(e, Error::Cm { event: CmEvent::Unreachable, .. }), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(10), "bounded: {:?}", t.elapsed());
    match rc.next_request(Duration::from_millis(500)) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("the RC listener saw a UD resolution: {:?}", other.map(|_| ())),
    }
    // A UD listener: an RC connect to its port is refused; the UD listener sees nothing.
    let (ud, ud_addr) = listen_ud();
    let rc_side = crate::cm::Side::on(&device_name());
    let id = CmId::new().unwrap().resolve_addr(None, ud_addr, WAIT).unwrap().resolve_route(WAIT).unwrap();
    let r = id.connect(rc_side.qp(), Access::NONE, &typed_verbs::cm::ConnParam::default(), WAIT);
    assert!(matches!(r, Err(Error::Rejected { .. })), "an RC connect to a UD port: {:?}", r.map(|_| ()));
    match ud.next_request(Duration::from_millis(500)) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("the UD listener saw an RC connect: {:?}", other.map(|_| ())),
    }
}

#[test]
fn rc_private_data_and_retry_counts_above_the_limits_are_refused_and_flush_the_qp() {
    use typed_verbs::cm::ConnParam;
    let listener = CmListener::bind(SocketAddr::new(local_ip(), 0), 4).unwrap();
    let to = SocketAddr::new(local_ip(), listener.port());
    let side = crate::cm::Side::on(&device_name());
    for (param, what) in [
        (ConnParam { private_data: vec![1; 57], ..ConnParam::default() }, "at most 56"),
        (ConnParam { retry_count: 8, ..ConnParam::default() }, "0..=7"),
        (ConnParam { rnr_retry_count: 255, ..ConnParam::default() }, "0..=7"),
    ] {
        let id = CmId::new().unwrap().resolve_addr(None, to, WAIT).unwrap().resolve_route(WAIT).unwrap();
        let connecting = id.prepare(side.qp(), Access::NONE).unwrap();
        let recv =
            connecting.qp().post_recv_owned(wr::Recv::new(crate::cm::recv_chunk(&side))).map_err(|e| e.error).unwrap();
        match connecting.connect(&param, WAIT) {
            Err(Error::InvalidArgument { verb: "rdma_connect", reason }) => assert!(reason.contains(what), "{reason}"),
            other => panic!("{param:?}: {:?}", other.map(|_| ())),
        }
        let (c, _) = recv.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("the receive back");
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
    }
    // Nothing reached the listener.
    assert!(matches!(listener.next_request(Duration::from_millis(300)), Err(Error::Timeout { .. })));
    // A reject above 148 bytes is refused; the request, consumed, goes unanswered.
    let client = std::thread::spawn(move || {
        let side = crate::cm::Side::on(&device_name());
        let id = CmId::new().unwrap().resolve_addr(None, to, WAIT).unwrap().resolve_route(WAIT).unwrap();
        id.connect(side.qp(), Access::NONE, &ConnParam::default(), WAIT).map(|_| ())
    });
    let req = listener.next_request(WAIT).expect("the request");
    match req.reject(&[0u8; 149]) {
        Err(Error::InvalidArgument { verb: "rdma_reject", reason }) => {
            assert!(reason.contains("at most 148"), "{reason}")
        }
        other => panic!("149 bytes of reject private data: {other:?}"),
    }
    let r = client.join().unwrap();
    assert!(matches!(r, Err(Error::Rejected { .. } | Error::Timeout { .. })), "{r:?}");
}

// --- create_ah_from_wc ------------------------------------------------------------------------

/// A datagram sent from one UD QP to another on the device: the receive's completion and the
/// 40 GRH bytes of its buffer; and the rig, QPs kept alive.
fn one_datagram() -> (Side, Qp<UD, RTS>, Completion, GrhBytes) {
    let side = Side::new();
    let a = ud_qp(&side.pd, &side.cq, QpCaps::default());
    let b = ud_qp(&side.pd, &side.cq, QpCaps::default());
    let r = side.recv(&b, 4);
    let ah = side
        .pd
        .create_ah(&AddressVector::global(PORT, side.ctx.query_gid(PORT, gid_index()).unwrap(), gid_index()))
        .unwrap();
    assert!(side.send(&a, b"dgrm", &ah, b.qp_num(), QKEY).is_success());
    let (c, chunk) = r.wait(WAIT).map_err(|e| e.error).unwrap();
    assert!(c.is_success() && c.has_grh(), "{c:?}");
    let grh: GrhBytes = chunk.as_slice()[..GRH].try_into().unwrap();
    (side, b, c, grh)
}

#[test]
fn an_address_handle_from_garbage_grh_bytes_or_a_bad_port_is_a_typed_outcome() {
    let (side, _qp, c, grh) = one_datagram();
    let good = side.pd.create_ah_from_wc(PORT, &c, &grh).expect("the real GRH");
    assert_eq!(good.address().grh.map(|g| g.dgid), Some(side.ctx.query_gid(PORT, gid_index()).unwrap()));
    for port in [0u8, 2, 255] {
        // rxe has one port: libibverbs refuses the others (EINVAL).
        match side.pd.create_ah_from_wc(port, &c, &grh) {
            Err(Error::Verb { verb, source, .. }) => {
                assert_eq!(verb.name(), "ibv_init_ah_from_wc");
                assert_eq!(source.raw_os_error(), Some(libc::EINVAL), "port {port}: {source}");
            }
            other => panic!("an address handle on port {port}: {:?}", other.map(|ah| format!("{:?}", ah.address()))),
        }
    }
    // Bytes that are no IP header (all ones, all zeros): libibverbs refuses them
    // (EPROTONOSUPPORT from ibv_init_ah_from_wc).
    for garbage in [[0xFFu8; 40], [0u8; 40]] {
        match side.pd.create_ah_from_wc(PORT, &c, &garbage) {
            Err(Error::Verb { verb, source, .. }) => {
                assert_eq!(verb.name(), "ibv_init_ah_from_wc");
                assert_eq!(source.raw_os_error(), Some(libc::EPROTONOSUPPORT), "{source}");
            }
            other => panic!("GRH {:02x?}..: {:?}", &garbage[..4], other.map(|ah| format!("{:?}", ah.address()))),
        }
    }
    // The real header with another IP version in its first byte still names an address: a
    // handle of this PD, on this port (whatever the address it resolved to).
    let mut other_version = grh;
    other_version[0] ^= 0xF0;
    let ah = side.pd.create_ah_from_wc(PORT, &c, &other_version).expect("a handle of the flipped header");
    assert_eq!(ah.address().port, PORT);
}

#[test]
fn an_address_handle_from_a_flushed_receive_is_refused() {
    let side = Side::new();
    let qp = ud_qp(&side.pd, &side.cq, QpCaps::default());
    let r = side.recv(&qp, 4);
    let qp = qp.to_error().map_err(|e| e.error).unwrap();
    let (c, _) = r.wait(WAIT).map_err(|e| e.error).unwrap();
    assert_eq!(c.status(), WcStatus::WrFlushErr);
    match side.pd.create_ah_from_wc(PORT, &c, &[0u8; 40]) {
        Err(Error::InvalidArgument { verb: "ibv_create_ah_from_wc", reason }) => {
            assert!(reason.contains("not a received datagram"), "{reason}")
        }
        other => panic!("an address handle from a flushed receive: {other:?}"),
    }
    drop(qp);
}

#[test]
fn an_address_handle_from_a_completion_of_another_context_is_made_in_this_pd() {
    let (_side, _qp, c, grh) = one_datagram();
    let other = Side::new();
    let ah = other.pd.create_ah_from_wc(PORT, &c, &grh).expect("a completion is plain data");
    // Usable from a QP of that PD: a send back to the datagram's source completes.
    let qp = ud_qp(&other.pd, &other.cq, QpCaps::default());
    assert!(other.send(&qp, b"back", &ah, c.src_qp(), QKEY).is_success());
}

/// The GID table of `scratch`'s port 1 as sysfs lists it: each used entry's index and GID.
fn sysfs_gids(scratch: &ScratchRxe) -> Vec<(u32, Gid)> {
    let dir = format!("/sys/class/infiniband/{}/ports/1/gids", scratch.dev);
    let mut gids = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let entry = entry.unwrap();
        let Ok(index) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        // An unused entry reads as zeros (or cannot be read).
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        let hex: String = text.trim().chars().filter(|c| *c != ':').collect();
        let mut gid = [0u8; 16];
        for (i, byte) in gid.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
        if gid != [0; 16] {
            gids.push((index, Gid(gid)));
        }
    }
    gids.sort_by_key(|&(i, _)| i);
    gids
}

/// libibverbs looks up the local GID a datagram was sent to and stores its index in a `u8`: on
/// a device of this test's own with 260 addresses (a GID table of 1024 on rxe), a datagram to
/// an address past index 255 gets a typed refusal from `create_ah_from_wc`, not a handle whose
/// truncated `sgid_index` names another address; one to an address below 256 gets a handle
/// that sends from that address.
#[test]
fn an_address_handle_back_from_a_gid_past_index_255_is_refused_typed() {
    let scratch = ScratchRxe::create("gids", false);
    let ctx = scratch.open_active();
    let len = ctx.query_port(PORT).unwrap().gid_tbl_len();
    assert!(len > 260, "rxe's GID table has room for 260 addresses: {len}");
    let addresses: Vec<Ipv4Addr> =
        (0..260u32).map(|i| Ipv4Addr::new(198, 18, 1 + (i / 250) as u8, 1 + (i % 250) as u8)).collect();
    // One `ip` for all of them (a process each is slow in the emulated VM).
    let batch = std::env::temp_dir().join(format!("typed-verbs-gids-{}", std::process::id()));
    let commands: String = addresses.iter().map(|a| format!("addr add {a}/16 dev {}\n", scratch.ndev)).collect();
    std::fs::write(&batch, commands).unwrap();
    let added = run("ip", &["-batch", &batch.to_string_lossy()]);
    let _ = std::fs::remove_file(&batch);
    must(added);
    // The kernel fills the table from work items: wait (bounded) for the last address.
    let last = Gid(addresses[259].to_ipv6_mapped().octets());
    let deadline = Instant::now() + WAIT;
    let gids = loop {
        let gids = sysfs_gids(&scratch);
        if gids.iter().any(|&(_, g)| g == last) {
            break gids;
        }
        assert!(Instant::now() < deadline, "the GID of {} is not in the table", addresses[259]);
        std::thread::sleep(Duration::from_millis(50));
    };
    let index_of = |a: &Ipv4Addr| gids.iter().find(|&&(_, g)| g == Gid(a.to_ipv6_mapped().octets())).map(|&(i, _)| i);
    let (low, high) = (addresses[0], addresses[259]);
    let low_index =
        u8::try_from(index_of(&low).expect("the first address's GID")).expect("the first address below 256");
    assert!(index_of(&high).expect("the last address's GID") > 255, "{gids:?}");

    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let (a, b) = (ud_qp(&pd, &cq, QpCaps::default()), ud_qp(&pd, &cq, QpCaps::default()));
    let mut src = pd.alloc_mr(4, access::LOCAL_RW).unwrap();
    src.as_mut_slice().copy_from_slice(b"dgrm");
    // From the first address to `to`; the receive's completion and GRH.
    let datagram = |to: Ipv4Addr| {
        let mut mr = pd.alloc_mr(GRH + 4, access::LOCAL_RW).unwrap();
        mr.as_mut_slice().fill(0xEE);
        let chunk = mr.into_chunks(GRH + 4).unwrap().remove(0);
        let r = b.post_recv_owned(wr::Recv::new(chunk)).map_err(|e| e.error).unwrap();
        let ah = pd.create_ah(&AddressVector::global(PORT, Gid(to.to_ipv6_mapped().octets()), low_index)).unwrap();
        scope(|s| {
            let t = s.post_send(&a, wr::Send::new(src.slice(..).unwrap()).to(&ah, b.qp_num(), QKEY)).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        })
        .unwrap();
        let (c, chunk) = r.wait(WAIT).map_err(|e| e.error).unwrap();
        assert!(c.is_success() && c.has_grh(), "to {to}: {c:?}");
        assert_eq!(&chunk.as_slice()[GRH..], b"dgrm");
        let grh: GrhBytes = chunk.as_slice()[..GRH].try_into().unwrap();
        (c, grh)
    };

    let (c, grh) = datagram(high);
    match pd.create_ah_from_wc(PORT, &c, &grh) {
        Err(Error::InvalidArgument { verb: "ibv_create_ah_from_wc", reason }) => {
            assert!(reason.contains(&format!("{}", Gid(high.to_ipv6_mapped().octets()))), "{reason}");
            assert!(reason.contains("above 255"), "{reason}");
        }
        other => panic!("a handle back from {high}: {:?}", other.map(|ah| *ah.address())),
    }

    let (c, grh) = datagram(addresses[1]);
    let back = pd.create_ah_from_wc(PORT, &c, &grh).expect("a handle back from an address below 256");
    let g = back.address().grh.expect("a global address");
    assert_eq!(
        u32::from(g.sgid_index),
        index_of(&addresses[1]).unwrap(),
        "sends from the address the datagram was sent to"
    );
    assert_eq!(g.dgid, Gid(low.to_ipv6_mapped().octets()), "back to the sender's address");
    drop((a, b, back));
}

// --- async waits --------------------------------------------------------------------------------

#[cfg(feature = "tokio")]
mod async_waits {
    use std::future::Future;
    use std::net::SocketAddr;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context as TaskContext, Poll, Waker};
    use std::time::{Duration, Instant};

    use tokio::time::timeout;
    use typed_verbs::cm::{CmId, CmListener, ConnParam, Connection, PeerEnded};
    use typed_verbs::prelude::*;

    use crate::cm::{recv_chunk, Side};
    use crate::cm_async::woken_within;
    use crate::common::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_io().enable_time().build().unwrap()
    }

    fn listen() -> (CmListener, SocketAddr) {
        let listener = CmListener::bind(SocketAddr::new(super::local_ip(), 0), 8).expect("listen");
        let addr = SocketAddr::new(super::local_ip(), listener.port());
        (listener, addr)
    }

    fn resolve(to: SocketAddr) -> CmId<typed_verbs::cm::RouteResolved> {
        CmId::new().unwrap().resolve_addr(None, to, WAIT).unwrap().resolve_route(WAIT).unwrap()
    }

    /// `f` bounded by `d` on `rt` (the timer is made inside the runtime).
    fn within<F: Future>(
        rt: &tokio::runtime::Runtime,
        d: Duration,
        f: F,
    ) -> Result<F::Output, tokio::time::error::Elapsed> {
        rt.block_on(async move { timeout(d, f).await })
    }

    /// Polls `f` once, inside `rt`'s context (its reactor registers what it waits for).
    fn poll_once_in<F: Future + Unpin>(rt: &tokio::runtime::Runtime, f: &mut F) -> Poll<F::Output> {
        rt.block_on(std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx))))
    }

    /// Polls `f` once, outside any runtime.
    fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
        let mut f = pin!(f);
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: Arc<Self>) {}
        }
        let waker = Waker::from(Arc::new(Noop));
        f.as_mut().poll(&mut TaskContext::from_waker(&waker))
    }

    /// A client thread connecting to `addr` with `hello` as private data; its outcome.
    fn client(addr: SocketAddr, hello: &'static [u8]) -> std::thread::JoinHandle<Result<(Side, Connection)>> {
        std::thread::spawn(move || {
            let side = Side::on(&device_name());
            let param = ConnParam { private_data: hello.to_vec(), ..ConnParam::default() };
            let conn = resolve(addr).connect(side.qp(), Access::NONE, &param, WAIT)?;
            Ok((side, conn))
        })
    }

    #[test]
    fn async_waits_polled_outside_a_runtime_fail_typed_and_flush_the_qp() {
        let (listener, addr) = listen();
        match poll_once(CmId::new().unwrap().resolve_addr_async(None, addr, WAIT)) {
            Poll::Ready(Err(Error::Verb { verb: Verb::GetCmEvent, context, .. })) => {
                assert!(context.contains("outside a tokio runtime"), "{context}")
            }
            other => panic!("resolve_addr_async outside a runtime: {:?}", other.map(|r| r.map(|_| ()))),
        }
        match poll_once(listener.next_request_async()) {
            Poll::Ready(Err(Error::Verb { verb: Verb::GetCmEvent, .. })) => {}
            other => panic!("next_request_async outside a runtime: {:?}", other.map(|r| r.map(|_| ()))),
        }
        // A connect with a receive posted: the error, and the receive back flushed.
        let side = Side::on(&device_name());
        let connecting = resolve(addr).prepare(side.qp(), Access::NONE).unwrap();
        let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        match poll_once(connecting.connect_async(&ConnParam::default())) {
            Poll::Ready(Err(Error::Verb { verb: Verb::GetCmEvent, .. })) => {}
            other => panic!("connect_async outside a runtime: {:?}", other.map(|r| r.map(|_| ()))),
        }
        let (c, _) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive comes back");
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
    }

    /// An accept polled once by `poll` must fail typed (its context naming `why`) before
    /// `rdma_accept`: the receive posted on its QP comes back flushed, and the peer, never told
    /// it is accepted, has its request go unanswered (rejected) and gets no connection.
    fn an_accept_that_cannot_wait_fails_before_it_answers_the_peer(
        why: &str,
        poll: impl FnOnce(
            std::pin::Pin<Box<dyn std::future::Future<Output = Result<Connection>>>>,
        ) -> Poll<Result<Connection>>,
    ) {
        let (listener, addr) = listen();
        let c = client(addr, b"hello");
        let req = listener.next_request(WAIT).expect("the request");
        let side = Side::on(&req.device_name().unwrap());
        let accepting = req.prepare(side.qp(), Access::NONE, ConnParam::default()).unwrap();
        let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        match poll(Box::pin(accepting.accept_async())) {
            Poll::Ready(Err(Error::Verb { verb: Verb::GetCmEvent, context, .. })) => {
                assert!(context.contains(why), "{context}")
            }
            other => panic!("accept_async ({why}): {:?}", other.map(|r| r.map(|_| ()))),
        }
        let (wc, _) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive comes back");
        assert_eq!(wc.status(), WcStatus::WrFlushErr, "{wc:?}");
        match c.join().unwrap() {
            Err(Error::Rejected { .. }) => {}
            other => panic!("the peer of a failed accept: {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn an_accept_polled_outside_a_runtime_fails_before_it_answers_the_peer() {
        an_accept_that_cannot_wait_fails_before_it_answers_the_peer("outside a tokio runtime", poll_once);
    }

    /// The same accept polled inside a tokio runtime built without I/O (whose reactor cannot
    /// take the channel's descriptor; registering one panics in tokio).
    #[test]
    fn an_accept_polled_in_a_runtime_without_io_fails_before_it_answers_the_peer() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        an_accept_that_cannot_wait_fails_before_it_answers_the_peer("without I/O", |f| {
            let _in_rt = rt.enter();
            poll_once(f)
        });
    }

    #[test]
    fn two_tasks_waiting_on_one_listener_each_get_one_request() {
        let (listener, addr) = listen();
        let listener = Arc::new(listener);
        let rt = runtime();
        let waits: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&listener);
                rt.spawn(async move {
                    let req = timeout(WAIT, l.next_request_async()).await.expect("bounded").expect("a request");
                    let seen = req.private_data()[..2].to_vec();
                    req.reject(&seen).unwrap();
                    seen
                })
            })
            .collect();
        let clients = [client(addr, b"c1"), client(addr, b"c2")];
        let mut seen: Vec<Vec<u8>> = waits.into_iter().map(|w| rt.block_on(w).expect("the task")).collect();
        seen.sort();
        assert_eq!(seen, [b"c1".to_vec(), b"c2".to_vec()], "each request to exactly one wait");
        for c in clients {
            match c.join().unwrap() {
                Err(Error::Rejected { private_data, .. }) => assert!(private_data.starts_with(b"c")),
                other => panic!("{:?}", other.map(|_| ())),
            }
        }
    }

    /// A task polls a listener's wait once (registered with the reactor), a client's request
    /// is then queued on the listener's channel (the reactor wakes the wait: its descriptor is
    /// readable), and the task panics without polling the wait again: the unwinding drops the
    /// wait, which read nothing, and the next wait gets that request.
    #[test]
    fn a_task_panicking_with_a_listener_wait_pending_loses_no_request() {
        const DOOMED: &str = "the task dies with its wait pending and the request on the channel";
        let (listener, addr) = listen();
        let listener = Arc::new(listener);
        let rt = runtime();
        let l = Arc::clone(&listener);
        let (registered, is_registered) = std::sync::mpsc::channel();
        let doomed = rt.spawn(async move {
            let (woken, waker) = count_waker();
            let mut wait = Box::pin(l.next_request_async());
            assert!(poll_with(&mut wait, &waker).is_pending(), "nobody connected yet");
            registered.send(()).unwrap();
            if woken_within(&woken, WAIT).await {
                std::panic::panic_any(DOOMED);
            }
        });
        is_registered.recv_timeout(WAIT).expect("the task's wait is registered");
        let c = client(addr, b"pending");
        let panic = rt.block_on(doomed).expect_err("the request never reached the listener's channel").into_panic();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&DOOMED), "the task panicked elsewhere");
        let req = within(&rt, WAIT, listener.next_request_async()).expect("the request was lost").expect("the request");
        assert_eq!(req.private_data().get(..7), Some(&b"pending"[..]));
        req.reject(b"ok").unwrap();
        assert!(matches!(c.join().unwrap(), Err(Error::Rejected { .. })));
    }

    #[test]
    fn an_accept_future_dropped_while_it_waits_hands_the_posted_receive_back_flushed() {
        let rt = runtime();
        // Whether ESTABLISHED is already there at the accept's first poll depends on how the
        // threads are scheduled: the scenario is tried until a first poll finds it waiting.
        for _ in 0..10 {
            if accept_dropped_while_waiting(&rt) {
                return;
            }
        }
        panic!(
            "in 10 tries, the accept's first poll never found it waiting (ESTABLISHED or the peer's end came first)"
        );
    }

    /// One try of the test above; false if the first poll was not pending (ESTABLISHED came
    /// within it, or the peer gave up first): that connection is ended, nothing was dropped
    /// while waiting, and the try proves nothing of the test's claim.
    fn accept_dropped_while_waiting(rt: &tokio::runtime::Runtime) -> bool {
        let (listener, addr) = listen();
        let c = client(addr, b"hello");
        let req = listener.next_request(WAIT).expect("the request");
        let side = Side::on(&req.device_name().unwrap());
        let accepting = req.prepare(side.qp(), Access::NONE, ConnParam::default()).unwrap();
        let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        // Polled once (rdma_accept sent, ESTABLISHED not yet there), then dropped.
        let mut accept = Box::pin(accepting.accept_async());
        match poll_once_in(rt, &mut accept) {
            Poll::Pending => {}
            Poll::Ready(Ok(conn)) => {
                conn.disconnect().expect("the connection that came too fast ends");
                drop(c.join().unwrap());
                return false;
            }
            Poll::Ready(Err(e)) => {
                // The peer gave up first (a slow machine): the step failed typed, and the
                // receive comes back flushed.
                assert!(!matches!(e, Error::Timeout { .. }), "{e:?}");
                let (wc, _) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive comes back");
                assert_eq!(wc.status(), WcStatus::WrFlushErr, "{wc:?}");
                drop(c.join().unwrap());
                return false;
            }
        }
        drop(accept);
        let (wc, chunk) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive comes back");
        assert_eq!((wc.status(), chunk.len()), (WcStatus::WrFlushErr, 16), "{wc:?}");
        // The client ends one way or another, bounded; a connection it got sees its end.
        match c.join().unwrap() {
            Ok((_side, conn)) => {
                assert!(conn.wait_disconnected(WAIT).is_ok(), "the accepting side is gone");
            }
            Err(e) => assert!(!matches!(e, Error::Timeout { .. }), "{e:?}"),
        }
        true
    }

    #[test]
    fn connect_and_accept_futures_dropped_before_their_first_poll_hand_the_receives_back_flushed() {
        // As in a `tokio::select!` whose other branch is ready first: the step's future is
        // dropped without ever being polled. It holds the QP the receive was posted on.
        let (_listener, addr) = listen(); // never answers
        let side = Side::on(&device_name());
        let connecting = resolve(addr).prepare(side.qp(), Access::NONE).unwrap();
        let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        let param = ConnParam::default();
        drop(connecting.connect_async(&param));
        let (c, _) = recv.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("the connect's receive back");
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");

        let (listener, addr) = listen();
        let client = client(addr, b"hello");
        let req = listener.next_request(WAIT).expect("the request");
        let accepting = req.prepare(side.qp(), Access::NONE, ConnParam::default()).unwrap();
        let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        drop(accepting.accept_async());
        let (c, _) = recv.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("the accept's receive back");
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
        // The request went unanswered: the peer is refused.
        assert!(matches!(client.join().unwrap(), Err(Error::Rejected { .. })));
    }

    #[test]
    fn a_forgotten_connect_future_keeps_its_qp_and_never_hands_the_receive_back() {
        let (_listener, addr) = listen(); // never answers
        let side = Side::on(&device_name());
        let rt = runtime();
        let connecting = resolve(addr).prepare(side.qp(), Access::NONE).unwrap();
        let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        let param = ConnParam::default();
        let mut fut = Box::pin(connecting.connect_async(&param));
        assert!(within(&rt, Duration::from_millis(100), &mut fut).is_err(), "still waiting");
        std::mem::forget(fut);
        // The QP is leaked in INIT: the receive stays posted, the buffer is not handed back.
        let t = Instant::now();
        let e = recv.wait(Duration::from_secs(2)).expect_err("a receive of a leaked QP in INIT completed");
        assert!(matches!(e.error, Error::Timeout { .. }), "{:?}", e.error);
        assert!(!e.token.is_complete());
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_forgotten_accept_future_leaves_a_live_connection_that_completes_its_receive() {
        let (listener, addr) = listen();
        let c = client(addr, b"hello");
        let rt = runtime();
        let req = listener.next_request(WAIT).expect("the request");
        let side = Side::on(&req.device_name().unwrap());
        let accepting = req.prepare(side.qp(), Access::NONE, ConnParam::default()).unwrap();
        let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        let mut fut = Box::pin(accepting.accept_async());
        match poll_once_in(&rt, &mut fut) {
            // rdma_accept sent, ESTABLISHED not there yet: the future is leaked mid-wait.
            Poll::Pending => std::mem::forget(fut),
            // ESTABLISHED came within the first poll (scheduling): the connection is leaked
            // instead, which leaves the QP in the same state.
            Poll::Ready(Ok(conn)) => std::mem::forget(conn),
            Poll::Ready(Err(e)) => {
                // The peer gave up first (a slow machine): the step failed typed, and the
                // receive comes back flushed.
                assert!(!matches!(e, Error::Timeout { .. }), "{e:?}");
                let (wc, _) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive comes back");
                assert_eq!(wc.status(), WcStatus::WrFlushErr, "{wc:?}");
                return;
            }
        }
        // The client's connect completes (its RTU reaches a live identifier) and it sends.
        let (client_side, conn) = c.join().unwrap().expect("the client connects to the leaked accept");
        let mut src = client_side.pd.alloc_mr(16, access::LOCAL_RW).unwrap();
        src.as_mut_slice().copy_from_slice(b"into a leaked QP");
        scope(|s| {
            let t = s.post_send(conn.qp(), wr::Send::new(src.slice(..).unwrap())).map_err(|e| e.error).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success(), "the leaked QP is connected and receives");
        })
        .unwrap();
        // The receive completes with the client's data, after the device wrote it.
        let (wc, chunk) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive of the leaked QP");
        assert_eq!((wc.status(), chunk.as_slice()), (WcStatus::Success, &b"into a leaked QP"[..]));
        drop(conn);
    }

    #[test]
    fn a_resolve_peer_future_dropped_before_the_answer_leaves_the_service_a_typed_outcome() {
        let (listener, addr) = super::listen_ud();
        let rt = runtime();
        let side = super::Side::new();
        let id = super::resolve_ud(addr);
        let mut fut = Box::pin(id.resolve_peer_async(&side.pd, b"gone"));
        assert!(within(&rt, Duration::from_millis(50), &mut fut).is_err(), "no answer yet");
        drop(fut);
        // The service answers a requester whose identifier is gone: the SIDR reply goes
        // nowhere, the accept itself succeeds or fails typed.
        let req = listener.next_request(WAIT).expect("the request was sent before the drop");
        assert_eq!(req.private_data().get(..4), Some(&b"gone"[..]));
        let qp = req.ready_qp(side.qp()).unwrap();
        match req.accept(&qp, &[]) {
            Ok(()) | Err(Error::Verb { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
        // And the next resolution is answered as usual.
        let server = std::thread::spawn(move || {
            let req = listener.next_request(WAIT).expect("the second request");
            let side = super::Side::new();
            let qp = req.ready_qp(side.qp()).unwrap();
            req.accept(&qp, b"again").unwrap();
        });
        let peer = within(&rt, WAIT, super::resolve_ud(addr).resolve_peer_async(&side.pd, &[]))
            .expect("bounded")
            .expect("the second resolution");
        assert_eq!(peer.private_data().get(..5), Some(&b"again"[..]));
        server.join().unwrap();
    }

    /// Waits first polled on a runtime that is then dropped go on in the runtime that polls
    /// them next (their descriptors registered again with its reactor): the listener's sees a
    /// request made then; the connect's, which nobody answers, keeps waiting, and dropped, it
    /// moves the QP to ERR (its receive comes back flushed).
    #[test]
    fn waits_first_polled_on_a_runtime_that_is_gone_go_on_in_the_next_and_a_dropped_one_flushes_the_qp() {
        let (_listener, addr) = listen(); // never answers
        let (idle, idle_addr) = listen(); // connected to once the waits moved
        let side = Side::on(&device_name());
        let connecting = resolve(addr).prepare(side.qp(), Access::NONE).unwrap();
        let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_chunk(&side))).map_err(|e| e.error).unwrap();
        let param = ConnParam::default();
        let mut connect = Box::pin(connecting.connect_async(&param));
        let mut request = Box::pin(idle.next_request_async());
        let first = runtime();
        assert!(within(&first, Duration::from_millis(50), &mut connect).is_err(), "waiting");
        assert!(within(&first, Duration::from_millis(50), &mut request).is_err(), "waiting");
        drop(first); // the reactor their descriptors were registered with is gone
        let second = runtime();
        let c = client(idle_addr, b"moved");
        let req = match within(&second, WAIT, &mut request) {
            Ok(Ok(req)) => req,
            Ok(Err(e)) => panic!("the moved wait failed: {e:?}"),
            Err(_) => panic!("the listener's wait, moved to the second runtime, missed the request"),
        };
        assert_eq!(req.private_data().get(..5), Some(&b"moved"[..]));
        drop(req); // refused: the client's connect fails
        assert!(c.join().unwrap().is_err(), "a refused request");
        assert!(within(&second, Duration::from_millis(200), &mut connect).is_err(), "nobody answers: still waiting");
        drop(connect);
        let (c, _) = recv.wait(WAIT).map_err(|e| e.error).expect("the receive comes back");
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
    }

    /// A connection's wait for its end polled once (registered with the reactor), the peer's
    /// disconnect then queued on the connection's channel (the reactor wakes the wait: its
    /// descriptor is readable), and the wait dropped without another poll: it read nothing,
    /// and the next wait gets the end.
    #[test]
    fn a_disconnect_wait_dropped_with_the_disconnect_pending_loses_no_event() {
        let (listener, addr) = listen();
        let c = client(addr, b"hello");
        let rt = runtime();
        let req = listener.next_request(WAIT).expect("the request");
        let side = Side::on(&req.device_name().unwrap());
        let conn = req.accept(side.qp(), Access::NONE, &ConnParam::default(), WAIT).expect("accepted");
        let (_peer_side, peer) = c.join().unwrap().expect("connected");
        let ended = rt.block_on(async {
            let (woken, waker) = count_waker();
            let mut wait = Box::pin(conn.wait_disconnected_async());
            assert!(poll_with(&mut wait, &waker).is_pending(), "an end before the peer disconnected");
            peer.disconnect().expect("the peer disconnects");
            assert!(woken_within(&woken, WAIT).await, "the peer's disconnect never reached the connection's channel");
            drop(wait);
            timeout(WAIT, conn.wait_disconnected_async()).await
        });
        assert_eq!(ended.expect("the end was lost").expect("the end"), PeerEnded::Disconnected);
    }
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_join_carries_datagrams_a_dropped_one_leaves_and_outside_a_runtime_nothing_is_joined() {
    use std::future::Future;
    use std::task::{Context as TaskContext, Poll, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let g = group(9);
    let rx = Side::new();
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap();

    // Outside a runtime: a typed error, before the join is asked for.
    let (id, qp) = member(&rx, g);
    let waker = Waker::from(std::sync::Arc::new(Noop));
    let mut join = Box::pin(id.join_multicast_async(g, &qp, &rx.pd));
    match join.as_mut().poll(&mut TaskContext::from_waker(&waker)) {
        Poll::Ready(Err(Error::Verb { verb: Verb::GetCmEvent, context, .. })) => {
            assert!(context.contains("outside a tokio runtime"), "{context}")
        }
        other => panic!("expected a typed error naming rdma_get_cm_event, got {other:?}"),
    }
    drop(join);

    // A join abandoned while it waits (its future dropped after one poll; or, on a fast
    // machine, already joined and dropped) leaves the group in bounded time.
    let (id, qp) = member(&rx, g);
    let t = Instant::now();
    let first = rt.block_on(async {
        let mut join = Box::pin(id.join_multicast_async(g, &qp, &rx.pd));
        std::future::poll_fn(|cx| Poll::Ready(join.as_mut().poll(cx).map(|r| r.map(drop)))).await
    });
    if let Poll::Ready(r) = first {
        r.expect("a join that completed at its first poll");
    }
    assert!(t.elapsed() < Duration::from_secs(10), "bounded: {:?}", t.elapsed());

    // Joined with the async wait on both sides: the group's datagrams arrive.
    let joined = rt
        .block_on(async { tokio::time::timeout(WAIT, bound_to(g).join_multicast_async(g, &qp, &rx.pd)).await })
        .expect("bounded")
        .expect("joined with the async wait");
    assert_eq!(joined.peer().qkey(), CM_QKEY);
    let tx = Side::new();
    let (tx_id, tx_qp) = member(&tx, g);
    let sender = rt
        .block_on(async { tokio::time::timeout(WAIT, tx_id.join_multicast_async(g, &tx_qp, &tx.pd)).await })
        .expect("bounded")
        .expect("the sender joins");
    let to = sender.peer().clone();
    let r = rx.recv(&qp, 5);
    assert!(tx.send(&tx_qp, b"async", to.ah(), to.qp_num(), to.qkey()).is_success());
    assert_eq!(arrived(r, WAIT, 5).as_deref(), Some(&b"async"[..]));
    joined.leave().expect("left");
    drop(sender);
}
