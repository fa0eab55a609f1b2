// ibv_bind_mw(3): IBV_ACCESS_REMOTE_ATOMIC "Requires local write access to the MR".
use typed_verbs::access::{self, window, Access};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<Access<(), (), access::RemoteRead, (), access::MwBind>>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::READ.remote_atomic()));
    });
}

fn main() {}
