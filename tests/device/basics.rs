//! Devices, attributes, GIDs: what ibv_devinfo shows.

use typed_verbs::device::{LinkLayer, PortState};
use typed_verbs::prelude::*;

use crate::common::*;

#[test]
fn the_device_under_test_is_listed() {
    let name = device_name();
    let devs = devices().expect("ibv_get_device_list");
    assert!(devs.iter().any(|d| d.name == name), "{name} not in {devs:?}");
}

#[test]
fn opening_an_unknown_device_names_it() {
    let err = Context::open("no_such_dev9").expect_err("must not open");
    match &err {
        Error::DeviceNotFound { name, available } => {
            assert_eq!(name, "no_such_dev9");
            assert!(available.contains(&device_name()), "{available:?}");
        }
        other => panic!("wrong error: {other:?}"),
    }
    assert!(err.to_string().contains("no_such_dev9"), "{err}");
}

#[test]
fn device_port_and_gid_attributes() {
    let ctx = open();
    let dev = ctx.query_device().expect("ibv_query_device");
    assert!(dev.phys_port_cnt() >= 1);
    assert!(dev.max_qp_wr() > 0 && dev.max_cqe() > 0 && dev.max_mr() > 0, "{dev:?}");
    let port = ctx.query_port(PORT).expect("ibv_query_port");
    assert_eq!(port.state(), PortState::Active, "{port:?}");
    assert!(port.active_mtu().is_some());
    if ctx.device_name().starts_with("rxe") {
        assert_eq!(port.link_layer(), LinkLayer::Ethernet);
        assert_eq!(port.lid(), 0);
    }
    let gid = ctx.query_gid(PORT, gid_index()).expect("ibv_query_gid");
    assert!(!gid.is_zero(), "GID {} at index {} is empty", gid, gid_index());
}

#[test]
fn bad_port_and_gid_index_are_typed_errors() {
    let ctx = open();
    let ports = ctx.query_device().unwrap().phys_port_cnt();
    for bad in [0u8, ports + 1] {
        match ctx.query_port(bad) {
            Err(Error::InvalidArgument { verb, reason }) => {
                assert_eq!(verb, "ibv_query_port");
                assert!(reason.contains(&format!("port {bad}")), "{reason}");
            }
            other => panic!("port {bad}: {other:?}"),
        }
    }
    let len = ctx.query_port(PORT).unwrap().gid_tbl_len();
    match u8::try_from(len) {
        Ok(past_the_end) => assert!(matches!(
            ctx.query_gid(PORT, past_the_end),
            Err(Error::InvalidArgument { verb: "ibv_query_gid", .. })
        )),
        // A table of 256 entries or more (rxe: 1024): every index a `u8` names is in it.
        Err(_) => assert!(ctx.query_gid(PORT, u8::MAX).is_ok(), "index 255 of a table of {len}"),
    }
}

#[test]
fn cq_size_limits_are_checked() {
    let ctx = open();
    let max = ctx.query_device().unwrap().max_cqe();
    assert!(matches!(ctx.create_cq(0), Err(Error::InvalidArgument { verb: "ibv_create_cq", .. })));
    assert!(matches!(ctx.create_cq(max + 1), Err(Error::InvalidArgument { verb: "ibv_create_cq", .. })));
    let cq = ctx.create_cq(16).expect("ibv_create_cq");
    assert!(cq.capacity() >= 16);
}

#[test]
fn memory_registration_with_legal_access_sets() {
    let ctx = open();
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let mut a = pd.alloc_mr(4096, access::LOCAL_RW).expect("LOCAL_WRITE");
    a.as_mut_slice()[..5].copy_from_slice(b"hello");
    assert_eq!(&a.as_slice()[..5], b"hello");
    let b = pd.alloc_mr(8192, access::REMOTE_ALL).expect("REMOTE_ALL");
    assert_eq!(b.len(), 8192);
    assert_eq!(b.addr() % 4096, 0);
    assert_ne!(b.remote(..).unwrap().rkey(), 0);
    pd.alloc_mr(64, access::LOCAL_READ).expect("LOCAL_READ");
    pd.alloc_mr(64, access::REMOTE_READ_ONLY).expect("REMOTE_READ");
    pd.alloc_mr(64, access::FULL).expect("FULL");
    assert!(matches!(pd.alloc_mr(0, access::LOCAL_RW), Err(Error::InvalidArgument { verb: "ibv_reg_mr", .. })));
    b.deregister().map_err(|(e, _)| e).expect("ibv_dereg_mr");
}

