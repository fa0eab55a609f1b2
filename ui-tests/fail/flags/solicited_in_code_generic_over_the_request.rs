// ibv_post_send(3): "IBV_SEND_SOLICITED ... Valid only for Send and RDMA Write with immediate".
// Code generic over the request needs the bound `AllowsSolicited` to set the flag.
use typed_verbs::wr::{SendRequest, Solicited};

fn mark<W: SendRequest>(wr: W) -> Solicited<W> {
    wr.solicited()
}

fn main() {
    let _ = mark::<typed_verbs::wr::Send<typed_verbs::mr::LocalBuf<'static>>>;
}
