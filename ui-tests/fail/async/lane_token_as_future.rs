// Only owned requests can be awaited: a lane's token belongs to its scope, whose prepared
// requests borrow their buffers for the scope, and a future can be forgotten, so
// `owned::completion` refuses it with a message that points to owned buffers.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::owned::completion;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let mut lane = s.send_lane(qp).unwrap();
        let mut wr = lane.prepare(wr::Send::new(src.slice(..).unwrap())).unwrap();
        let t = lane.post(&mut wr).unwrap();
        let _fut = completion(t);
    });
}

fn main() {}
