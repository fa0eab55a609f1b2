// ibv_post_send(3) opcode table: IBV_WR_SEND_WITH_INV is not valid on UD (only UC, RC, XRC_SEND),
// inline or not. Without a destination the opcode is the one error: a UD destination is asked
// only of opcodes UD allows.
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::InlineSendInv;

fn f(qp: &Qp<UD, RTS>) {
    let _ = scope(|s| {
        let _ = s.post_inline(qp, InlineSendInv::new(b"data", 7));
    });
}

fn main() {}
