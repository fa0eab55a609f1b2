// scope: a region used by a posted work request cannot be moved out before the scope ends.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, src: Mr<access::LocalRead>) -> Vec<Mr<access::LocalRead>> {
    let mut moved = Vec::new();
    let _ = scope(|s| {
        let _token = s.post_send(qp, wr::Send::new(src.slice(..).unwrap()));
        moved.push(src);
    });
    moved
}

fn main() {}
