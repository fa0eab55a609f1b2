// A forgotten token does not end the borrow of a receive buffer: the pages of an ODP region the device may still write cannot be discarded before the scope has drained.
use typed_verbs::access;
use typed_verbs::mr::{Mr, Odp};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, buf: &mut Mr<access::LocalRw, Odp>) {
    let _ = scope(|s| {
        let token = s.post_recv(qp, wr::Recv::new(buf.slice_mut(..).unwrap())).unwrap();
        std::mem::forget(token);
        let _ = buf.discard_pages(..);
    });
}

fn main() {}
