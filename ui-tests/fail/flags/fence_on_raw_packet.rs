// ibv_post_send(3): "IBV_SEND_FENCE Set the fence indicator. Valid only for QPs with Transport Service Type IBV_QPT_RC" (here: RAW_PACKET, on a SEND it accepts).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<RAW_PACKET, RTS>, local: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Send::new(local.slice(..).unwrap()).fence());
    });
}

fn main() {}
