// ibv_post_send(3): "IBV_SEND_SOLICITED Set the solicited event indicator. Valid only for Send and RDMA Write with immediate" (here: LOCAL_INV).
use typed_verbs::access::window;
use typed_verbs::mw::{BoundMw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{LocalInv, SendRequest};

fn f(qp: &Qp<RC, RTS>, bound: BoundMw<'static, Type2, window::ReadWrite>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, LocalInv::new(bound).solicited());
    });
}

fn main() {}
