// ibv_post_send(3) opcode table: IBV_WR_LOCAL_INV is not valid on UD (only UC, RC, XRC_SEND).
use typed_verbs::transport::{UD, SupportsLocalInv};

fn needs<T: SupportsLocalInv>() {}

fn main() {
    needs::<UD>();
}
