// Receive lanes: a prepared receive is re-posted, so every entry of its scatter list must be borrowed for the whole scope; an array of owned Chunks cannot be prepared.
use typed_verbs::access;
use typed_verbs::mr::Chunk;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, a: Chunk<access::LocalRw>, b: Chunk<access::LocalRw>) {
    let _ = scope(|s| {
        let lane = s.recv_lane(qp).unwrap();
        let _ = lane.prepare(wr::Recv::new([a, b]));
    });
}

fn main() {}
