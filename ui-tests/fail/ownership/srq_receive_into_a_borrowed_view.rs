// A shared receive queue keeps its receives until they complete or the SRQ is destroyed (resetting a QP does not take them back), so its receives own their memory: a receive into a borrowed view (LocalBufMut) does not compile.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::srq::Srq;
use typed_verbs::wr;

fn f(srq: &Srq, mut buf: Mr<access::LocalRw>) {
    let _ = srq.post_recv_owned(wr::Recv::new(buf.slice_mut(..).unwrap()));
}

fn main() {}
