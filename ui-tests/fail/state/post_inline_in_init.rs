// ibv_post_send(3) needs a QP in RTS: posting an inline send request to a QP in INIT does not compile.
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{INIT, RC};
use typed_verbs::wr::InlineSend;

fn f(qp: &Qp<RC, INIT>) {
    let _ = scope(|s| {
        let _ = s.post_inline(qp, InlineSend::new(b"data"));
    });
}

fn main() {}
