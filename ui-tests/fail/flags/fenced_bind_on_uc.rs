// ibv_post_send(3): "IBV_SEND_FENCE Set the fence indicator. Valid only for QPs with Transport Service Type IBV_QPT_RC"; a type 1 bind through a UC QP (allowed) cannot be fenced.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UC};

fn f(qp: &Qp<UC, RTS>, mw: Mw<Type1>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.bind_mw_fenced(qp, mw, mr, 0, 4096, window::WRITE);
    });
}

fn main() {}