/// The suite runs on rxe0 (scripts/softroce-run); the tests that check rxe's behaviour only
/// where `is_soft_roce()` holds (odp.rs, opcodes.rs' TSO, reliability.rs) rely on it holding
/// there. Another device name must set TYPED_VERBS_DEVICE, so the default run is on rxe0.
#[test]
fn the_soft_roce_predicate_holds_on_rxe0() {
    let ctx = open();
    let chosen = std::env::var("TYPED_VERBS_DEVICE").ok();
    if chosen.as_deref().is_none_or(|d| d == "rxe0") {
        assert_eq!(ctx.device_name(), "rxe0", "the suite's device is rxe0 unless TYPED_VERBS_DEVICE says otherwise");
        let attr = ctx.query_device().expect("ibv_query_device");
        assert!(attr.is_soft_roce(), "rxe0 is Soft-RoCE but is_soft_roce() says no: {attr:?}");
    }
    // Whatever the device: the predicate agrees with the device's name (rxe devices are `rxe*`).
    let _ = is_soft_roce(&ctx);
}

/// Raw handles (`typed_verbs::raw`): each is the live C object, the same for every clone and
/// for objects reached through another (a PD's context), distinct per object.
#[test]
fn raw_handles_name_the_live_c_objects() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let qp = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let mr = pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    let srq = pd.create_srq(8).unwrap();
    let gid = qp.endpoint(PORT, gid_index(), 0).unwrap().gid;
    let ah = pd.create_ah(&AddressVector::global(PORT, gid, gid_index())).unwrap();
    let ptrs = [
        ctx.as_raw() as usize,
        pd.as_raw() as usize,
        cq.as_raw() as usize,
        ch.as_raw() as usize,
        qp.as_raw() as usize,
        mr.as_raw() as usize,
        srq.as_raw() as usize,
        ah.as_raw() as usize,
    ];
    assert!(ptrs.iter().all(|&p| p != 0), "{ptrs:x?}");
    let mut distinct = ptrs.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ptrs.len(), "one object per handle: {ptrs:x?}");
    assert_eq!(pd.context().as_raw(), ctx.as_raw());
    assert_eq!(cq.clone().as_raw(), cq.as_raw());
    assert_eq!(srq.clone().as_raw(), srq.as_raw());
    assert_eq!(ch.clone().as_raw(), ch.as_raw());
    assert!(ch.fd() >= 0, "the channel's file descriptor");
}

/// A hugepage-backed region (`Pd::alloc_mr_huge`): its memory is in huge pages (the mapping's
/// `KernelPageSize` in `/proc/self/smaps` is the huge page size), it registers, and an RDMA
/// WRITE and READ through it carry every byte. The test VMs reserve 16 huge pages.
#[test]
fn hugepage_backed_regions_carry_traffic() {
    const LEN: usize = 4 << 20;
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write().remote_read(), QpCaps::default());
    let mut src = r.pd.alloc_mr_huge(LEN, access::LOCAL_RW).expect("huge pages (nr_hugepages in the guest)");
    let target = r.pd.alloc_mr_huge(LEN, access::REMOTE_RW).unwrap();
    let mut back = r.pd.alloc_mr(LEN, access::LOCAL_RW).unwrap();
    // The mapping of `src` is in huge pages.
    let huge = proc_bytes("/proc/meminfo", "Hugepagesize:");
    assert_eq!(kernel_page_size(src.addr()), Some(huge), "the region's mapping is in huge pages");
    fill(&mut src, 77);
    let whole = |from: usize| from..from + LEN / 2;
    scope(|s| {
        let t = s.post_send(&p.a, wr::Write::new(src.slice(whole(0)).unwrap(), target.remote(whole(LEN / 2)).unwrap()));
        assert!(s.wait(t.unwrap(), WAIT).unwrap().0.is_success());
        let t =
            s.post_send(&p.b, wr::Read::new(back.slice_mut(whole(0)).unwrap(), target.remote(whole(LEN / 2)).unwrap()));
        assert!(s.wait(t.unwrap(), WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert!(back.as_slice()[..LEN / 2] == src.as_slice()[..LEN / 2], "every byte through huge pages");
    let mut landed = vec![0u8; LEN / 2];
    target.read_volatile_into(LEN / 2, &mut landed).unwrap();
    assert!(landed == src.as_slice()[..LEN / 2]);
    assert_refused(r.pd.alloc_mr_huge(0, access::LOCAL_RW), "ibv_reg_mr", "a memory region needs at least one byte");
}
