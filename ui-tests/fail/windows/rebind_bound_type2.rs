// IBTA o10-37.2.30: a type 2 window must be unbound (invalidated) before it is bound again.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let t = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::READ)).unwrap();
        let bound = s.wait(t, std::time::Duration::from_secs(1)).unwrap().1.unwrap();
        let _ = s.post_send(qp, BindMw::new(bound, mr, 0, 64, window::READ));
    });
}

fn main() {}
