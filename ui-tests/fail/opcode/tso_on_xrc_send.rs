// ibv_post_send(3) opcode table: IBV_WR_TSO is not valid on XRC_SEND (only UD, RAW_PACKET).
use typed_verbs::transport::{XRC_SEND, SupportsTso};

fn needs<T: SupportsTso>() {}

fn main() {
    needs::<XRC_SEND>();
}
