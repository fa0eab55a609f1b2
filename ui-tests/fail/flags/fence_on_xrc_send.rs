// ibv_post_send(3): "IBV_SEND_FENCE Set the fence indicator. Valid only for QPs with Transport Service Type IBV_QPT_RC" (here: XRC_SEND, on an RDMA WRITE it accepts).
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, XRC_SEND};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<XRC_SEND, RTS>, local: &Mr<access::LocalRead>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Write::new(local.slice(..).unwrap(), remote).fence());
    });
}

fn main() {}
