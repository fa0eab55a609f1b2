// ibv_post_send(3) opcode table: IBV_WR_SEND_WITH_INV is not valid on UD (only UC, RC, XRC_SEND); giving it a UD destination (`.to(...)`) does not make it postable.
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<UD, RTS>, ah: &Ah, local: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::SendInv::new(local.slice(..).unwrap(), 7).to(ah, 1, 2));
    });
}

fn main() {}
