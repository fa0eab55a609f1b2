// rdma_connect(3) on a UD identifier (the service ID resolution) needs the route resolved first
// (rdma_resolve_route): an identifier whose address only is resolved has no `resolve_peer`.
use std::time::Duration;
use typed_verbs::cm::{AddrResolved, CmId};
use typed_verbs::pd::Pd;
use typed_verbs::transport::UD;

fn f(id: CmId<AddrResolved, UD>, pd: &Pd) {
    let _ = id.resolve_peer(pd, &[], Duration::from_secs(1));
}

fn main() {}
