// ibv_bind_mw(3): "for type 2 MW, one should directly post bind WR to the QP, using ibv_post_send".
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, window::READ);
    });
}

fn main() {}
