// A view of a borrowed registration cannot be posted owned: its token may be forgotten, and
// the registration leaked, while the slice's borrow ends and its memory is reused.
use typed_verbs::access;
use typed_verbs::pd::Pd;
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr;

fn f(pd: &Pd, qp: &Qp<RC, RTS>) -> typed_verbs::Result<()> {
    let mut buf = vec![0u8; 64];
    let mut mr = pd.register_borrowed(&mut buf, access::LOCAL_RW)?;
    let token = qp.post_recv_owned(wr::Recv::new(mr.slice_mut(..)?)).map_err(|e| e.error)?;
    std::mem::forget(token);
    std::mem::forget(mr);
    drop(buf);
    Ok(())
}

fn main() {}
