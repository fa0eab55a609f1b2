// A lane re-posts what it prepares: a BIND_MW, which owns the window it binds, cannot be prepared (Reusable).
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(qp: &mut Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let lane = s.send_lane(qp).unwrap();
        let _p = lane.prepare(BindMw::new(mw, mr, 0, 64, window::WRITE));
    });
}

fn main() {}
