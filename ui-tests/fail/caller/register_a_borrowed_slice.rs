// `Pd::register` moves an owned buffer into the region, which releases it only when the region
// is deregistered; a borrowed slice (even `'static` and `&mut`) is not owned: the library could
// not keep its memory from being used elsewhere once the region is leaked.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, buf: &'static mut [u8]) -> typed_verbs::Result<()> {
    let mr = pd.register(buf, access::LOCAL_RW)?;
    drop(mr);
    Ok(())
}

fn main() {}
