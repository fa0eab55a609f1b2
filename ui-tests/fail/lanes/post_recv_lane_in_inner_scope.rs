// Send lanes: `Scope::post_recv_lane` takes a lane of the same scope (lanes are invariant in
// 'scope). A nested scope posting a receive on an outer lane's QP would drain (and, with the
// receive never consumed, reset) that QP at its end, under the outer lane's live tokens.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>) {
    let _ = scope(|outer| {
        let lane = outer.send_lane(qp).unwrap();
        let _ = scope(|inner| {
            let _ = inner.post_recv_lane(&lane, wr::Recv::new(dst.slice_mut(..).unwrap()));
        });
    });
}

fn main() {}
