// owned posts: a list mixing an owned chunk with a borrowed view is not owned memory; the view's region could be dropped while the request is outstanding, so the post does not compile.
use typed_verbs::access;
use typed_verbs::mr::{Chunk, Mr};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, chunk: Chunk<access::LocalRw>, mr: Mr<access::LocalRw>) {
    let token = qp.post_send_owned(wr::Send::new((chunk, mr.slice(..).unwrap())));
    drop(mr);
    drop(token);
}

fn main() {}
