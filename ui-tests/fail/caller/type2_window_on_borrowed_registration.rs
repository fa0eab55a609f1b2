// A borrowed registration (`register_borrowed`) is local only: no window can be bound to it, of
// either type, since a window leaked with the region would let a peer write the slice after its
// borrow ended. `NoPeerAccess` excludes MW_BIND, so `BindMw::new` refuses the region.
use typed_verbs::access::{self, window};
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::pd::Pd;
use typed_verbs::wr::BindMw;

fn f(pd: &Pd, mw: Mw<Type2>, buf: &mut [u8]) -> typed_verbs::Result<()> {
    let mr = pd.register_borrowed(buf, access::LOCAL_RW)?;
    let bind = BindMw::new(mw, &mr, 0, 8, window::READ);
    std::mem::forget(bind);
    std::mem::forget(mr);
    Ok(())
}

fn main() {}
