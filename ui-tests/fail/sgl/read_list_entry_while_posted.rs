// scope: every entry of a posted scatter list stays with the device until the scope ends; reading the second region meanwhile does not compile, even after forgetting the token.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, a: &mut Mr<access::LocalRw>, b: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let token = s.post_recv(qp, wr::Recv::new((a.slice_mut(..).unwrap(), b.slice_mut(..).unwrap()))).unwrap();
        std::mem::forget(token);
        let _first = b.as_slice()[0];
    });
}

fn main() {}
