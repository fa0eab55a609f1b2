// An XRC_SEND queue pair is the sending side of XRC: it has no receive queue (receives go to the XRC target's shared receive queue), so no receive can be posted to it: in a scope, owned, or on a receive lane.
use typed_verbs::access;
use typed_verbs::mr::{Chunk, Mr};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, XRC_SEND};
use typed_verbs::wr;

fn f(qp: &mut Qp<XRC_SEND, RTS>, mr: &mut Mr<access::LocalRw>, chunk: Chunk<access::LocalRw>) {
    let _ = scope(|s| {
        let _ = s.post_recv(qp, wr::Recv::new(mr.slice_mut(..).unwrap()));
    });
    let _ = qp.post_recv_owned(wr::Recv::new(chunk));
    let _ = scope(|s| {
        let _ = s.recv_lane(qp);
    });
    let _ = scope(|s| {
        let _ = s.lanes(qp);
    });
}

fn main() {}
