// A QP cannot be reset (or moved, or dropped) while a scope has a request outstanding on it:
// the scope drains the queues it posted to before it returns, and the reset would flush them
// under it. Transitions take the QP by value, which the scope's borrow forbids.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let t = s.post_recv(&qp, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let _q = qp.reset();
        let _ = t;
    });
}

fn main() {}
