// A multicast member's QP is readied first (CmId::ready_qp: RTS with the group's Q_Key): a QP
// still in INIT could be attached to a group it cannot answer and whose Q_Key it was not given.
use std::net::IpAddr;
use std::time::Duration;
use typed_verbs::cm::{AddrResolved, CmId};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{INIT, UD};

fn f(id: CmId<AddrResolved, UD>, qp: &Qp<UD, INIT>, pd: &Pd, group: IpAddr) {
    let _ = id.join_multicast(group, qp, pd, Duration::from_secs(1));
}

fn main() {}
