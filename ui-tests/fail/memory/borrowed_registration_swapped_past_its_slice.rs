// Two borrowed registrations swapped: the one that outlives its own slice would then be over
// the other slice's memory, freed at the end of the inner block while still registered and
// reachable through the handle. `&mut` is invariant, so the swap gives both the same borrow,
// which the longer-lived slice cannot satisfy.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd) -> typed_verbs::Result<()> {
    let mut long_buf = vec![0u8; 64];
    let mut long = pd.register_borrowed(&mut long_buf, access::LOCAL_RW)?;
    {
        let mut short_buf = vec![0u8; 64];
        let mut short = pd.register_borrowed(&mut short_buf, access::LOCAL_RW)?;
        std::mem::swap(&mut long, &mut short);
    }
    long.as_mut_slice()[0] = 1;
    Ok(())
}

fn main() {}
