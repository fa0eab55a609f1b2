// ibv_modify_qp(3) state machine: RESET -> INIT -> RTR -> RTS; a QP in INIT cannot go to RTS without RTR.
use typed_verbs::qp::{Qp, RcRts};
use typed_verbs::transport::{INIT, RC};

fn f(qp: Qp<RC, INIT>, attr: &RcRts) {
    let _ = qp.to_rts(attr);
}

fn main() {}
