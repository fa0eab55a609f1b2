// Send lanes: a lane of an outer scope keeps its QP for the whole outer scope: a nested scope
// cannot open another lane on it (whose drain could reset the QP under the outer lane's live
// tokens), even after the outer lane was dropped.
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &mut Qp<RC, RTS>) {
    let _ = scope(|outer| {
        let lane = outer.send_lane(qp).unwrap();
        drop(lane);
        let _ = scope(|inner| {
            let again = inner.send_lane(qp).unwrap();
            drop(again);
        });
    });
}

fn main() {}
