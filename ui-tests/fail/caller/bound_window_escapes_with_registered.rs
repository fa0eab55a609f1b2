// A window bound inside the closure borrows the closure's handle: the `BoundMw` cannot be the
// closure's result (the region is deregistered when the closure returns, and the slice's
// borrow ends).
use std::time::Duration;
use typed_verbs::access::{self, window};
use typed_verbs::mw::{BoundMw, Mw, Type1};
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f<'a>(
    pd: &Pd,
    qp: &Qp<RC, RTS>,
    mw: Mw<Type1>,
    buf: &'a mut [u8],
) -> Option<BoundMw<'a, Type1, window::ReadWrite>> {
    pd.with_registered(buf, access::FULL, |mr| {
        scope(|s| {
            let t = s.bind_mw(qp, mw, mr, 0, 8, window::READ_WRITE).ok()?;
            s.wait(t, Duration::from_secs(1)).ok()?.1.ok()
        })
        .ok()
        .flatten()
    })
    .ok()
    .flatten()
}

fn main() {}
