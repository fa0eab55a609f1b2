// scope: a receive buffer view moves into its token (it is not Copy): the same view cannot be posted twice. A new view of the region cannot be posted either while the receive may be posted: repost_recv_region_after_forgotten_token.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, dst: &mut Mr<access::LocalRw>) {
    let _ = scope(|s| {
        let buf = dst.slice_mut(..).unwrap();
        let _first = s.post_recv(qp, wr::Recv::new(buf));
        let _second = s.post_recv(qp, wr::Recv::new(buf));
    });
}

fn main() {}
