// `token.await` on a scope Token: a scope token borrows its buffers for the scope, and a future
// can be forgotten, so it is not a future (rustc's message: `.await` reports `IntoFuture`
// itself; `owned::completion(token)`, in scope_token_as_future.rs, gives the library's message,
// which points to owned buffers).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

async fn f(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
    let t = scope(|s| {
        let t = s.post_send(qp, wr::Send::new(src.slice(..).unwrap())).unwrap();
        async move {
            let _ = t.await;
        }
    });
    let _ = t;
}

fn main() {}
