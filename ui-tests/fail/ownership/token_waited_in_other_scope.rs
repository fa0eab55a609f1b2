// scope: a token can only be waited on in the scope that posted it, not in a nested one.
use std::time::Duration;
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
    let _ = scope(|outer| {
        let token = outer.post_send(qp, wr::Send::new(src.slice(..).unwrap())).unwrap();
        let _ = scope(|inner| {
            let _ = inner.wait(token, Duration::from_secs(1));
        });
    });
}

fn main() {}
