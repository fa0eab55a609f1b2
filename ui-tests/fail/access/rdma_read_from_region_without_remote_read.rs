// ibv_reg_mr(3): IBV_ACCESS_REMOTE_READ enables remote read access; an RDMA READ source needs it.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>, peer: &Mr<access::LocalRemoteWrite>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Read::new(dst.slice_mut(..).unwrap(), peer.remote(..).unwrap()));
    });
}

fn main() {}
