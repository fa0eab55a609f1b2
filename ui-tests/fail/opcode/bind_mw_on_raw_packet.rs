// ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations" (IBV_WR_BIND_MW on RAW_PACKET).
use typed_verbs::transport::{RAW_PACKET, SupportsBindMw};

fn needs<T: SupportsBindMw>() {}

fn main() {
    needs::<RAW_PACKET>();
}
