// ibv_post_recv(3) needs a QP in INIT, RTR or RTS: a QP in ERR only flushes, so posting an owned
// receive request to it does not compile, and the message points to `reset` first.
use typed_verbs::access;
use typed_verbs::mr::Chunk;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{ERR, RC};
use typed_verbs::wr;

fn f(qp: &Qp<RC, ERR>, chunk: Chunk<access::LocalRw>) {
    let _ = qp.post_recv_owned(wr::Recv::new(chunk));
}

fn main() {}
