// XRC_SEND and RAW_PACKET queue pairs have no state transitions in this library (no request
// carries XRC_SEND's remote SRQ number, RAW_PACKET has no flow steering): `to_init` on an
// XRC_SEND queue pair does not compile, with a message saying so.
use typed_verbs::qp::{ConnectedInit, Qp};
use typed_verbs::transport::{RESET, XRC_SEND};

fn f(qp: Qp<XRC_SEND, RESET>, attr: &ConnectedInit) {
    let _ = qp.to_init(attr);
}

fn main() {}
