// ibv_post_send(3) opcode table: IBV_WR_LOCAL_INV is not valid on RAW_PACKET (only UC, RC, XRC_SEND).
use typed_verbs::transport::{RAW_PACKET, SupportsLocalInv};

fn needs<T: SupportsLocalInv>() {}

fn main() {
    needs::<RAW_PACKET>();
}
