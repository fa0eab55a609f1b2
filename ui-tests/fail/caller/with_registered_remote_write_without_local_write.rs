// ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too." (the closure form over borrowed memory, REMOTE_WRITE)
use typed_verbs::access::Access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, buf: &mut [u8]) {
    let _ = pd.with_registered(buf, Access::NONE.remote_write(), |_mr| ());
}

fn main() {}
