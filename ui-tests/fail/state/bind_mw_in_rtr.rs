// ibv_bind_mw(3) posts the bind to the QP's send queue, and ibv_post_send(3) needs a QP in RTS: binding a type 1 window through a QP in RTR does not compile.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTR};

fn f(qp: &Qp<RC, RTR>, mw: Mw<Type1>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, window::READ);
    });
}

fn main() {}
