// A `Vec` whose elements are registered through `register_borrowed` cannot be grown (and so
// reallocated, freeing the registered memory) while the registration lives.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd) -> typed_verbs::Result<()> {
    let mut v = vec![0u8; 64];
    let mr = pd.register_borrowed(&mut v[..], access::LOCAL_RW)?;
    v.push(1);
    drop(mr);
    Ok(())
}

fn main() {}
