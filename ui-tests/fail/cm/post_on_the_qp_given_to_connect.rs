// The QP moves into `connect`, which moves it to RTS only once the connection is established:
// it cannot be posted on meanwhile (post on `Connection::qp`).
use std::time::Duration;
use typed_verbs::access::Access;
use typed_verbs::cm::{CmId, ConnParam, RouteResolved};
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RESET};
use typed_verbs::wr;
use typed_verbs::access;

fn f(id: CmId<RouteResolved>, qp: Qp<RC, RESET>, mr: &Mr<access::LocalRw>) {
    let conn = id.connect(qp, Access::NONE, &ConnParam::default(), Duration::from_secs(1));
    let _ = scope(|s| s.post_send(&qp, wr::Send::new(mr.slice(..).unwrap())).map(|_| ()));
    drop(conn);
}

fn main() {}
