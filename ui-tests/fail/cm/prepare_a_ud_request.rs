// A UD request (a SIDR request) makes no connection: it has no RC prepare/accept with a QP to
// move through RTR (the passive RC steps), only ready_qp and accept(&Qp<UD, RTS>, ..).
use typed_verbs::access::Access;
use typed_verbs::cm::{ConnParam, ConnRequest};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RESET, UD};

fn f(req: ConnRequest<UD>, qp: Qp<RC, RESET>) {
    let _ = req.prepare(qp, Access::NONE, ConnParam::default());
}

fn main() {}
