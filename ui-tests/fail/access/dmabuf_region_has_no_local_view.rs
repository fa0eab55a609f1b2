// A dma-buf region's iova is not a host address: a LocalBufMut of it would let safe code copy
// in and out of wherever the iova points (`write_volatile_from`). Its views are device views.
use typed_verbs::access;
use typed_verbs::dmabuf::DmabufMr;

fn f(mr: &mut DmabufMr<access::LocalRw>) {
    let v = mr.slice_mut(..).unwrap();
    v.write_volatile_from(&[0x41; 64]);
}

fn main() {}
