// IBTA o10-37.2.26: a peer's SEND_WITH_INV cannot invalidate a type 1 window, so no receive completion hands one back unbound (`BoundMw::invalidated_by`).
use typed_verbs::access::window;
use typed_verbs::mw::{BoundMw, Type1};
use typed_verbs::wc::Completion;

fn f(bound: BoundMw<'_, Type1, window::Read>, completion: &Completion) {
    let _ = bound.invalidated_by(completion);
}

fn main() {}
