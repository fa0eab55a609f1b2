// MLNX_OFED ODP: "Implicit ODP MR is limited to local access permissions (local read or write)": no MW_BIND either.
use typed_verbs::access;
use typed_verbs::odp::ImplicitOdpCap;
use typed_verbs::pd::Pd;
use typed_verbs::transport::RC;

fn f(pd: &Pd, cap: &ImplicitOdpCap<RC>) {
    let _ = pd.register_implicit_odp(access::WINDOW_BINDABLE, cap);
}

fn main() {}
