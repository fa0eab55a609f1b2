// ibv_post_send(3) opcode table: IBV_WR_RDMA_WRITE is not valid on RAW_PACKET (only UC, RC, XRC_SEND).
use typed_verbs::transport::{RAW_PACKET, SupportsRdmaWrite};

fn needs<T: SupportsRdmaWrite>() {}

fn main() {
    needs::<RAW_PACKET>();
}
