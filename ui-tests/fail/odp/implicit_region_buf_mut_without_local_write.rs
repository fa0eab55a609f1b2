// ibv_reg_mr(3): the device writes a receive buffer or an RDMA READ destination only in a region with IBV_ACCESS_LOCAL_WRITE; an implicit ODP region registered without it lends no writable view.
use typed_verbs::access::Access;
use typed_verbs::odp::ImplicitMr;

fn f(implicit: &ImplicitMr<Access>, data: &mut [u8]) {
    let _ = implicit.buf_mut(data);
}

fn main() {}
