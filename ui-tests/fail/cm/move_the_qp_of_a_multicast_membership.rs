// A QP attached to a multicast group stays borrowed by its membership until it is detached:
// it cannot be moved (here into another thread, which could drop it) while attached.
use std::net::IpAddr;
use std::time::Duration;
use typed_verbs::cm::{AddrResolved, CmId};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RTS, UD};

fn f(id: CmId<AddrResolved, UD>, qp: Qp<UD, RTS>, pd: &Pd, group: IpAddr) {
    let joined = id.join_multicast(group, &qp, pd, Duration::from_secs(1)).unwrap();
    let t = std::thread::spawn(move || drop(qp));
    drop(joined);
    t.join().unwrap();
}

fn main() {}
