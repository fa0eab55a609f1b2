// A UD service's address (`CmId::resolve_peer`: address handle, QP number, Q_Key) is a UD
// destination: ibv_post_send(3) takes wr.ud on UD queue pairs only, so it cannot address a send
// on an RC queue pair.
use typed_verbs::access;
use typed_verbs::cm::UdPeer;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{self, SendRequest};

fn f(peer: &UdPeer, qp: &Qp<RC, RTS>, mr: &Mr<access::LocalRw>) {
    let _ = scope(|s| {
        s.post_send(qp, wr::Send::new(mr.slice(..).unwrap()).to(peer.ah(), peer.qp_num(), peer.qkey())).map(|_| ())
    });
}

fn main() {}
