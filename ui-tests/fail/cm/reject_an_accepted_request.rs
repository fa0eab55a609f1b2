// A connection request is answered once: `accept` consumes it, so it cannot be rejected too.
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{ConnParam, ConnRequest};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RESET};

fn f(req: ConnRequest, qp: Qp<RC, RESET>) {
    let conn = req.accept(qp, Access::NONE, &ConnParam::default(), Duration::from_secs(1));
    let _ = req.reject(b"no");
    drop(conn);
}

fn main() {}
