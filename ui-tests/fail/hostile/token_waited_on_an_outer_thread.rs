// A token cannot leave its scope through a thread of an enclosing std::thread::scope, which may outlive the RDMA scope (its drain would no longer cover the wait).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>) {
    std::thread::scope(|threads| {
        let _ = scope(|s| {
            let t = s.post_recv(qp, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
            threads.spawn(move || drop(t));
        });
    });
}

fn main() {}
