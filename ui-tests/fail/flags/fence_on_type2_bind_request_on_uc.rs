// ibv_post_send(3): "IBV_SEND_FENCE Set the fence indicator. Valid only for QPs with Transport Service Type IBV_QPT_RC": a type 2 bind work request (BIND_MW) on UC is not fenced either.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UC};
use typed_verbs::wr::{BindMw, SendRequest};

fn f(qp: &Qp<UC, RTS>, mw: Mw<Type2>, host: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, host, 0, 64, window::READ).fence());
    });
}

fn main() {}
