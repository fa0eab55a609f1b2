// ibv_post_send(3) needs a QP in RTS: posting a list of send requests to a QP in RTR does not compile.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTR};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTR>, local: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let _ = s.post_send_list(qp, [wr::Send::new(local.slice(..8).unwrap()), wr::Send::new(local.slice(8..).unwrap())]);
    });
}

fn main() {}
