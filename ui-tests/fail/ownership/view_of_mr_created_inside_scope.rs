// scope: posted memory must outlive the scope, so a region created inside the scope closure cannot be posted.
use typed_verbs::access;
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(qp: &Qp<RC, RTS>, pd: &Pd) {
    let _ = scope(|s| {
        let mr = pd.alloc_mr(4096, access::LOCAL_READ).unwrap();
        let _token = s.post_send(qp, wr::Send::new(mr.slice(..).unwrap()));
    });
}

fn main() {}
