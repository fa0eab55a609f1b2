// ibv_reg_mr(3): the device writes a receive buffer, so its region needs IBV_ACCESS_LOCAL_WRITE (a chunk of a region registered without it, refused by wr::Recv::new).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, buf: Mr<access::RemoteReadOnly>) {
    let mut chunks = buf.into_chunks(64).unwrap();
    let _ = scope(|s| {
        let _ = s.post_recv(qp, wr::Recv::new(chunks.remove(0)));
    });
}

fn main() {}
