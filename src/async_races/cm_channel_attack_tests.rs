//! Hostile programs and values against the connection manager's parameters (`src/cm.rs`), the
//! completion channel (`src/channel.rs`) and the asynchronous events (`src/event.rs`) over the
//! fake device: what the CM tells the peer about the program's QP, what a request's event says
//! about the peer, channels and event readers dropped, raced and polled every way.

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
