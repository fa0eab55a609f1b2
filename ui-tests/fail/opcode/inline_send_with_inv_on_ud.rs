// ibv_post_send(3) opcode table: IBV_WR_SEND_WITH_INV is not valid on UD (only UC, RC, XRC_SEND), inline or not.
use typed_verbs::ah::Ah;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{InlineSendInv, SendRequest};

fn f(qp: &Qp<UD, RTS>, ah: &Ah) {
    let _ = scope(|s| {
        let _ = s.post_inline(qp, InlineSendInv::new(b"data", 7).to(ah, 1, 2));
    });
}

fn main() {}
