// Discarding pages changes what a live &[u8] of the region reads (to zeros): discard_pages takes &mut.
use typed_verbs::access;
use typed_verbs::mr::{Mr, Odp};

fn f(mr: &mut Mr<access::LocalRw, Odp>) -> u8 {
    let bytes = mr.as_slice();
    let _ = mr.discard_pages(..);
    bytes[0]
}

fn main() {}
