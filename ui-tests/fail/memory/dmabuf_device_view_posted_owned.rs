// A device view of a dma-buf region borrows the region: an owned post of one (whose token may
// be forgotten while the region is deregistered and the dma-buf released) does not compile.
use typed_verbs::access;
use typed_verbs::dmabuf::DmabufMr;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(dm: DmabufMr<access::LocalRw>, qp: &Qp<RC, RTS>) -> typed_verbs::Result<()> {
    let token = qp.post_send_owned(wr::Send::new(dm.local(..)?)).map_err(|e| e.error)?;
    std::mem::forget(token);
    drop(dm);
    Ok(())
}

fn main() {}
