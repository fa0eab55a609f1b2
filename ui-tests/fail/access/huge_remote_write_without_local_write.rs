// ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too." (a huge-page region, REMOTE_WRITE)
use typed_verbs::access::Access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd) {
    let _ = pd.alloc_mr_huge(2 << 20, Access::NONE.remote_write());
}

fn main() {}
