// ibv_post_send(3): "IBV_SEND_SOLICITED Set the solicited event indicator. Valid only for Send and RDMA Write with immediate" (here: TSO, on RAW_PACKET which accepts it).
use typed_verbs::access;
use typed_verbs::device::TsoCap;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<RAW_PACKET, RTS>, payload: &Mr<access::LocalRead>, header: &[u8], cap: TsoCap<RAW_PACKET>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Tso::new(payload.slice(..).unwrap(), header, 1460, cap).solicited());
    });
}

fn main() {}
