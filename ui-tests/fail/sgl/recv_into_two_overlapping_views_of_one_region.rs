// A receive writes every entry of its scatter list: two views of the same bytes in one list would let the device write them twice from one message, and each view is an exclusive borrow of the region, so the second does not compile while the first lives.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, mr: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let _ = s.post_recv(qp, wr::Recv::new((mr.slice_mut(0..64).unwrap(), mr.slice_mut(32..96).unwrap())));
    });
}

fn main() {}
