// ibv_query_device_ex(3): On-Demand Paging capabilities are reported per transport (rc_odp_caps, uc_odp_caps, ud_odp_caps, xrc_odp_caps); there are none for RAW_PACKET queue pairs.
use typed_verbs::odp::{OdpCaps, OdpOps};
use typed_verbs::transport::RAW_PACKET;

fn f(caps: &OdpCaps) {
    let _ = caps.check::<RAW_PACKET>(OdpOps::SEND);
}

fn main() {}
