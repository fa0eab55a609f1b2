// MLNX_OFED ODP: the implicit region "only has a valid lkey, whereas its rkey is invalid".
use typed_verbs::access::Access;
use typed_verbs::odp::ImplicitMr;

fn f(implicit: &ImplicitMr<Access>) {
    let _ = implicit.remote();
}

fn main() {}
