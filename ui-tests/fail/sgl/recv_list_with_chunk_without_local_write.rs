// Every entry of a receive's scatter list needs LOCAL_WRITE: an owned chunk of a region without it, beside a writable one, does not compile.
use typed_verbs::access;
use typed_verbs::mr::{Chunk, Mr};
use typed_verbs::wr;

fn f(a: &mut Mr<access::LocalRw>, c: Chunk<access::Access<(), (), access::RemoteRead>>) {
    let _ = wr::Recv::new((a.slice_mut(..8).unwrap(), c));
}

fn main() {}
