// ibv_bind_mw(3) NOTES: only a bind's new rkey may travel before its completion, in a send on the bind's QP; `advertise_window` takes the token of a bind or a rebind, not of another request.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let t = s.post_send(qp, wr::Send::new(src.slice(..).unwrap())).unwrap();
        let _ = s.advertise_window(qp, &t);
    });
}

fn main() {}
