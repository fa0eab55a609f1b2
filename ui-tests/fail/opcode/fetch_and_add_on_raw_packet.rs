// ibv_post_send(3) opcode table: IBV_WR_ATOMIC_FETCH_AND_ADD is not valid on RAW_PACKET (only RC, XRC_SEND).
use typed_verbs::transport::{RAW_PACKET, SupportsAtomics};

fn needs<T: SupportsAtomics>() {}

fn main() {
    needs::<RAW_PACKET>();
}
