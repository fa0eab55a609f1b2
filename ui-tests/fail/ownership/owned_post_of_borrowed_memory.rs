// Owned posts outlive every borrow: a request whose memory is borrowed (LocalBuf) cannot be posted with post_send_owned.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>) {
    let src = qp_region();
    let _ = qp.post_send_owned(wr::Send::new(src.slice(..).unwrap()));
}

fn qp_region() -> Mr<access::LocalRead> {
    unimplemented!()
}

fn main() {}
