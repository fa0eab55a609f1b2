// ibv_reg_mr(3): the device writes a receive buffer, so its region needs IBV_ACCESS_LOCAL_WRITE.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::Recv;

fn f(qp: &Qp<RC, RTS>, buf: &mut Mr<access::RemoteReadOnly>) {
    let _ = scope(|s| {
        let _ = s.post_recv(qp, Recv::new(buf.slice_mut(..).unwrap()));
    });
}

fn main() {}
