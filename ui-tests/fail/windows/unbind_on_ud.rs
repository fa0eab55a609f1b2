// ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations": an unbind (a bind of length 0) is one.
use typed_verbs::access::window;
use typed_verbs::mw::{BoundMw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};

fn f(qp: &Qp<UD, RTS>, bound: BoundMw<'_, Type1, window::Read>) {
    let _ = scope(|s| {
        let _ = s.unbind_mw(qp, bound);
    });
}

fn main() {}
