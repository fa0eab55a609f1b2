// A window's unbind (or bind) cannot be forged: turning a request's buffers into what its
// completion hands back is the library's alone, with the request's real completion. A program
// that could call it with a made-up successful completion would get the window back as an
// unbound `Mw`, ending the region's borrow while the window is still bound on the device.
// The proof argument `sealed::Internal` lives in a private module: a program cannot name it.
use typed_verbs::access::window::ReadWrite;
use typed_verbs::mw::{BoundMw, Mw, Type2};
use typed_verbs::scope::Completes;
use typed_verbs::wc::Completion;
use typed_verbs::wr::{LocalInv, SendRequest};

fn forge(bound: BoundMw<'_, Type2, ReadWrite>) -> Mw<Type2> {
    let made_up = Completion::default();
    LocalInv::new(bound)
        .into_buffers(typed_verbs::scope::sealed::Internal(()))
        .complete(&made_up, typed_verbs::scope::sealed::Internal(()))
        .unwrap_or_else(|_| panic!())
}

fn main() {}
