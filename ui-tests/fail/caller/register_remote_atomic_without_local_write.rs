// ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too." (a buffer the caller owns, REMOTE_ATOMIC)
use typed_verbs::access::Access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd) {
    let _ = pd.register(vec![0u8; 4096], Access::NONE.remote_atomic());
}

fn main() {}
