// ibv_post_send(3): "IBV_SEND_FENCE ... Valid only for QPs with Transport Service Type IBV_QPT_RC": an owned request on a UC QP is not fenced either.
use typed_verbs::access;
use typed_verbs::mr::Chunk;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RTS, UC};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<UC, RTS>, chunk: Chunk<access::LocalRead>) {
    let _ = qp.post_send_owned(wr::Send::new(chunk).fence());
}

fn main() {}
