// ibv_post_send(3) opcode table: IBV_WR_SEND_WITH_INV is not valid on RAW_PACKET (only UC, RC, XRC_SEND), inline or not.
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS};
use typed_verbs::wr::InlineSendInv;

fn f(qp: &Qp<RAW_PACKET, RTS>) {
    let _ = scope(|s| {
        let _ = s.post_inline(qp, InlineSendInv::new(b"data", 0x1234));
    });
}

fn main() {}
