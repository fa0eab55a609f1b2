// ibv_bind_mw(3): type 1 windows are bound with ibv_bind_mw, not a BIND_MW work request.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::READ));
    });
}

fn main() {}
