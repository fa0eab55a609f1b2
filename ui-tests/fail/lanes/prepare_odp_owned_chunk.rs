// Send lanes: an owned Chunk of an On-Demand Paging region cannot be prepared either (its drop may free the region while a re-posted request reads it).
use typed_verbs::access;
use typed_verbs::mr::{Chunk, Odp};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, chunk: Chunk<access::LocalRw, Odp>) {
    let _ = scope(|s| {
        let lane = s.send_lane(qp).unwrap();
        let _ = lane.prepare(wr::Send::new(chunk));
    });
}

fn main() {}
