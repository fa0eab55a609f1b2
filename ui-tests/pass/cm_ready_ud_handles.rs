// The CM's verbs that need a readied UD QP take it as a reference, a reference of a reference or
// an `Arc`, as a `&Qp<UD, RTS>` parameter did through deref coercion.
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use typed_verbs::cm::{AddrResolved, CmId, ConnRequest};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RTS, UD};

fn accept(req: ConnRequest<UD>, qp: &Arc<Qp<UD, RTS>>) -> typed_verbs::Result<()> {
    req.accept(qp, &[])
}

fn join(id: CmId<AddrResolved, UD>, group: IpAddr, qp: &&Qp<UD, RTS>, pd: &Pd) -> typed_verbs::Result<()> {
    let _membership = id.join_multicast(group, qp, pd, Duration::from_secs(1))?;
    Ok(())
}

fn main() {
    let _ = accept;
    let _ = join;
}
