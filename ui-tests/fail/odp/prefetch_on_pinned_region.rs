// MLNX_OFED ODP: "The pre-fetched verb is applicable for ODP MRs only."
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::odp::Prefetch;

fn f(mr: &Mr<access::LocalRw>) {
    let _ = mr.prefetch(.., Prefetch::Read);
}

fn main() {}
