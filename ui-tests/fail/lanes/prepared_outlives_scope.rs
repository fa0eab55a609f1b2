// Send lanes: a prepared request belongs to its scope; it cannot be posted on a lane of a nested scope.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(a: &mut Qp<RC, RTS>, b: &mut Qp<RC, RTS>, src: &Mr<access::LocalRead>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|outer| {
        let lane_a = outer.send_lane(a).unwrap();
        let mut wr = lane_a.prepare(wr::Write::new(src.slice(..).unwrap(), remote)).unwrap();
        let _ = scope(|inner| {
            let mut lane_b = inner.send_lane(b).unwrap();
            let _ = lane_b.post_unsignaled(&mut wr);
        });
    });
}

fn main() {}
