// scope: a forgotten receive token does not end the region's exclusive borrow: a new view of the same memory cannot be posted as a second receive (two receives writing one buffer) before the scope has drained.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let first = s.post_recv(qp, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        std::mem::forget(first);
        let _second = s.post_recv(qp, wr::Recv::new(dst.slice_mut(..).unwrap()));
    });
}

fn main() {}
