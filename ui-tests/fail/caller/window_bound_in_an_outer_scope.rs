// A type 1 window bound to the closure form's region cannot be bound in a scope opened outside
// the closure: the bind (and the window's borrow of the region) would outlast the call, whose
// end deregisters the region and ends the slice's borrow.
use typed_verbs::access::{self, window};
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(pd: &Pd, qp: &Qp<RC, RTS>, mw: Mw<Type1>, buf: &mut [u8]) -> typed_verbs::Result<()> {
    scope(|s| {
        pd.with_registered(buf, access::FULL, |mr| {
            let _token = s.bind_mw(qp, mw, mr, 0, 8, window::READ_WRITE);
        })
    })??;
    Ok(())
}

fn main() {}
