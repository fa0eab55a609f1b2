// ibv_reg_mr(3): a receive buffer is written by the local device and needs IBV_ACCESS_LOCAL_WRITE, owned chunk or not.
use typed_verbs::access;
use typed_verbs::mr::Chunk;
use typed_verbs::wr;

fn f(c: Chunk<access::RemoteReadOnly>) {
    let _ = wr::Recv::new(c);
}

fn main() {}
