// ibv_bind_mw(3): IBV_ACCESS_REMOTE_WRITE "Requires local write access to the MR".
use typed_verbs::access::{self, window, Access};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &Mr<Access<(), (), (), (), access::MwBind>>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, window::WRITE);
    });
}

fn main() {}
