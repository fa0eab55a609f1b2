// ibv_bind_mw(3): "for type 2 MW, one should directly post bind WR to the QP, using ibv_post_send"; and IBTA o10-37.2.30: a bound type 2 window is invalidated before it is bound again. Only a type 1 window is rebound while bound.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{BoundMw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, bound: BoundMw<'_, Type2, window::Read>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.rebind_mw(qp, bound, mr, 0, 64, window::READ);
    });
}

fn main() {}
