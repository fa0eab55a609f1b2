// IBTA o10-37.2.26: LOCAL_INV / SEND_WITH_INV cannot invalidate a type 1 window (unbind it with a zero-length bind).
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::LocalInv;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let t = s.bind_mw(qp, mw, mr, 0, 64, window::READ).unwrap();
        let bound = s.wait(t, std::time::Duration::from_secs(1)).unwrap().1.unwrap();
        let _ = s.post_send(qp, LocalInv::new(bound));
    });
}

fn main() {}
