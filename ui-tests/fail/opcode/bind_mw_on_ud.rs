// ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations" (IBV_WR_BIND_MW on UD).
use typed_verbs::transport::{UD, SupportsBindMw};

fn needs<T: SupportsBindMw>() {}

fn main() {
    needs::<UD>();
}
