// ibv_post_send(3): only requests built as inline (InlineSend, InlineWrite, ...) release their buffer when the call returns.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let _ = s.post_inline(qp, wr::Send::new(src.slice(..).unwrap()));
    });
}

fn main() {}
