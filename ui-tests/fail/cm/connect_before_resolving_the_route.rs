// rdma_connect(3): the route must be resolved first (rdma_resolve_route); an identifier whose
// address only is resolved has no `connect`.
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{AddrResolved, CmId, ConnParam};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RESET};

fn f(id: CmId<AddrResolved>, qp: Qp<RC, RESET>) {
    let _ = id.connect(qp, Access::NONE, &ConnParam::default(), Duration::from_secs(1));
}

fn main() {}
