// Windows bind to pinned regions only: an On-Demand Paging region behind a `Box` is still an
// ODP region, and no window is bound to it.
use typed_verbs::access::{self, window};
use typed_verbs::mr::{Mr, Odp};
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, boxed: &Box<Mr<access::WindowBindable, Odp>>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, BindMw::new(mw, boxed, 0, 64, window::READ));
    });
}

fn main() {}
