// ibv_post_send(3) opcode table: IBV_WR_SEND_WITH_INV is not valid on UD (only UC, RC, XRC_SEND).
use typed_verbs::transport::{UD, SupportsSendInv};

fn needs<T: SupportsSendInv>() {}

fn main() {
    needs::<UD>();
}
