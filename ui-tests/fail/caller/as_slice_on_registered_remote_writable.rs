// A caller's buffer registered with REMOTE_WRITE is memory a peer may write at any time: like
// any such region it is never a plain &[u8].
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd) -> typed_verbs::Result<u8> {
    let mr = pd.register(vec![0u8; 4096], access::REMOTE_RW)?;
    Ok(mr.as_slice()[0])
}

fn main() {}
