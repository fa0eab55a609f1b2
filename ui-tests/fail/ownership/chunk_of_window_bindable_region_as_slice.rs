// ibv_bind_mw(3): a writable memory window can be bound to a LOCAL_WRITE | MW_BIND region, so a chunk of one is never exposed as a plain &[u8].
use typed_verbs::access;
use typed_verbs::mr::Chunk;

fn f(c: &Chunk<access::WindowBindable>) -> u8 {
    c.as_slice()[0]
}

fn main() {}
