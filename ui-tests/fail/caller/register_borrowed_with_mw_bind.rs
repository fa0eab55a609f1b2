// A leaked registration of borrowed memory outlives the borrow: it may not take MW_BIND either
// (a window bound to it would let a peer in), even without any remote right of its own.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, buf: &mut [u8]) -> typed_verbs::Result<()> {
    let mr = pd.register_borrowed(buf, access::WINDOW_BINDABLE)?;
    std::mem::forget(mr);
    Ok(())
}

fn main() {}
