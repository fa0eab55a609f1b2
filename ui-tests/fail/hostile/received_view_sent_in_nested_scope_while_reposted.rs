// A received buffer lent to a nested scope as a send source (`received()` then `as_local()`) stays borrowed from the prepared receive until that scope ends, even with the send's token forgotten: the outer lane cannot post the receive again (the device would write what the inner send reads).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, other: &Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let mut lane = s.recv_lane(qp).unwrap();
        let mut wr = lane.prepare(wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let _ = scope(|inner| {
            let t = inner.post_send(other, wr::Send::new(wr.received().unwrap().as_local())).unwrap();
            std::mem::forget(t);
            let _again = lane.post(&mut wr).unwrap();
        });
    });
}

fn main() {}
