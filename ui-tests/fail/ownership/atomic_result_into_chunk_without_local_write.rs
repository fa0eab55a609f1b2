// ibv_reg_mr(3): the device writes an atomic's result, so its region needs IBV_ACCESS_LOCAL_WRITE, owned chunk or not (a CMP_AND_SWP posted owned into a chunk of a region registered without it).
use typed_verbs::access;
use typed_verbs::mr::{Chunk, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, result: Chunk<access::LocalRead>, remote: RemoteSlice<access::RemoteAll>) {
    let _ = qp.post_send_owned(wr::CompareSwap::new(result, remote, 0, 1));
}

fn main() {}
