// ibv_bind_mw(3): IBV_ACCESS_REMOTE_WRITE "Requires local write access to the MR" (a caller's buffer registered with MW_BIND but without LOCAL_WRITE).
use typed_verbs::access::{self, window, Access};
use typed_verbs::caller::Registered;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &Registered<Access<(), (), (), (), access::MwBind>, Vec<u8>>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, window::WRITE);
    });
}

fn main() {}
