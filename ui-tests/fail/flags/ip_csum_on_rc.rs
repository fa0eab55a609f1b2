// ibv_post_send(3): IBV_SEND_IP_CSUM only where the device reports checksum offload: UD and RAW_PACKET QPs.
use typed_verbs::device::DeviceAttr;
use typed_verbs::transport::RC;

fn f(attr: &DeviceAttr) {
    let _ = attr.ip_csum::<RC>();
}

fn main() {}
