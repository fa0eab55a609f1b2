// ibv_post_send(3) needs a QP in RTS: posting a send request to a QP in INIT does not compile.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, INIT};
use typed_verbs::wr;

fn f(qp: &Qp<RC, INIT>, local: &Mr<access::LocalRead>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Send::new(local.slice(..).unwrap()));
    });
}

fn main() {}
