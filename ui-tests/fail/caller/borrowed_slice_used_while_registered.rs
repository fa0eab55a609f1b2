// A borrowed registration holds the slice's exclusive borrow: the slice cannot be touched
// while the region (and so its views) may be in use.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, buf: &mut [u8]) -> typed_verbs::Result<()> {
    let mr = pd.register_borrowed(&mut *buf, access::LOCAL_RW)?;
    buf[0] = 1;
    drop(mr);
    Ok(())
}

fn main() {}
