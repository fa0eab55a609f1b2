// A view through the implicit ODP region lasts as long as the slice it lends, even when the
// region itself lives forever: an owned receive (whose token may be dropped or forgotten) of a
// local vector's bytes does not compile, the vector being freed at the end of the function.
use typed_verbs::access;
use typed_verbs::odp::ImplicitMr;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(implicit: &'static ImplicitMr<access::LocalRw>, qp: &Qp<RC, RTS>) -> typed_verbs::Result<()> {
    let mut data = vec![0u8; 64];
    let token = qp.post_recv_owned(wr::Recv::new(implicit.buf_mut(&mut data)?)).map_err(|e| e.error)?;
    std::mem::forget(token);
    Ok(())
}

fn main() {}
