// A view of the closure form's region cannot be posted in a scope opened outside the closure:
// the request could still be outstanding when the closure returns and the region is
// deregistered, and the slice's borrow ends.
use typed_verbs::access;
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(pd: &Pd, qp: &Qp<RC, RTS>, buf: &mut [u8]) -> typed_verbs::Result<()> {
    scope(|s| {
        pd.with_registered(buf, access::LOCAL_RW, |mr| {
            let _token = s.post_send(qp, wr::Send::new(mr.slice(..).unwrap()));
        })
    })??;
    Ok(())
}

fn main() {}
