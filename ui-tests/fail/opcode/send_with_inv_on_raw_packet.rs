// ibv_post_send(3) opcode table: IBV_WR_SEND_WITH_INV is not valid on RAW_PACKET (only UC, RC, XRC_SEND).
use typed_verbs::transport::{RAW_PACKET, SupportsSendInv};

fn needs<T: SupportsSendInv>() {}

fn main() {
    needs::<RAW_PACKET>();
}
