// A view of the closure form's region borrows the handle: it cannot leave the closure, after
// which the region is deregistered and the slice's borrow ends.
use typed_verbs::access;
use typed_verbs::mr::LocalBuf;
use typed_verbs::pd::Pd;

fn f<'a>(pd: &Pd, buf: &'a mut [u8]) -> typed_verbs::Result<LocalBuf<'a>> {
    let view = pd.with_registered(buf, access::REMOTE_RW, |mr| mr.slice(..))??;
    Ok(view)
}

fn main() {}
