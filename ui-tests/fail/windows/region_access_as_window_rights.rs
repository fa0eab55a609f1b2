// ibv_bind_mw(3): a window's rights (mw_access_flags) are REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC and ZERO_BASED, a `WindowAccess`; a memory region's access set is not window rights (and is not zero-based).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, access::REMOTE_RW);
    });
}

fn main() {}
