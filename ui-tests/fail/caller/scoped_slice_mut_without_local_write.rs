// ibv_reg_mr(3): the device writes a receive buffer or an RDMA READ destination only in a region with IBV_ACCESS_LOCAL_WRITE; the closure form's region registered without it lends no writable view.
use typed_verbs::access;
use typed_verbs::caller::ScopedMr;

fn f(mr: &mut ScopedMr<'_, access::RemoteReadOnly>) {
    let _ = mr.slice_mut(..);
}

fn main() {}
