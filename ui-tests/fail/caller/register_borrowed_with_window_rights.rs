// Pd::register_borrowed takes `access::LOCAL_READ` or `access::LOCAL_RW` only; a memory
// window's rights (`access::window::*`) are not a region's access set at all.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, buf: &mut [u8]) -> typed_verbs::Result<()> {
    let _mr = pd.register_borrowed(buf, access::window::READ)?;
    Ok(())
}

fn main() {}
