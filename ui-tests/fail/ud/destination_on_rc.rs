// A destination (address handle, remote QPN, Q_Key) applies to UD only; an RC QP has exactly one peer.
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>, ah: &Ah) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Send::new(src.slice(..).unwrap()).to(ah, 1, 2));
    });
}

fn main() {}
