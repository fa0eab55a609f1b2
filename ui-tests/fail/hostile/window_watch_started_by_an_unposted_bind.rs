// A bind's buffers start watching for the new rkey's invalidation, which only a posted bind may
// do: a program that turned an unposted bind into its buffers would make the library take an
// rkey no window is bound under for a live binding, and let a SEND_WITH_INV of it through the
// check that guards a peer on the same device. `into_buffers` takes the library's proof
// argument, which lives in a private module: a program cannot name it.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{BindInFlight, Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::{self, SendRequest};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type2>, mr: &Mr<access::Full>) {
    let pending = wr::BindMw::new(mw, mr, 0, 64, window::READ_WRITE).into_buffers(typed_verbs::scope::sealed::Internal(()));
    let never_bound = pending.advert().rkey;
    let _ = qp.post_send_owned(wr::InlineSendInv::new(b"x", never_bound));
}

fn main() {}
