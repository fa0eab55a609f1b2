// A `Vec` moved into `Pd::register` is out of reach: the region dereferences to `Mr`, never to
// the `Vec`, so nothing can grow, shrink or replace its allocation while it is registered.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd) -> typed_verbs::Result<()> {
    let mut reg = pd.register(vec![0u8; 64], access::LOCAL_RW)?;
    reg.push(1);
    reg.truncate(1);
    Ok(())
}

fn main() {}
