// Memory a peer may write is never a plain slice, owned chunk or not.
use typed_verbs::access;
use typed_verbs::mr::Chunk;

fn f(c: &Chunk<access::RemoteRw>) -> u8 {
    c.as_slice()[0]
}

fn main() {}
