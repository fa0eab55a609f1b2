// Send lanes: the memory of a prepared request stays borrowed until the scope ends (the device may still read it), even after the request is dropped.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, src: &mut Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let mut lane = s.send_lane(qp).unwrap();
        let mut wr = lane.prepare(wr::Write::new(src.slice(..).unwrap(), remote)).unwrap();
        lane.post_unsignaled(&mut wr).unwrap();
        drop(wr);
        src.as_mut_slice()[0] = 1;
    });
}

fn main() {}
