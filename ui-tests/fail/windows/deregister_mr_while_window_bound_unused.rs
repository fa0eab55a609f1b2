// ibv_reg_mr(3) NOTES: "ibv_dereg_mr() fails if any memory window is still bound to this MR".
// A bound window keeps its region borrowed for as long as the window exists, even when the
// program never touches the window again: dropping the window (at the end of `f`) uses it.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: Mr<access::WindowBindable>) {
    let _bound = scope(|s| {
        let t = s.bind_mw(qp, mw, &mr, 0, 64, access::window::READ).unwrap();
        s.wait(t, std::time::Duration::from_secs(1)).unwrap().1.unwrap()
    })
    .unwrap();
    let _ = mr.deregister();
}

fn main() {}
