// ibv_post_send(3) opcode table: IBV_WR_TSO is not valid on UC (only UD, RAW_PACKET).
use typed_verbs::transport::{UC, SupportsTso};

fn needs<T: SupportsTso>() {}

fn main() {
    needs::<UC>();
}
