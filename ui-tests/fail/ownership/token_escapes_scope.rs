// scope: a token is tied to its scope and cannot outlive it (the scope waits for every request before returning).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
    let _token = scope(|s| s.post_send(qp, wr::Send::new(src.slice(..).unwrap())).unwrap());
}

fn main() {}
