// Send lanes: one lane per send queue and scope. A second lane on the same QP would number its
// requests from the same book while the first one's tokens are live (a token of the first could
// then be matched against the second's numbers, and `LaneBook::open` would clear the first's
// recorded failures).
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &mut Qp<RC, RTS>) {
    let _ = scope(|s| {
        let first = s.send_lane(qp).unwrap();
        let second = s.send_lane(qp).unwrap();
        drop((first, second));
    });
}

fn main() {}
