// The QP handed out in INIT for receives (`Connecting::qp`) is borrowed from the `Connecting`:
// the reference cannot outlive `connect`, which moves the QP into the connection (and, on
// failure, to ERR): no one keeps a handle that could post on it meanwhile.
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{CmId, ConnParam, RouteResolved};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RESET};

fn f(id: CmId<RouteResolved>, qp: Qp<RC, RESET>) -> typed_verbs::Result<()> {
    let connecting = id.prepare(qp, Access::NONE)?;
    let in_init = connecting.qp();
    let conn = connecting.connect(&ConnParam::default(), Duration::from_secs(1));
    let _ = in_init.qp_num();
    drop(conn);
    Ok(())
}

fn main() {}
