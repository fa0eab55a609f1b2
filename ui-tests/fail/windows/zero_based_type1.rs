// IBTA o10-36.2.2: a type 1 window cannot be zero-based.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, window::READ.zero_based());
    });
}

fn main() {}
