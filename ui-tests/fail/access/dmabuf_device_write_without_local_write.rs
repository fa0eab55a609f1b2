// ibv_reg_mr(3): the device writes a receive buffer or an RDMA READ destination only in a region
// with IBV_ACCESS_LOCAL_WRITE; a dma-buf region without it lends no writable device view.
use typed_verbs::access;
use typed_verbs::dmabuf::DmabufMr;

fn f(mr: &mut DmabufMr<access::RemoteReadOnly>) {
    let _ = mr.local_mut(..);
}

fn main() {}
