// An RDMA READ writes every entry of its scatter list: one shared view (LocalBuf) among them does not compile.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::wr;

fn f(a: &mut Mr<access::LocalRw>, b: &Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = wr::Read::new((a.slice_mut(..8).unwrap(), b.slice(..8).unwrap()), remote);
}

fn main() {}
