// The handles of two nested closure registrations are branded with their calls' own lifetimes:
// swapping them (which would move the outer registration into the inner call, and leave the
// inner one registered after its borrow ended) does not compile.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, a: &mut [u8], b: &mut [u8]) -> typed_verbs::Result<()> {
    pd.with_registered(a, access::REMOTE_RW, |outer| {
        pd.with_registered(b, access::REMOTE_RW, |inner| std::mem::swap(outer, inner))
    })??;
    Ok(())
}

fn main() {}
