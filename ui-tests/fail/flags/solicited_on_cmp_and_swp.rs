// ibv_post_send(3): "IBV_SEND_SOLICITED Set the solicited event indicator. Valid only for Send and RDMA Write with immediate" (here: an atomic Compare and Swap).
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<RC, RTS>, result: &mut Mr<access::LocalRw>, remote: RemoteSlice<access::RemoteAll>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, wr::CompareSwap::new(result.slice_mut(..8).unwrap(), remote, 0, 1).solicited());
    });
}

fn main() {}
