// ibv_reg_mr(3): IBV_ACCESS_REMOTE_ATOMIC enables remote atomic operation access; an atomic target needs it.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, result: &mut Mr<access::LocalRw>, peer: &Mr<access::RemoteRw>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::FetchAdd::new(result.slice_mut(..8).unwrap(), peer.remote(..8).unwrap(), 1));
    });
}

fn main() {}
