// An owned post outlives every borrow: a type 2 BIND_MW of a region that is only borrowed cannot be posted with post_send_owned (the window would keep writing a region the program may drop).
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>) {
    let region = region();
    let _token = qp.post_send_owned(BindMw::new(mw, &region, 0, 64, window::WRITE));
    drop(region);
}

fn region() -> Mr<access::WindowBindable> {
    unimplemented!()
}

fn main() {}
