// IBTA o10-37.2.26: a type 2 window is invalidated (LOCAL_INV, or the peer's SEND_WITH_INV), not unbound with a zero-length ibv_bind_mw, which is for type 1 windows.
use typed_verbs::access::window;
use typed_verbs::mw::{BoundMw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, bound: BoundMw<'static, Type2, window::ReadWrite>) {
    let _ = scope(|s| {
        let _ = s.unbind_mw(qp, bound);
    });
}

fn main() {}
