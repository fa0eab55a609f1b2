// ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too." (an explicit ODP region, REMOTE_ATOMIC)
use typed_verbs::access::Access;
use typed_verbs::odp::OdpCap;
use typed_verbs::pd::Pd;
use typed_verbs::transport::RC;

fn f(pd: &Pd, cap: &OdpCap<RC>) {
    let _ = pd.alloc_mr_odp(4096, Access::NONE.remote_atomic(), cap);
}

fn main() {}
