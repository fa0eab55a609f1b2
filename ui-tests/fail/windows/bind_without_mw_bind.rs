// ibv_bind_mw(3) / ibv_reg_mr(3): a window can only be bound to an MR registered with IBV_ACCESS_MW_BIND.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, window::READ);
    });
}

fn main() {}
