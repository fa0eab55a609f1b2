// ibv_reg_mr(3): IBV_ACCESS_REMOTE_WRITE enables remote write access; an RDMA WRITE target needs it.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>, mr_local_rw: &Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Write::new(src.slice(..).unwrap(), mr_local_rw.remote(..).unwrap()));
    });
}

fn main() {}
