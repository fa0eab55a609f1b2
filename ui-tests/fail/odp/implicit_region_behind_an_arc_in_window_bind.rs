// The implicit ODP region behind an `Arc` is no window host either: "It only has a valid lkey,
// whereas its rkey is invalid" (vendor ODP manual).
use std::sync::Arc;
use typed_verbs::access::{window, Access};
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::odp::ImplicitMr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, implicit: &Arc<ImplicitMr<Access>>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, implicit, 0, 64, window::READ);
    });
}

fn main() {}
