// A dma-buf region's local views are device views, named by iova: the program cannot copy in or
// out of them (the memory is not the process's), only post them.
use typed_verbs::access;
use typed_verbs::dmabuf::DmabufMr;

fn f(mr: &mut DmabufMr<access::LocalRw>) {
    let mut v = mr.local_mut(..).unwrap();
    v.write_volatile_from(&[0x41; 64]);
}

fn main() {}
