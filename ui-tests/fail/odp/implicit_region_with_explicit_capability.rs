// ibv_query_device_ex(3): IBV_ODP_SUPPORT_IMPLICIT "Implicit on demand paging is supported" is a capability of its own: the implicit ODP region takes the `ImplicitOdpCap` of `OdpCaps::check_implicit`, not the `OdpCap` of `OdpCaps::check`.
use typed_verbs::access;
use typed_verbs::odp::OdpCap;
use typed_verbs::pd::Pd;
use typed_verbs::transport::RC;

fn f(pd: &Pd, cap: &OdpCap<RC>) {
    let _ = pd.register_implicit_odp(access::LOCAL_RW, cap);
}

fn main() {}
