// ibv_post_send(3) opcode table: IBV_WR_LOCAL_INV is not valid on RAW_PACKET (only UC, RC, XRC_SEND); posted on a RAW_PACKET queue pair through Scope::post_send, the opcode is refused.
use typed_verbs::access::window;
use typed_verbs::mw::{BoundMw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS};
use typed_verbs::wr::LocalInv;

fn f(qp: &Qp<RAW_PACKET, RTS>, bound: BoundMw<'static, Type2, window::ReadWrite>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, LocalInv::new(bound));
    });
}

fn main() {}
