// A dma-buf region cannot host a memory window: windows bind to registered regions of host memory (an `Mr`), and a dma-buf region's memory is the exporting device's.
use typed_verbs::access::{self, window};
use typed_verbs::dmabuf::DmabufMr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &DmabufMr<access::WindowBindable>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, window::READ);
    });
}

fn main() {}
