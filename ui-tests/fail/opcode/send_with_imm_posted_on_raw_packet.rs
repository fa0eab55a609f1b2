// ibv_post_send(3) opcode table: IBV_WR_SEND_WITH_IMM is not valid on RAW_PACKET (only UD, UC, RC, XRC_SEND); posted on a RAW_PACKET queue pair through Scope::post_send, the opcode is refused.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RAW_PACKET, RTS>, local: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::SendImm::new(local.slice(..).unwrap(), 7));
    });
}

fn main() {}
