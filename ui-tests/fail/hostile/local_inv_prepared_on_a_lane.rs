// A lane re-posts what it prepares: a LOCAL_INV, which owns the window it invalidates, cannot be prepared (Reusable).
use typed_verbs::access::window;
use typed_verbs::mw::{BoundMw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::LocalInv;

fn f(qp: &mut Qp<RC, RTS>, bound: BoundMw<'static, Type2, window::Write>) {
    let _ = scope(|s| {
        let lane = s.send_lane(qp).unwrap();
        let _p = lane.prepare(LocalInv::new(bound));
    });
}

fn main() {}
