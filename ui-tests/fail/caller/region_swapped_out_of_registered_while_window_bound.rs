// ibv_reg_mr(3) NOTES: "ibv_dereg_mr() fails if any memory window is still bound to this MR": a window bound to a `Registered` region borrows it, so its `Mr` cannot be swapped out (`DerefMut`) and dropped meanwhile.
use typed_verbs::access::{self, window};
use typed_verbs::caller::Registered;
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type2};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};
use typed_verbs::wr::BindMw;

fn f(
    qp: &Qp<RC, RTS>,
    mw: Mw<Type2>,
    mut owned: Registered<access::WindowBindable, Vec<u8>>,
    mut other: Mr<access::WindowBindable>,
) {
    let bound = scope(|s| {
        let t = s.post_send(qp, BindMw::new(mw, &owned, 0, 64, window::READ_WRITE)).unwrap();
        s.wait(t, std::time::Duration::from_secs(1)).unwrap().1.unwrap()
    })
    .unwrap();
    std::mem::swap(&mut *owned, &mut other);
    drop(other);
    let _ = bound.rkey();
}

fn main() {}
