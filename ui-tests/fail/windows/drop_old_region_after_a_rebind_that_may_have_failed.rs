// ibv_reg_mr(3) NOTES: a region with a bound window must not be deregistered. A rebind that failed hands the window back bound to the old region (whether the device kept that binding is the device's), so the old region stays borrowed while the result lives.
use std::time::Duration;
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS};

fn f(qp: &Qp<RC, RTS>, old: Mr<access::WindowBindable>, new: &Mr<access::WindowBindable>, mw: Mw<Type1>) {
    let t = Duration::from_secs(1);
    let bound = scope(|s| s.wait(s.bind_mw(qp, mw, &old, 0, 64, window::READ).unwrap(), t).unwrap().1.unwrap()).unwrap();
    let result = scope(|s| s.wait(s.rebind_mw(qp, bound, new, 0, 64, window::READ).unwrap(), t).unwrap().1).unwrap();
    drop(old);
    drop(result);
}

fn main() {}
