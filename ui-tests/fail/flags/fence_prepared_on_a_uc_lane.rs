// ibv_post_send(3): "IBV_SEND_FENCE ... Valid only for QPs with Transport Service Type IBV_QPT_RC": a send lane of a UC QP prepares no fenced request.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UC};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &mut Qp<UC, RTS>, src: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let lane = s.send_lane(qp).unwrap();
        let _ = lane.prepare(wr::Send::new(src.slice(..).unwrap()).fence());
    });
}

fn main() {}
