// ibv_post_send(3): "IBV_SEND_SOLICITED Set the solicited event indicator. Valid only for Send and RDMA Write with immediate" (here: an inline RDMA WRITE without immediate).
use typed_verbs::access;
use typed_verbs::mr::RemoteSlice;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{InlineWrite, SendRequest};

fn f(qp: &Qp<RC, RTS>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let _ = s.post_inline(qp, InlineWrite::new(b"data", remote).solicited());
    });
}

fn main() {}
