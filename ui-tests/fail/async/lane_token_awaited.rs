// `token.await` on a lane's token: it belongs to its scope, whose prepared requests borrow
// their buffers for the scope, and a future can be forgotten, so it is not a future (rustc's
// message: `.await` reports `IntoFuture` itself; `owned::completion(token)`, in
// lane_token_as_future.rs, gives the library's message, which points to owned buffers).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let mut lane = s.send_lane(qp).unwrap();
        let mut wr = lane.prepare(wr::Send::new(src.slice(..).unwrap())).unwrap();
        let t = lane.post(&mut wr).unwrap();
        let _fut = async move {
            let _ = t.await;
        };
    });
}

fn main() {}
