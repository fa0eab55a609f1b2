// ibv_modify_qp(3) state machine: RESET -> INIT -> RTR -> RTS; a QP in RTS cannot go back to RTR.
use typed_verbs::qp::{Qp, RcRtr};
use typed_verbs::transport::{RC, RTS};

fn f(qp: Qp<RC, RTS>, attr: &RcRtr) {
    let _ = qp.to_rtr(attr);
}

fn main() {}
