// ibv_bind_mw(3) NOTES: the new R_key "must not [be transferred] to the remote in any other manner before reading a successful CQE".
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{BoundMw, Mw, Type1, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let t = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::READ)).unwrap();
        let _rkey = t.rkey();
    });
}

// The same for a type 1 window bound again while bound.
fn g(qp: &Qp<RC, RTS>, bound: BoundMw<'_, Type1, window::Read>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let t = s.rebind_mw(qp, bound, mr, 0, 64, window::READ_WRITE).unwrap();
        let _rkey = t.rkey();
    });
}

fn main() {}
