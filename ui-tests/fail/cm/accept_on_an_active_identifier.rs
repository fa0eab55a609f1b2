// rdma_accept(3) answers a connection request a listener received; an identifier that connects
// (active side) has no `accept`.
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{CmId, ConnParam, RouteResolved};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RESET};

fn f(id: CmId<RouteResolved>, qp: Qp<RC, RESET>) {
    let _ = id.accept(qp, Access::NONE, &ConnParam::default(), Duration::from_secs(1));
}

fn main() {}
