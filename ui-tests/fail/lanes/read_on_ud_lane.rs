// Send lanes: a lane prepares only what ibv_post_send(3)'s opcode table allows on its transport (no RDMA READ on UD).
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &mut Qp<UD, RTS>, ah: &Ah, dst: &mut Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let lane = s.send_lane(qp).unwrap();
        let _ = lane.prepare(wr::Read::new(dst.slice_mut(..).unwrap(), remote).to(ah, 1, 1));
    });
}

fn main() {}
