// ibv_bind_mw(3): a BIND_MW work request's rights (mw_access_flags) are a `WindowAccess`; a memory region's access set is not window rights.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, mr, 0, 64, access::REMOTE_RW));
    });
}

fn main() {}
