//! On-Demand Paging on the device. Soft-RoCE has none: the capability query says so for every
//! transport and the capability values that ODP registration and prefetch require cannot be
//! obtained. The positive path runs on devices that report ODP (`--ignored`), and fails there
//! rather than skipping when the device lacks ODP.

use typed_verbs::odp::{OdpOps, Prefetch, IMPLICIT_MAX_OP};
use typed_verbs::prelude::*;

use crate::common::*;

#[test]
fn odp_capabilities_are_what_the_device_reports() {
    let ctx = open();
    let caps = ctx.query_odp().expect("ibv_query_device_ex");
    let all = OdpOps::all();
    let per = [caps.ops::<RC>(), caps.ops::<UC>(), caps.ops::<UD>(), caps.ops::<XRC_SEND>()];
    if is_soft_roce(&ctx) {
        // rxe (6.12): no ODP at all.
        assert!(!caps.supported() && !caps.implicit_supported(), "{caps:?}");
        assert!(per.iter().all(|o| o.is_empty()), "{per:?}");
    }
    // Whatever the device: a capability exists exactly for what is reported.
    for ops in [OdpOps::SEND, OdpOps::RECV, OdpOps::WRITE, OdpOps::READ, OdpOps::ATOMIC, all] {
        assert_eq!(caps.check::<RC>(ops).is_ok(), caps.supported() && caps.ops::<RC>().contains(ops));
        assert_eq!(caps.check::<UD>(ops).is_ok(), caps.supported() && caps.ops::<UD>().contains(ops));
    }
}

#[test]
fn without_odp_registration_is_refused_at_the_capability_query() {
    let ctx = open();
    let caps = ctx.query_odp().unwrap();
    if caps.supported() {
        panic!("this test covers devices without ODP; {} reports {caps:?}", ctx.device_name());
    }
    for r in [caps.check::<RC>(OdpOps::SEND).map(|_| ()), caps.check::<UD>(OdpOps::RECV).map(|_| ())] {
        match r {
            Err(Error::Unsupported { what, .. }) => assert!(what.contains("On-Demand Paging"), "{what}"),
            other => panic!("expected Error::Unsupported, got {other:?}"),
        }
    }
    assert!(matches!(caps.check_implicit::<RC>(OdpOps::SEND), Err(Error::Unsupported { .. })));
    // Without a capability value neither `alloc_mr_odp`, `register_implicit_odp` nor prefetch
    // can be called (compile-time: ui-tests/fail/odp).
}

fn odp_rig() -> (Context, Pd, Cq, RcPair, typed_verbs::odp::OdpCap<RC>) {
    let ctx = open();
    let caps = ctx.query_odp().unwrap();
    let cap = caps
        .check::<RC>(OdpOps::SEND | OdpOps::RECV | OdpOps::WRITE | OdpOps::READ)
        .unwrap_or_else(|e| panic!("this test needs a device with ODP on RC: {e}"));
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let p = rc_pair(&pd, &cq, &cq, QpAccess::REMOTE_WRITE | QpAccess::REMOTE_READ, QpCaps::default());
    (ctx, pd, cq, p, cap)
}

#[test]
#[ignore = "needs a device that reports ODP on RC; run with --ignored on such a device (fails on one without)"]
fn explicit_odp_region_carries_traffic_and_prefetches() {
    let (_ctx, pd, _cq, p, cap) = odp_rig();
    let mut src = pd.alloc_mr_odp(1 << 20, access::LOCAL_RW, &cap).unwrap();
    src.as_mut_slice().fill(0x5a);
    src.prefetch_sync(.., Prefetch::Read).expect("synchronous prefetch");
    src.prefetch(0..4096, Prefetch::Write).expect("best-effort prefetch");
    let dst = pd.alloc_mr_odp(1 << 20, access::REMOTE_RW, &cap).unwrap();
    scope(|s| {
        let t = s.post_send(&p.a, Write::new(src.slice(..).unwrap(), dst.remote(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    let mut got = vec![0u8; 1 << 20];
    dst.read_volatile_into(0, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0x5a));
}

#[test]
#[ignore = "needs a device that reports implicit ODP; run with --ignored on such a device (fails on one without)"]
fn implicit_odp_region_lends_plain_memory() {
    let (ctx, pd, _cq, p, _) = odp_rig();
    let cap = ctx.query_odp().unwrap().check_implicit::<RC>(OdpOps::SEND | OdpOps::RECV).expect("implicit ODP");
    let implicit = pd.register_implicit_odp(Access::NONE.local_write(), &cap).unwrap();
    let src = vec![7u8; 4096];
    let mut dst = vec![0u8; 4096];
    implicit.prefetch_sync(&src, Prefetch::Read).unwrap();
    scope(|s| {
        let r = s.post_recv(&p.b, Recv::new(implicit.buf_mut(&mut dst).unwrap())).unwrap();
        let t = s.post_send(&p.a, Send::new(implicit.buf(&src).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        assert!(s.wait(r, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert_eq!(dst, src);
    let big = vec![0u8; IMPLICIT_MAX_OP + 1];
    assert!(matches!(implicit.buf(&big), Err(Error::InvalidArgument { .. })), "above the 128 MiB limit");
}
