// ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations": a type 1 window's rebind is one.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{BoundMw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};

fn f(qp: &Qp<UD, RTS>, bound: BoundMw<'_, Type1, window::Read>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.rebind_mw(qp, bound, mr, 0, 64, window::READ);
    });
}

fn main() {}
