// ibv_post_send(3) NOTES: AHs must not be destroyed until the request completed; a UD request prepared on a send lane keeps its address handle borrowed for the scope, as it is posted again and again.
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &mut Qp<UD, RTS>, src: &Mr<access::LocalRead>, ah: Ah) {
    let _ = scope(|s| {
        let mut lane = s.send_lane(qp).unwrap();
        let mut prepared = lane.prepare(wr::Send::new(src.slice(..).unwrap()).to(&ah, 1, 2)).unwrap();
        drop(ah);
        let _ = lane.post(&mut prepared);
    });
}

fn main() {}
