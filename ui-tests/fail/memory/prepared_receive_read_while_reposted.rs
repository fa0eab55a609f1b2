// The buffer a prepared receive hands out once its post completed (`received`) cannot be held
// while the receive is posted again: the device would write what the program reads.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(mr: &mut Mr<access::LocalRw>, qp: &mut Qp<RC, RTS>) -> typed_verbs::Result<()> {
    let view = mr.slice_mut(..)?;
    scope(|s| {
        let mut lane = s.recv_lane(qp).unwrap();
        let mut p = lane.prepare(wr::Recv::new(view)).unwrap();
        if let Some(buf) = p.received() {
            let _ = lane.post(&mut p);
            let mut out = [0u8; 8];
            buf.read_volatile_into(&mut out);
        }
    })?;
    Ok(())
}

fn main() {}
