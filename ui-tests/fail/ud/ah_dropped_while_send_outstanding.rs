// ibv_post_send(3) NOTES: AHs must not be destroyed until the request completed; the address handle stays borrowed by the request.
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<UD, RTS>, src: &Mr<access::LocalRead>, ah: Ah) {
    let _ = scope(|s| {
        let t = s.post_send(qp, wr::Send::new(src.slice(..).unwrap()).to(&ah, 1, 2)).unwrap();
        drop(ah);
        let _ = s.wait(t, std::time::Duration::from_secs(1));
    });
}

fn main() {}
