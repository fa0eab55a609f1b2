// ibv_post_send(3) opcode table: IBV_WR_RDMA_WRITE is not valid on RAW_PACKET (only UC, RC, XRC_SEND); posted on a RAW_PACKET queue pair through Scope::post_send, the opcode is refused.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RAW_PACKET, RTS>, local: &Mr<access::LocalRead>, remote: RemoteSlice<access::RemoteAll>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Write::new(local.slice(..).unwrap(), remote));
    });
}

fn main() {}
