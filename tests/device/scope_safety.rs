//! The scope's guarantee on a real device: it does not return before the device is done,
//! whatever happened to the tokens.

use std::panic::{catch_unwind, AssertUnwindSafe};

use typed_verbs::prelude::*;

use crate::common::*;

const LEN: usize = 1 << 20;

fn pattern(i: usize) -> u8 {
    (i * 31 % 253) as u8 + 1
}

/// A connected RC pair, a 1 MiB remote-readable region filled with `pattern`, and a local
/// destination for RDMA READs of it (large, so the device is busy for a while after the post).
struct Rig {
    _ctx: Context,
    _pd: Pd,
    _cq: Cq,
    pair: RcPair,
    remote: Mr<access::RemoteReadOnly>,
    local: Mr<access::LocalRw>,
}

fn rig() -> Rig {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let pair = rc_pair(&pd, &cq, &cq, Access::NONE.remote_read(), QpCaps::default());
    let mut remote = pd.alloc_mr(LEN, access::RemoteReadOnly::default()).unwrap();
    for (i, b) in remote.as_mut_slice().iter_mut().enumerate() {
        *b = pattern(i);
    }
    let local = pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    Rig { _ctx: ctx, _pd: pd, _cq: cq, pair, remote, local }
}

#[test]
fn a_forgotten_token_still_drains_before_the_buffer_is_reused() {
    let Rig { pair, remote, mut local, .. } = rig();

    scope(|s| {
        // A 1 MiB RDMA READ: the device writes `local` for a while after the post.
        let t = s.post_send(&pair.a, wr::Read::new(local.slice_mut(..).unwrap(), remote.remote(..).unwrap())).unwrap();
        std::mem::forget(t);
    })
    .unwrap();

    // The scope returned, so the device has finished writing: all the data is there.
    assert_eq!(pair.a.outstanding(), (0, 0));
    let got = local.as_mut_slice();
    assert!(got.iter().enumerate().all(|(i, &b)| b == pattern(i)), "the READ had not landed when the scope returned");
    got.fill(0); // reuse is allowed now
}

#[test]
fn a_panic_inside_the_scope_drains_then_resumes_the_panic() {
    let Rig { pair, remote, mut local, .. } = rig();

    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = scope(|s| {
            let _t =
                s.post_send(&pair.a, wr::Read::new(local.slice_mut(..).unwrap(), remote.remote(..).unwrap())).unwrap();
            panic!("boom with a READ in flight");
        });
    }));
    let msg = r.expect_err("the panic must propagate");
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"boom with a READ in flight"));
    assert_eq!(pair.a.outstanding(), (0, 0));
    assert!(local.as_slice().iter().enumerate().all(|(i, &b)| b == pattern(i)));
}
