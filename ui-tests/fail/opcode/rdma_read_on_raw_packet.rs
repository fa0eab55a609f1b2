// ibv_post_send(3) opcode table: IBV_WR_RDMA_READ is not valid on RAW_PACKET (only RC, XRC_SEND).
use typed_verbs::transport::{RAW_PACKET, SupportsRdmaRead};

fn needs<T: SupportsRdmaRead>() {}

fn main() {
    needs::<RAW_PACKET>();
}
