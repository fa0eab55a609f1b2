// Send lanes: a prepared list is re-posted, so every entry must be borrowed for the whole scope; a tuple with an owned Chunk (freed when the prepared request is dropped) cannot be prepared.
use typed_verbs::access;
use typed_verbs::mr::{Chunk, Mr};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, chunk: Chunk<access::LocalRw>, mr: &Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let lane = s.send_lane(qp).unwrap();
        let _ = lane.prepare(wr::Send::new((mr.slice(..).unwrap(), chunk)));
    });
}

fn main() {}
