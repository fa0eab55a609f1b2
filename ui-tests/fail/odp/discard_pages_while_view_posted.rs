// madvise(MADV_DONTNEED) under a posted request would hand the pages the device is reading back to the kernel: discard_pages takes &mut, and a posted view borrows the region until the scope ends, even after its token is forgotten.
use typed_verbs::access;
use typed_verbs::mr::{Mr, Odp, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: &mut Mr<access::LocalRw, Odp>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let token = s.post_send(qp, wr::Write::new(src.slice(..).unwrap(), remote)).unwrap();
        std::mem::forget(token);
        let _ = src.discard_pages(..);
    });
}

fn main() {}
