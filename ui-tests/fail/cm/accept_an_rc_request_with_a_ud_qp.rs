// A connection request is accepted on an RC QP in RESET, which the CM readies: a UD QP cannot
// carry the connection.
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{ConnParam, ConnRequest};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RESET, UD};

fn f(req: ConnRequest, qp: Qp<UD, RESET>) {
    let _ = req.accept(qp, Access::NONE, &ConnParam::default(), Duration::from_secs(1));
}

fn main() {}
