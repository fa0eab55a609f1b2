// ibv_post_send(3): a UD work request carries one destination (wr.ud.ah, remote_qpn, remote_qkey); a second `.to(...)` would leave an address handle borrowed that the provider never reads, whether the flags come between the two or not.
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<UD, RTS>, src: &Mr<access::LocalRead>, a: &Ah, b: &Ah) {
    let _ = scope(|s| {
        let _t = s.post_send(qp, wr::Send::new(src.slice(..).unwrap()).to(a, 1, 2).to(b, 3, 4));
        let _t = s.post_send(qp, wr::Send::new(src.slice(..).unwrap()).to(a, 1, 2).unsignaled().to(b, 3, 4));
    });
}

fn main() {}
