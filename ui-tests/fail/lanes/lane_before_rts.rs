// Send lanes: ibv_post_send(3) needs the QP in RTS; a lane cannot be opened on a QP in RTR.
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTR};

fn f(qp: &mut Qp<RC, RTR>) {
    let _ = scope(|s| {
        let _ = s.send_lane(qp);
    });
}

fn main() {}
