// ibv_post_recv(3) needs a QP in INIT, RTR or RTS: posting a receive request to a QP in RESET does not compile.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RESET};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RESET>, buf: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let _ = s.post_recv(qp, wr::Recv::new(buf.slice_mut(..).unwrap()));
    });
}

fn main() {}
