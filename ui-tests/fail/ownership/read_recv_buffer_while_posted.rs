// scope: the device writes a posted receive buffer until the scope ends, so the program cannot read that region meanwhile, even after forgetting the token.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let token = s.post_recv(qp, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        std::mem::forget(token);
        let _first = dst.as_slice()[0];
    });
}

fn main() {}
