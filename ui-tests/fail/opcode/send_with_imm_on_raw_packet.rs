// ibv_post_send(3) opcode table: IBV_WR_SEND_WITH_IMM is not valid on RAW_PACKET (only UD, UC, RC, XRC_SEND).
use typed_verbs::transport::{RAW_PACKET, SupportsSendImm};

fn needs<T: SupportsSendImm>() {}

fn main() {
    needs::<RAW_PACKET>();
}
