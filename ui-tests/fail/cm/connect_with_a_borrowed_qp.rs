// The CM takes the QP by value: a borrowed QP (which the program could go on using, or reset,
// while the CM moves it through INIT, RTR and RTS) is refused with the rule.
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{CmId, ConnParam, RouteResolved};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RESET};

fn f(id: CmId<RouteResolved>, qp: &Qp<RC, RESET>) {
    let _ = id.connect(qp, Access::NONE, &ConnParam::default(), Duration::from_secs(1));
}

fn main() {}
