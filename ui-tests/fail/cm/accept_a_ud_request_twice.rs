// A UD request (a SIDR request) is answered once: `accept` consumes it, so it cannot be accepted
// again (a second SIDR reply from a destroyed identifier) nor rejected after it.
use typed_verbs::cm::ConnRequest;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RTS, UD};

fn f(req: ConnRequest<UD>, qp: &Qp<UD, RTS>) {
    let _ = req.accept(qp, b"first");
    let _ = req.accept(qp, b"second");
}

fn main() {}
