// ibv_post_send(3): "IBV_SEND_SOLICITED Set the solicited event indicator. Valid only for Send and RDMA Write with immediate" (here: a type 2 window's BIND_MW).
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{BindMw, SendRequest};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::READ).solicited());
    });
}

fn main() {}
