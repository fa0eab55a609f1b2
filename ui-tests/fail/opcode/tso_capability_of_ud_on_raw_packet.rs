// ibv_post_send(3): IBV_WR_TSO is valid on UD and RAW_PACKET, each with the device's TSO support for that transport (tso_caps.supported_qpts): a TSO request built with the UD capability is not a request for a RAW_PACKET queue pair.
use typed_verbs::access;
use typed_verbs::device::TsoCap;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS, UD};
use typed_verbs::wr;

fn f(qp: &Qp<RAW_PACKET, RTS>, payload: &Mr<access::LocalRead>, header: &[u8], cap: TsoCap<UD>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Tso::new(payload.slice(..).unwrap(), header, 1460, cap));
    });
}

fn main() {}
