// Memory windows: every allowed combination compiles (type 1 via ibv_bind_mw, rebound while bound, fenced on RC, type 2 via BIND_MW, invalidation paths, windows on memory the caller owns).
use std::time::Duration;
use typed_verbs::access::{self, window};
use typed_verbs::caller::Registered;
use typed_verbs::mr::{Mr, RemoteSlice};
use typed_verbs::mw::{Mw, Type1, Type2, WindowAdvert};
use typed_verbs::qp::Qp;
use typed_verbs::scope::scope;
use typed_verbs::transport::{RC, RTS, UC};
use typed_verbs::wr::{self, BindMw, LocalInv, SendInv};

const T: Duration = Duration::from_secs(1);

fn check(
    rc: &Qp<RC, RTS>,
    uc: &Qp<UC, RTS>,
    mw1: Mw<Type1>,
    mw2: Mw<Type2>,
    host: &Mr<access::WindowBindable>,
    read_host: &Mr<typed_verbs::access::Access<(), (), (), (), access::MwBind>>,
    src: &Mr<access::LocalRead>,
    owned: &Registered<access::WindowBindable, Vec<u8>>,
    more: (Mw<Type1>, Mw<Type2>),
) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        // Type 1: bind (read-only windows on a region without LOCAL_WRITE are fine), unbind.
        let t = s.bind_mw(uc, mw1, read_host, 0, 64, window::READ)?;
        let bound = s.wait(t, T)?.1.map_err(|_| typed_verbs::Error::QpBroken { qp_num: 0 })?;
        // Type 1 bound again while bound, to another region with other rights, then unbound.
        let t = s.rebind_mw(uc, bound, host, 64, 64, window::READ_WRITE)?;
        let _adv = s.advertise_window(uc, &t)?;
        let bound = match s.wait(t, T)?.1 {
            Ok(rebound) => rebound,
            Err(_still_bound_to_read_host) => return Err(typed_verbs::Error::QpBroken { qp_num: 0 }),
        };
        let t = s.unbind_mw(uc, bound)?;
        let mw1 = s.wait(t, T)?.1.map_err(|_| typed_verbs::Error::QpBroken { qp_num: 0 })?;
        // Fenced (RC only): after the RDMA READs and atomics before it.
        let _t = s.bind_mw_fenced(rc, mw1, host, 0, 64, window::READ_WRITE)?;
        // Type 2: zero-based bind, advertise on the same QP, write through it, LOCAL_INV.
        let t = s.post_send(rc, BindMw::new(mw2, host, 0, 4096, window::ALL.zero_based()))?;
        let _adv = s.advertise_window(rc, &t)?;
        if let Ok(bound) = s.wait(t, T)?.1 {
            let remote = bound.remote(0..64)?;
            let _w = s.post_send(rc, wr::Write::new(src.slice(..64)?, remote))?;
            let _inv = s.post_send(rc, SendInv::new(src.slice(..8)?, bound.rkey()))?;
            let _l = s.post_send(rc, LocalInv::new(bound))?;
        }
        // Memory the caller owns hosts windows of both types, as an `Mr` does.
        let _t1 = s.bind_mw(rc, more.0, owned, 0, 64, window::READ_WRITE)?;
        let _t2 = s.post_send(rc, BindMw::new(more.1, owned, 64, 64, window::READ))?;
        let _peer: RemoteSlice<window::ReadWrite> = WindowAdvert::decode(&[0; WindowAdvert::LEN])?.remote()?;
        Ok(())
    })?
}

// A region behind a reference, a `Box` or an `Arc` hosts windows as the region does.
fn through_handles(
    rc: &Qp<RC, RTS>,
    uc: &Qp<UC, RTS>,
    mws: (Mw<Type1>, Mw<Type2>, Mw<Type2>),
    by_ref: &&Mr<access::WindowBindable>,
    boxed: &Box<Mr<access::WindowBindable>>,
    shared: &std::sync::Arc<Mr<access::WindowBindable>>,
) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        let _t1 = s.bind_mw(uc, mws.0, by_ref, 0, 64, window::READ)?;
        let _t2 = s.post_send(rc, BindMw::new(mws.1, boxed, 0, 64, window::READ))?;
        let _t3 = s.post_send(rc, BindMw::new(mws.2, shared, 0, 64, window::READ_WRITE))?;
        Ok(())
    })?
}

fn main() {
    let _ = check;
    let _ = through_handles;
}
