// Neither a borrowed registration nor the closure form's handle hands out `&mut Mr`: the region
// cannot be replaced (`mem::replace`/`swap`) by one over other memory, which would take the
// registration of the borrowed slice out of its handle (and its leak-safety argument).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::pd::Pd;

fn borrowed(pd: &Pd, buf: &mut [u8], other: Mr<access::LocalRw>) -> typed_verbs::Result<Mr<access::LocalRw>> {
    // `mut` as the attempt needs it (unused only because the attempt fails).
    #[allow(unused_mut)]
    let mut mr = pd.register_borrowed(buf, access::LOCAL_RW)?;
    Ok(std::mem::replace(&mut *mr, other))
}

fn scoped(pd: &Pd, buf: &mut [u8], other: Mr<access::LocalRw>) -> typed_verbs::Result<Mr<access::LocalRw>> {
    pd.with_registered(buf, access::LOCAL_RW, |mr| std::mem::replace(&mut **mr, other))
}

fn main() {}
