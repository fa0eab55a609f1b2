// ODP registration needs a capability value from the device query (OdpCaps::check); it cannot be made up.
use typed_verbs::access;
use typed_verbs::odp::{OdpCap, OdpOps};
use typed_verbs::pd::Pd;
use typed_verbs::transport::RC;

fn f(pd: &Pd) {
    let cap = OdpCap::<RC> { ops: OdpOps::SEND, _t: std::marker::PhantomData };
    let _ = pd.alloc_mr_odp(4096, access::LOCAL_RW, &cap);
}

fn main() {}
