// IBV_SEND_IP_CSUM needs the capability for the QP's own transport: the UD capability does not cover RAW_PACKET.
use typed_verbs::device::IpCsum;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS, UD};
use typed_verbs::wr::{self, SendRequest};
use typed_verbs::access;

fn f(qp: &Qp<RAW_PACKET, RTS>, src: &Mr<access::LocalRead>, cap: IpCsum<UD>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Send::new(src.slice(..).unwrap()).ip_csum(cap));
    });
}

fn main() {}
