// A caller's buffer cannot be taken back (`Registered::deregister`) inside a scope whose send
// lane holds a prepared request over the region: the lane may post it again until the scope
// ends.
use typed_verbs::access;
use typed_verbs::caller::Registered;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(reg: Registered<access::LocalRw, Vec<u8>>, qp: &mut Qp<RC, RTS>) -> typed_verbs::Result<()> {
    scope(|s| {
        let mut lane = s.send_lane(qp).unwrap();
        let mut p = lane.prepare(wr::Send::new(reg.slice(..).unwrap())).unwrap();
        let _ = lane.post_unsignaled(&mut p);
        let _vec = reg.deregister();
    })?;
    Ok(())
}

fn main() {}
