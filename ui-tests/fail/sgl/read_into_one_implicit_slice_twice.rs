// An RDMA READ writes every entry of its scatter list: the implicit ODP region lends a writable view of a slice only while it holds the slice's exclusive borrow, so a list of two views of one slice does not compile.
use typed_verbs::access::{Access, LocalWrite, RemoteRw};
use typed_verbs::mr::RemoteSlice;
use typed_verbs::odp::ImplicitMr;
use typed_verbs::wr;

fn f(implicit: &ImplicitMr<Access<LocalWrite>>, data: &mut [u8], remote: RemoteSlice<RemoteRw>) {
    let _ = wr::Read::new((implicit.buf_mut(data).unwrap(), implicit.buf_mut(data).unwrap()), remote);
}

fn main() {}
