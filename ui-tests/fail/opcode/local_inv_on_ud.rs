// ibv_post_send(3) opcode table: IBV_WR_LOCAL_INV is not valid on UD (only UC, RC, XRC_SEND); posted on UD, the opcode is refused, no destination is asked for.
use typed_verbs::access::window;
use typed_verbs::mw::{BoundMw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::LocalInv;

fn f(qp: &Qp<UD, RTS>, bound: BoundMw<'static, Type2, window::ReadWrite>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, LocalInv::new(bound));
    });
}

fn main() {}
