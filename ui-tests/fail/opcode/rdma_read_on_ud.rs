// ibv_post_send(3) opcode table: IBV_WR_RDMA_READ is not valid on UD (only RC, XRC_SEND).
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<UD, RTS>, ah: &Ah, local: &mut Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteAll>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Read::new(local.slice_mut(..).unwrap(), remote).to(ah, 1, 2));
    });
}

fn main() {}
