// A receive into the closure form's region cannot be prepared on a receive lane of a scope
// opened outside the closure: the lane re-posts it, and the scope's drain comes after the
// closure deregistered the region and the slice's borrow ended.
use typed_verbs::access;
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(pd: &Pd, qp: &mut Qp<RC, RTS>, buf: &mut [u8]) -> typed_verbs::Result<()> {
    scope(|s| {
        let mut lane = s.recv_lane(qp).unwrap();
        pd.with_registered(buf, access::LOCAL_RW, |mr| {
            let mut p = lane.prepare(wr::Recv::new(mr.slice_mut(..).unwrap())).unwrap();
            let _ = lane.post(&mut p);
        })
    })??;
    Ok(())
}

fn main() {}
