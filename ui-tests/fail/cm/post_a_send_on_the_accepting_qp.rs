// `Accepting::qp` hands out the QP in RTR, for receives posted before the peer can send: a send
// there does not compile (owned or scoped), since the connection is not established yet.
use typed_verbs::access;
use typed_verbs::cm::Accepting;
use typed_verbs::mr::Mr;
use typed_verbs::scope::scope;
use typed_verbs::wr;

fn f(accepting: &Accepting, mr: &Mr<access::LocalRw>, chunk: typed_verbs::mr::Chunk<access::LocalRw>) {
    let _ = accepting.qp().post_send_owned(wr::Send::new(chunk));
    let _ = scope(|s| s.post_send(accepting.qp(), wr::Send::new(mr.slice(..).unwrap())).map(|_| ()));
}

fn main() {}
