// A peer may RDMA WRITE a REMOTE_WRITE region at any time, so it is never exposed as a plain &[u8].
use typed_verbs::access;
use typed_verbs::mr::Mr;

fn f(mr: &Mr<access::RemoteRw>) -> u8 {
    mr.as_slice()[0]
}

fn main() {}
