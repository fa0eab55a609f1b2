// An invalidated window is gone from the types: its bound state moved into the LOCAL_INV.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{BindMw, LocalInv};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let t = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::READ)).unwrap();
        let bound = s.wait(t, std::time::Duration::from_secs(1)).unwrap().1.unwrap();
        let _ = s.post_send(qp, LocalInv::new(bound));
        let _ = bound.remote(..);
    });
}

fn main() {}
