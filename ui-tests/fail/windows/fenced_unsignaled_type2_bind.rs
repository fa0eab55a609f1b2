// ibv_bind_mw(3) NOTES: "fix the mw structure if the subsequent CQE for the bind operation
// indicates a failure": a window bind is always signaled, fenced or not (`.fence().unsignaled()`).
use typed_verbs::access::{window, WindowBindable};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{BindMw, SendRequest};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, mr, 0, 64, window::WRITE).fence().unsignaled());
    });
}

fn main() {}
