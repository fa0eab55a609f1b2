// An RDMA READ writes its local buffer: a shared view (LocalBuf) cannot be its destination.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::wr;

fn f(local: &Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = wr::Read::new(local.slice(..).unwrap(), remote);
}

fn main() {}
