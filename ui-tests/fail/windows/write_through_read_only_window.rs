// A window's rights type what the peer may do: an RDMA WRITE needs a window with REMOTE_WRITE.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>, remote: typed_verbs::mr::RemoteSlice<window::Read>) {
    let _ = scope(|s| {
        let _ = s.post_send(qp, typed_verbs::wr::Write::new(src.slice(..).unwrap(), remote));
    });
}

fn main() {}
