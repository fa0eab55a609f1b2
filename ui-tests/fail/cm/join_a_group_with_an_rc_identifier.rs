// Multicast groups are joined by UD identifiers (RDMA_PS_UDP, rdma_join_multicast(3)); an RC
// identifier (RDMA_PS_TCP) has no join.
use std::net::IpAddr;
use std::time::Duration;
use typed_verbs::cm::{AddrResolved, CmId};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS, UD};

fn f(id: CmId<AddrResolved, RC>, qp: &Qp<UD, RTS>, pd: &Pd, group: IpAddr) {
    let _ = id.join_multicast(group, qp, pd, Duration::from_secs(1));
}

fn main() {}
