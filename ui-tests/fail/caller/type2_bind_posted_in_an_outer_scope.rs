// A BIND_MW of a type 2 window to the closure form's region cannot be posted in a scope opened
// outside the closure: `BindMw` borrows the region, and a request of the outer scope must borrow
// its memory for the whole scope, which outlasts the registration.
use typed_verbs::access::{self, window};
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(pd: &Pd, qp: &Qp<RC, RTS>, mw: Mw<Type2>, buf: &mut [u8]) -> typed_verbs::Result<()> {
    scope(|s| {
        pd.with_registered(buf, access::FULL, |mr| {
            let _token = s.post_send(qp, BindMw::new(mw, mr, 0, 8, window::READ_WRITE));
        })
    })??;
    Ok(())
}

fn main() {}
