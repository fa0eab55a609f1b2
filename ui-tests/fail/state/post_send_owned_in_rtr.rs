// ibv_post_send(3) needs a QP in RTS: posting an owned send request to a QP in RTR does not compile.
use typed_verbs::access;
use typed_verbs::mr::Chunk;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTR};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTR>, chunk: Chunk<access::LocalRead>) {
    let _ = qp.post_send_owned(wr::Send::new(chunk));
}

fn main() {}
