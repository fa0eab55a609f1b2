// Receive lanes: ibv_post_recv(3) needs the QP in INIT, RTR or RTS; a receive lane cannot be opened on a QP in ERR.
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{ERR, RC};

fn f(qp: &mut Qp<RC, ERR>) {
    let _ = scope(|s| {
        let _ = s.recv_lane(qp);
    });
}

fn main() {}
