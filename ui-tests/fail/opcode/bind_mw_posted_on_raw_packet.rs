// ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations" (IBV_WR_BIND_MW posted on a RAW_PACKET queue pair through Scope::post_send: the opcode is refused).
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RAW_PACKET, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RAW_PACKET, RTS>, mw: Mw<Type2>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::READ));
    });
}

fn main() {}
