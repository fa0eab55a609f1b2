// A send lane opened in a scope outside the closure cannot prepare a view of the closure form's
// region: a prepared request borrows its memory for the lane's whole scope.
use typed_verbs::access;
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(pd: &Pd, qp: &mut Qp<RC, RTS>, buf: &mut [u8]) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        let mut lane = s.send_lane(qp)?;
        pd.with_registered(buf, access::LOCAL_RW, |mr| -> typed_verbs::Result<()> {
            let mut wr = lane.prepare(wr::Send::new(mr.slice(..)?)).map_err(typed_verbs::Error::from)?;
            lane.post_unsignaled(&mut wr)
        })?
    })??;
    Ok(())
}

fn main() {}
