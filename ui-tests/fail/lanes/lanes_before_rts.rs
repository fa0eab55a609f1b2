// Both lanes: ibv_post_send(3) needs the QP in RTS; `lanes` opens a send lane too, so it cannot be called on a QP in INIT (where a receive lane alone may be opened).
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{INIT, RC};

fn f(qp: &mut Qp<RC, INIT>) {
    let _ = scope(|s| {
        let _ = s.lanes(qp);
    });
}

fn main() {}
