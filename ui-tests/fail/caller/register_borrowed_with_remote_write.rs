// A leaked registration of borrowed memory outlives the borrow: it may not let a peer write.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, buf: &mut [u8]) -> typed_verbs::Result<()> {
    let mr = pd.register_borrowed(buf, access::REMOTE_RW)?;
    std::mem::forget(mr);
    Ok(())
}

fn main() {}
