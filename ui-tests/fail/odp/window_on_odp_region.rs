// Windows are for pinned regions only (DESIGN §5): an ODP region cannot host one, so no window borrow can outlive a discard of its pages.
use typed_verbs::access::{self, window};
use typed_verbs::mr::{Mr, Odp};
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, mw: Mw<Type1>, mr: &Mr<access::Access<access::LocalWrite, (), (), (), access::MwBind>, Odp>) {
    let _ = scope(|s| {
        let _ = s.bind_mw(qp, mw, mr, 0, 64, window::READ);
    });
}

fn main() {}
