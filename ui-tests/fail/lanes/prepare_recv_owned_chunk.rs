// Receive lanes: a prepared receive is re-posted, so its buffer must be borrowed for the whole scope; an owned Chunk (freed when the receive is dropped) cannot be prepared.
use typed_verbs::access;
use typed_verbs::mr::Chunk;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, chunk: Chunk<access::LocalRw>) {
    let _ = scope(|s| {
        let lane = s.recv_lane(qp).unwrap();
        let _ = lane.prepare(wr::Recv::new(chunk));
    });
}

fn main() {}
