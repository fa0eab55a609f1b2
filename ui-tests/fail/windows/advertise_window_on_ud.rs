// ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for bind operations", and its NOTES let the new rkey travel before the bind's completion only in a send on the bind's QP: no window is ever advertised on a UD queue pair.
use typed_verbs::access::{self, window};
use typed_verbs::mr::Mr;
use typed_verbs::mw::{Mw, Type1};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS, UD};

fn f(rc: &Qp<RC, RTS>, ud: &Qp<UD, RTS>, mw: Mw<Type1>, mr: &Mr<access::WindowBindable>) {
    let _ = scope(|s| {
        let bind = s.bind_mw(rc, mw, mr, 0, 64, window::READ).unwrap();
        let _ = s.advertise_window(ud, &bind);
    });
}

fn main() {}
