// A DMA-BUF region's device view borrows the region: the region cannot be deregistered
// (dropped) while a view that a work request could name is alive.
use typed_verbs::access;
use typed_verbs::dmabuf::DmabufMr;

fn f(mut mr: DmabufMr<access::LocalRw>) -> typed_verbs::Result<()> {
    let view = mr.local_mut(..)?;
    drop(mr);
    let _ = view.iova();
    Ok(())
}

fn main() {}
