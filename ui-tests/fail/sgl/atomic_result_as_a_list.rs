// ibv_post_send(3): an atomic's result is exactly one 8-byte entry; a scatter list is not accepted.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::wr;

fn f(a: &mut Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteAll>) {
    let (x, y) = a.slice_mut(..8).unwrap().split_at(4).unwrap();
    let _ = wr::FetchAdd::new([x, y], remote, 1);
}

fn main() {}
