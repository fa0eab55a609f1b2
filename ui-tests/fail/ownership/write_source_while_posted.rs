// scope: a posted RDMA WRITE reads its source until the scope ends, so the program cannot write that region meanwhile.
use std::time::Duration;
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: &mut Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let token = s.post_send(qp, wr::Write::new(src.slice(..).unwrap(), remote)).unwrap();
        src.as_mut_slice()[0] = 1;
        let _ = s.wait(token, Duration::from_secs(1));
    });
}

fn main() {}
