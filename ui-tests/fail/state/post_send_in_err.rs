// ibv_post_send(3) needs a QP in RTS: a QP in ERR only flushes, so posting a send request to it
// does not compile, and the message points to `reset` first.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{ERR, RC};
use typed_verbs::wr;

fn f(qp: &Qp<RC, ERR>, local: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Send::new(local.slice(..).unwrap()));
    });
}

fn main() {}
