// ibv_reg_mr(3), which ibv_reg_dmabuf_mr shares: "If IBV_ACCESS_REMOTE_WRITE or
// IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too."
use std::os::fd::BorrowedFd;
use typed_verbs::access::Access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, fd: BorrowedFd<'_>) {
    let _ = pd.reg_dmabuf_mr(fd, 0, 4096, 0, Access::NONE.remote_write());
}

fn main() {}
