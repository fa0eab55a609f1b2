// ibv_bind_mw(3): "IBV_ACCESS_REMOTE_WRITE Enable Remote Write Access. Requires local write access to the MR."
// A region behind an `Arc` hosts windows as the region does, with the region's own rights: a
// writable window on a region registered without LOCAL_WRITE is refused through the handle too.
use std::sync::Arc;
use typed_verbs::access::{window, Access, MwBind, RemoteRead};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, shared: &Arc<Mr<Access<(), (), RemoteRead, (), MwBind>>>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, shared, 0, 64, window::WRITE));
    });
}

fn main() {}
