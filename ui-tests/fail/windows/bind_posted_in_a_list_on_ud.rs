// ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations": a type 2 bind in a post list on UD is refused as one posted alone.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<UD, RTS>, mws: [Mw<Type2>; 2], host: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let [a, b] = mws;
        let binds = [BindMw::new(a, host, 0, 64, window::READ), BindMw::new(b, host, 64, 64, window::READ)];
        let _ = s.post_send_list(qp, binds);
    });
}

fn main() {}
