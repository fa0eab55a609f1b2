// Receive lanes: the buffer of a prepared receive stays borrowed until the scope ends (the device may still write it), even after the receive is dropped; read it through `PreparedRecv::received`, which answers only once the last post completed.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let mut lane = s.recv_lane(qp).unwrap();
        let mut wr = lane.prepare(wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let _token = lane.post(&mut wr).unwrap();
        drop(wr);
        let _ = dst.as_slice()[0];
    });
}

fn main() {}
