// ibv_reg_mr(3): the device writes the destination of an RDMA READ, so its region needs IBV_ACCESS_LOCAL_WRITE (a chunk of a region registered without it, refused by wr::Read::new).
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, local: Mr<access::LocalRead>, remote: RemoteSlice<access::RemoteRw>) {
    let mut chunks = local.into_chunks(64).unwrap();
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::Read::new(chunks.remove(0), remote));
    });
}

fn main() {}
