// IBTA o10-36.2.2: a type 1 window cannot be zero-based, bound again while bound (`rebind_mw`) either.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{BoundMw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, bound: BoundMw<'_, Type1, window::Read>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.rebind_mw(qp, bound, mr, 0, 64, window::READ.zero_based());
    });
}

fn main() {}
