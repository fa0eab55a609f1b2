// rdma_init_qp_attr(3) needs an identifier bound to a device (its port, P_Key and Q_Key come
// from there): a new UD identifier, before its address is resolved, readies no QP.
use typed_verbs::cm::{CmId, Idle};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RESET, UD};

fn f(id: CmId<Idle, UD>, qp: Qp<UD, RESET>) {
    let _ = id.ready_qp(qp);
}

fn main() {}
