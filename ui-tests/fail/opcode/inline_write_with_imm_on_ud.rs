// ibv_post_send(3) opcode table: IBV_WR_RDMA_WRITE_WITH_IMM is not valid on UD (only UC, RC, XRC_SEND), inline or not.
use typed_verbs::access;
use typed_verbs::ah::Ah;
use typed_verbs::mr::RemoteSlice;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RTS, UD};
use typed_verbs::wr::{InlineWriteImm, SendRequest};

fn f(qp: &Qp<UD, RTS>, ah: &Ah, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let _ = s.post_inline(qp, InlineWriteImm::new(b"data", remote, 7).to(ah, 1, 2));
    });
}

fn main() {}
