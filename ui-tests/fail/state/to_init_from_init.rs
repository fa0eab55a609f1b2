// ibv_modify_qp(3) state machine: RESET -> INIT -> RTR -> RTS; `to_init` moves a QP from RESET, and a QP already in INIT cannot take it again (`reset()` first).
use typed_verbs::qp::{ConnectedInit, Qp};
use typed_verbs::transport::{INIT, RC};

fn f(qp: Qp<RC, INIT>, attr: &ConnectedInit) {
    let _ = qp.to_init(attr);
}

fn main() {}
