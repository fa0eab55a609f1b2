// A QP attached to a multicast group (ibv_attach_mcast) stays borrowed by its membership until
// it is detached (McGroup::leave or its drop): it cannot be dropped (or moved) while attached.
use std::net::IpAddr;
use std::time::Duration;
use typed_verbs::cm::{AddrResolved, CmId};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RTS, UD};

fn f(id: CmId<AddrResolved, UD>, qp: Qp<UD, RTS>, pd: &Pd, group: IpAddr) {
    let joined = id.join_multicast(group, &qp, pd, Duration::from_secs(1)).unwrap();
    drop(qp);
    drop(joined);
}

fn main() {}
