// A UD identifier (`CmId::new_ud`, RDMA_PS_UDP) resolves a service to a QP number and Q_Key
// (`resolve_peer`); it makes no RC connection: it has no `connect`.
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{CmId, ConnParam, RouteResolved};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RESET, UD};

fn f(id: CmId<RouteResolved, UD>, qp: Qp<RC, RESET>) {
    let _ = id.connect(qp, Access::NONE, &ConnParam::default(), Duration::from_secs(1));
}

fn main() {}
