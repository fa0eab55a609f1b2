// ibv_modify_qp(3) state machine: RESET -> INIT -> RTR -> RTS; a QP in RESET cannot go to RTR without INIT.
use typed_verbs::qp::{Qp, RcRtr};
use typed_verbs::transport::{RC, RESET};

fn f(qp: Qp<RC, RESET>, attr: &RcRtr) {
    let _ = qp.to_rtr(attr);
}

fn main() {}
