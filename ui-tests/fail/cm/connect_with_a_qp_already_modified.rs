// rdma_init_qp_attr(3): the CM moves the QP through INIT, RTR and RTS itself, with the attributes
// it negotiated: a QP the program already moved to INIT (or further) is not given to it.
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{CmId, ConnParam, RouteResolved};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{INIT, RC};

fn f(id: CmId<RouteResolved>, qp: Qp<RC, INIT>) {
    let _ = id.connect(qp, Access::NONE, &ConnParam::default(), Duration::from_secs(1));
}

fn main() {}
