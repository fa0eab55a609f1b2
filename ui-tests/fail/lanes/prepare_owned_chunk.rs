// Send lanes: a prepared request is re-posted, so its memory must be borrowed for the whole scope; an owned Chunk (freed when the request is dropped) cannot be prepared.
use typed_verbs::access;
use typed_verbs::mr::{Chunk, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, chunk: Chunk<access::LocalRead>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let lane = s.send_lane(qp).unwrap();
        let _ = lane.prepare(wr::Write::new(chunk, remote));
    });
}

fn main() {}
