// ibv_reg_mr(3) NOTES: "ibv_dereg_mr() fails if any memory window is still bound to this MR": the bound window borrows the MR.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: Mr<access::WindowBindable>) {
    let bound = scope(|s| {
        let t = s.bind_mw(qp, mw, &mr, 0, 64, window::READ).unwrap();
        s.wait(t, std::time::Duration::from_secs(1)).unwrap().1.unwrap()
    })
    .unwrap();
    drop(mr);
    let _ = bound.rkey();
}

fn main() {}
