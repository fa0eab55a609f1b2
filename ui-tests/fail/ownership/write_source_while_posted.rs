// scope: a posted RDMA WRITE reads its source until the scope ends, so the program cannot write that region meanwhile, even after forgetting the token.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: &mut Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let token = s.post_send(qp, wr::Write::new(src.slice(..).unwrap(), remote)).unwrap();
        std::mem::forget(token);
        src.as_mut_slice()[0] = 1;
    });
}

fn main() {}
