// A UD request is answered with a UD QP (the SIDR reply names a QP that takes datagrams): an RC
// QP, even in RTS, does not type-check.
use typed_verbs::cm::ConnRequest;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS, UD};

fn f(req: ConnRequest<UD>, qp: &Qp<RC, RTS>) {
    let _ = req.accept(qp, &[]);
}

fn main() {}
