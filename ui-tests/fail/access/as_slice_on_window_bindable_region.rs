// ibv_bind_mw(3): a writable memory window can be bound to a LOCAL_WRITE | MW_BIND region, so it is never exposed as a plain &[u8].
use typed_verbs::access;
use typed_verbs::mr::Mr;

fn f(mr: &Mr<access::WindowBindable>) -> u8 {
    mr.as_slice()[0]
}

fn main() {}
