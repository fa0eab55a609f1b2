// ibv_post_recv(3) needs a QP in INIT, RTR or RTS: a QP in ERR only flushes, so posting a
// receive request to it does not compile, and the message points to `reset` first.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{ERR, RC};
use typed_verbs::wr;

fn f(qp: &Qp<RC, ERR>, buf: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let _ = s.post_recv(qp, wr::Recv::new(buf.slice_mut(..).unwrap()));
    });
}

fn main() {}
