// ibv_post_send(3) opcode table: IBV_WR_TSO is not valid on RC (only UD, RAW_PACKET).
use typed_verbs::transport::{RC, SupportsTso};

fn needs<T: SupportsTso>() {}

fn main() {
    needs::<RC>();
}
