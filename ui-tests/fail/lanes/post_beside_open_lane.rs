// Send lanes: a lane is the only poster of its QP's send queue for the rest of the scope; nothing else can post there meanwhile.
use typed_verbs::access;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &mut Qp<RC, RTS>, src: &Mr<access::LocalRead>, remote: RemoteSlice<access::RemoteRw>) {
    let _ = scope(|s| {
        let lane = s.send_lane(qp).unwrap();
        let _ = s.post_send(qp, wr::Write::new(src.slice(..).unwrap(), remote));
        drop(lane);
    });
}

fn main() {}
