//! On-Demand Paging on the device, as the device reports it.
//!
//! Soft-RoCE's ODP depends on the kernel: Debian 12's 6.12 has none, the 6.18 backport reports
//! ODP on RC (SEND, RECV, WRITE, READ, ATOMIC, SRQ) and UD (SEND, RECV, SRQ), none on UC, no
//! implicit ODP, and its user-space provider (rdma-core 44) has no `ibv_advise_mr`. The
//! README's test command runs this file on both kernels (`scripts/test`). On rxe each test
//! first checks that the device reports exactly what its kernel is known to report
//! ([`rxe_expected`]), then runs the positive path where ODP is reported and asserts the typed
//! refusal where it is not: nothing is skipped, and an ODP kernel that stopped reporting ODP
//! fails here instead of passing on the refusal path.

use typed_verbs::odp::{OdpCap, OdpCaps, OdpOps, OdpTransport, Prefetch, IMPLICIT_MAX_OP};
use typed_verbs::prelude::*;

use crate::common::*;

const MIB: usize = 1 << 20;

/// The running kernel's release as (major, minor), from `/proc/sys/kernel/osrelease`.
fn kernel_release() -> (u32, u32) {
    let s = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("read /proc/sys/kernel/osrelease");
    let mut it = s.trim().split(['.', '-', '+']).map(|p| p.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// What rxe reports for ODP on the kernels the test matrix runs: (general support, implicit,
/// RC, UC, UD, XRC operations).
fn rxe_expected() -> (bool, bool, OdpOps, OdpOps, OdpOps, OdpOps) {
    let none = OdpOps::empty();
    match kernel_release() {
        k if k <= (6, 12) => (false, false, none, none, none, none),
        k if k >= (6, 18) => (
            true,
            false,
            OdpOps::SEND | OdpOps::RECV | OdpOps::WRITE | OdpOps::READ | OdpOps::ATOMIC | OdpOps::SRQ_RECV,
            none,
            OdpOps::SEND | OdpOps::RECV | OdpOps::SRQ_RECV,
            none,
        ),
        k => panic!("no record of what rxe reports for ODP on kernel {k:?}: check it and add it to rxe_expected"),
    }
}

/// The device's capabilities; on rxe, asserted equal to what its kernel is known to report.
pub(crate) fn odp_caps(ctx: &Context) -> OdpCaps {
    let caps = ctx.query_odp().expect("ibv_query_device_ex");
    if is_soft_roce(ctx) {
        let (general, implicit, rc, uc, ud, xrc) = rxe_expected();
        let got = (
            caps.supported(),
            caps.implicit_supported(),
            caps.ops::<RC>(),
            caps.ops::<UC>(),
            caps.ops::<UD>(),
            caps.ops::<XRC_SEND>(),
        );
        assert_eq!(got, (general, implicit, rc, uc, ud, xrc), "rxe on kernel {:?}", kernel_release());
    }
    // The library takes every Soft-RoCE for one that misplaces ODP writes, on every kernel
    // (whatever it reports: on kernels with ODP but before the 6.18 the matrix runs too).
    assert_eq!(caps.writes_land_at_page_starts(), is_soft_roce(ctx), "{caps:?}");
    caps
}

/// ODP on `T` for `ops`: `Some` on a device that reports it; on one that does not, the typed
/// refusal is asserted and `None` returned (the test then ends: it has checked the refusal).
pub(crate) fn odp_cap<T: OdpTransport>(ctx: &Context, ops: OdpOps) -> Option<OdpCap<T>> {
    let caps = odp_caps(ctx);
    let reported = caps.supported() && caps.ops::<T>().contains(ops);
    match caps.check::<T>(ops) {
        Ok(cap) => {
            assert!(reported, "a capability for {ops:?} although the device reports {caps:?}");
            assert_eq!(cap.ops(), ops);
            Some(cap)
        }
        Err(Error::Unsupported { verb, what, source }) => {
            assert!(!reported, "refused although the device reports {caps:?}: {what}");
            assert_eq!(verb.name(), "ibv_query_device_ex");
            assert!(what.contains("On-Demand Paging") && what.contains(T::NAME), "{what}");
            assert!(source.is_none(), "a refusal by the capability value, not by the provider");
            None
        }
        Err(e) => panic!("expected a capability or Error::Unsupported, got {e:?}"),
    }
}

/// A `VmPin` or other `kB` line of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> usize {
    proc_bytes("/proc/self/status", field)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total() -> usize {
    proc_bytes("/proc/meminfo", "MemTotal:")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed)).collect()
}

/// Asserts `got == want`, naming the first differing offset and the number of differing bytes
/// instead of printing both buffers.
#[track_caller]
fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(first) = got.iter().zip(want).position(|(g, w)| g != w) {
        let n = got.iter().zip(want).filter(|(g, w)| g != w).count();
        let end = (first + 16).min(got.len());
        panic!(
            "{what}: {n} of {} bytes differ, the first at offset {first}: got {:?}, want {:?}",
            got.len(),
            &got[first..end],
            &want[first..end]
        );
    }
}

fn read_back<A: typed_verbs::access::AccessSet, K: typed_verbs::mr::MrKind>(
    mr: &Mr<A, K>,
    off: usize,
    len: usize,
) -> Vec<u8> {
    let mut got = vec![0u8; len];
    mr.read_volatile_into(off, &mut got).unwrap();
    got
}

/// rxe's ODP data path (seen on the 6.18 backport; the library assumes it of every rxe)
/// ignores where in a page an access starts: each packet it writes into ODP memory lands at the
/// start of its page, and each packet it reads comes from there
/// (`rxe_odp_places_every_packet_at_its_page_start` shows it exactly). Data is right only for
/// one packet (the path MTU) starting on a page.
fn odp_ignores_page_offsets(ctx: &Context) -> bool {
    is_soft_roce(ctx)
}

/// The geometry of the ODP transfers of the positive-path tests: `(offset, len)` inside a region
/// of [`REGION`] bytes. Where the device places data right, several packets starting inside a
/// page; on a device with [`odp_ignores_page_offsets`], one packet at a page start, the one
/// placement it gets right (its misplacement is asserted by its own test).
fn odp_xfer(ctx: &Context) -> (usize, usize) {
    if odp_ignores_page_offsets(ctx) {
        (4096, 1024)
    } else {
        (4096 + 40, 3 * 4096 + 100)
    }
}

/// The size of the positive-path tests' ODP regions.
const REGION: usize = 64 * 1024;

#[test]
fn odp_capabilities_are_what_the_device_reports() {
    let ctx = open();
    let caps = odp_caps(&ctx);
    // Whatever the device: a capability exists exactly for what is reported.
    for ops in
        [OdpOps::SEND, OdpOps::RECV, OdpOps::WRITE, OdpOps::READ, OdpOps::ATOMIC, OdpOps::SRQ_RECV, OdpOps::all()]
    {
        assert_eq!(caps.check::<RC>(ops).is_ok(), caps.supported() && caps.ops::<RC>().contains(ops));
        assert_eq!(caps.check::<UC>(ops).is_ok(), caps.supported() && caps.ops::<UC>().contains(ops));
        assert_eq!(caps.check::<UD>(ops).is_ok(), caps.supported() && caps.ops::<UD>().contains(ops));
    }
    // Refused on Soft-RoCE whatever it reports (its ODP path could write the zero page).
    assert_eq!(
        caps.check_implicit::<RC>(OdpOps::SEND).is_ok(),
        caps.implicit_supported() && caps.supported() && !is_soft_roce(&ctx)
    );
}

/// UC (rxe reports no UC operation on any kernel), implicit ODP and, on a device with ODP,
/// prefetching: each refusal typed and exact.
#[test]
fn odp_refusals_are_typed() {
    let ctx = open();
    let caps = odp_caps(&ctx);
    if is_soft_roce(&ctx) {
        assert!(odp_cap::<UC>(&ctx, OdpOps::SEND).is_none(), "rxe has no UC ODP");
        assert!(odp_cap::<XRC_SEND>(&ctx, OdpOps::SEND).is_none(), "rxe has no XRC");
    }
    match caps.check_implicit::<RC>(OdpOps::SEND) {
        Ok(_) => assert!(caps.implicit_supported() && !is_soft_roce(&ctx)),
        Err(Error::Unsupported { what, .. }) => {
            assert!(!caps.implicit_supported() || is_soft_roce(&ctx));
            assert!(what.contains("On-Demand Paging"), "{what}");
        }
        Err(e) => panic!("expected Error::Unsupported, got {e:?}"),
    }
    let Some(cap) = odp_cap::<RC>(&ctx, OdpOps::SEND) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr_odp(64 * 1024, access::LOCAL_RW, &cap).unwrap();
    let sync = mr.prefetch_sync(.., Prefetch::Write);
    let best_effort = mr.prefetch(0..4096, Prefetch::Read);
    // An empty range names nothing to prefetch: refused before the provider sees it.
    for r in [mr.prefetch(4..4, Prefetch::Write), mr.prefetch_sync(0..0, Prefetch::Write)] {
        assert!(matches!(&r, Err(Error::InvalidArgument { reason, .. }) if reason.contains("1..=")), "{r:?}");
    }
    if is_soft_roce(&ctx) {
        // The rxe provider has no advise_mr (rdma-core 44): the verb returns EOPNOTSUPP, which
        // both forms report as the device lacking the feature.
        for r in [sync, best_effort] {
            match r {
                Err(e @ Error::Unsupported { .. }) => {
                    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "EOPNOTSUPP: {e}");
                    assert!(e.to_string().contains("ibv_advise_mr"), "{e}");
                }
                other => panic!("expected Error::Unsupported from ibv_advise_mr, got {other:?}"),
            }
        }
    } else {
        sync.expect("synchronous prefetch on a device with ODP");
        best_effort.expect("best-effort prefetch");
    }
    // A refused prefetch changes nothing: the region still registers and deregisters.
    mr.deregister().map_err(|(e, _)| e).expect("ibv_dereg_mr");
}

/// Where the device's ODP path places each packet at its page's start, the library keeps every
/// buffer the device writes or reads starting on a page boundary, so that no misplaced byte
/// leaves it: a receive into a chunk that starts mid-page, an RDMA READ into a view 40 bytes
/// into a page, an atomic result 8 bytes into one and a SEND from a view 40 bytes into one
/// (read from the page's start, it would carry bytes lent elsewhere) are refused before the
/// provider sees them; page-aligned, they are carried.
#[test]
fn odp_buffers_the_device_accesses_start_on_page_boundaries_where_it_misplaces_packets() {
    let ctx = open();
    let ops = OdpOps::SEND | OdpOps::RECV | OdpOps::READ | OdpOps::ATOMIC | OdpOps::SRQ_RECV;
    let Some(cap) = odp_cap::<RC>(&ctx, ops) else { return };
    let caps = odp_caps(&ctx);
    assert_eq!(caps.writes_land_at_page_starts(), odp_ignores_page_offsets(&ctx), "{caps:?}");
    if !caps.writes_land_at_page_starts() {
        return;
    }
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let acc = Access::NONE.remote_read().remote_atomic();
    let p = rc_pair(&pd, &cq, &cq, acc, QpCaps::default());
    let refused = |e: &Error| matches!(e, Error::InvalidArgument { reason, .. } if reason.contains("page boundary"));
    // Receives: the chunk at a page start is accepted, the one mid-page refused (QP and SRQ).
    let mut chunks = pd.alloc_mr_odp(4096, access::LOCAL_RW, &cap).unwrap().into_chunks(2048).unwrap();
    let (second, first) = (chunks.pop().unwrap(), chunks.pop().unwrap());
    let e = p.b.post_recv_owned(wr::Recv::new(second)).map(|_| ()).unwrap_err();
    assert!(refused(&e.error), "{:?}", e.error);
    let second = e.wr.expect("handed back").into_buffer();
    let srq = pd.create_srq(4).unwrap();
    let e = srq.post_recv_owned(wr::Recv::new(second)).map(|_| ()).unwrap_err();
    assert!(refused(&e.error), "{:?}", e.error);
    let token = p.b.post_recv_owned(wr::Recv::new(first)).unwrap();
    // A SEND's source: mid-page refused; at a page start (one packet), carried into the receive
    // at a page start above.
    let mut src = pd.alloc_mr_odp(4096, access::LOCAL_RW, &cap).unwrap();
    src.as_mut_slice()[..1024].fill(0x5a);
    scope(|s| {
        let e = s.post_send(&p.a, wr::Send::new(src.slice(40..1064).unwrap())).map(|_| ()).unwrap_err();
        assert!(refused(&e.error), "{:?}", e.error);
        let t = s.post_send(&p.a, wr::Send::new(src.slice(..1024).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success(), "a page-aligned SEND source");
    })
    .unwrap();
    let (c, first) = token.wait(WAIT).unwrap();
    assert!(c.is_success() && c.byte_len() == 1024, "{c:?}");
    assert_bytes(&first.as_slice()[..1024], &[0x5a; 1024], "the SEND from a page start");
    // The READ destination and the atomic result: mid-page refused.
    let target = pd.alloc_mr(4096, access::REMOTE_RW.remote_atomic()).unwrap();
    let mut local = pd.alloc_mr_odp(8192, access::LOCAL_RW, &cap).unwrap();
    scope(|s| {
        let (page0, page1) = local.slice_mut(..).unwrap().split_at(4096).unwrap();
        let (_, mid) = page0.split_at(40).unwrap();
        let (read_dst, rest) = mid.split_at(1024).unwrap();
        let (word, _) = rest.split_at(8).unwrap();
        let e = s.post_send(&p.a, wr::Read::new(read_dst, target.remote(..1024).unwrap())).map(|_| ()).unwrap_err();
        assert!(refused(&e.error), "{:?}", e.error);
        let e = s.post_send(&p.a, wr::FetchAdd::new(word, target.remote(..8).unwrap(), 1)).map(|_| ()).unwrap_err();
        assert!(refused(&e.error), "{:?}", e.error);
        let (page1, _) = page1.split_at(1024).unwrap();
        let t = s.post_send(&p.a, wr::Read::new(page1, target.remote(..1024).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success(), "a page-aligned READ destination");
    })
    .unwrap();
}

/// Every RC operation rxe reports on ODP memory, through regions whose pages nobody touched
/// before the device did (fresh ODP regions): the device path faults them in.
#[test]
fn rc_odp_memory_carries_send_recv_write_read_and_atomics() {
    let ctx = open();
    let ops = OdpOps::SEND | OdpOps::RECV | OdpOps::WRITE | OdpOps::READ | OdpOps::ATOMIC;
    let Some(cap) = odp_cap::<RC>(&ctx, ops) else { return };
    let (off, len) = odp_xfer(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let acc = Access::NONE.remote_write().remote_read().remote_atomic();
    let p = rc_pair(&pd, &cq, &cq, acc, QpCaps::default());
    let data = pattern(len, 3);
    let mut src = pd.alloc_mr_odp(REGION, access::LOCAL_RW, &cap).unwrap();
    src.as_mut_slice()[off..off + len].copy_from_slice(&data);
    // Never touched by the program: the device's writes are the first touch.
    let mut recv = pd.alloc_mr_odp(REGION, access::LOCAL_RW, &cap).unwrap();
    let target = pd.alloc_mr_odp(REGION, access::REMOTE_RW.remote_atomic(), &cap).unwrap();
    let mut back = pd.alloc_mr_odp(REGION, access::LOCAL_RW, &cap).unwrap();
    let mut result = pd.alloc_mr_odp(3 * 4096, access::LOCAL_RW, &cap).unwrap();
    let range = off..off + len;
    scope(|s| {
        let r = s.post_recv(&p.b, wr::Recv::new(recv.slice_mut(range.clone()).unwrap())).unwrap();
        let t = s.post_send(&p.a, wr::Send::new(src.slice(range.clone()).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let (c, _) = s.wait(r, WAIT).unwrap();
        assert!(c.is_success() && c.byte_len() as usize == len, "{c:?}");
        let t =
            s.post_send(&p.a, wr::Write::new(src.slice(range.clone()).unwrap(), target.remote(range.clone()).unwrap()));
        assert!(s.wait(t.unwrap(), WAIT).unwrap().0.is_success());
        let t = s.post_send(
            &p.b,
            wr::Read::new(back.slice_mut(range.clone()).unwrap(), target.remote(range.clone()).unwrap()),
        );
        let (c, _) = s.wait(t.unwrap(), WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
    })
    .unwrap();
    assert_bytes(&recv.as_slice()[range.clone()], &data, "SEND into untouched ODP memory");
    assert_bytes(&read_back(&target, off, len), &data, "RDMA WRITE into untouched ODP memory");
    assert_bytes(&back.as_slice()[range.clone()], &data, "RDMA READ from ODP into untouched ODP memory");
    // Atomics on an ODP word whose page is present, and on one of an untouched page; results
    // into three untouched pages of ODP memory.
    let word_at = if odp_ignores_page_offsets(&ctx) { 0 } else { 8 };
    let first = u64::from_ne_bytes(data[..8].try_into().unwrap());
    let fresh = pd.alloc_mr_odp(4096, access::REMOTE_RW.remote_atomic(), &cap).unwrap();
    let word_of = |mr: &Mr<_, _>, at: usize| mr.remote(at..at + 8).unwrap();
    scope(|s| {
        let (r0, rest) = result.slice_mut(..).unwrap().split_at(4096).unwrap();
        let (r1, r2) = rest.split_at(4096).unwrap();
        let (r0, r1, r2) = (r0.split_at(8).unwrap().0, r1.split_at(8).unwrap().0, r2.split_at(8).unwrap().0);
        let t = s.post_send(&p.a, wr::FetchAdd::new(r0, word_of(&target, off), 5)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let t = s.post_send(&p.a, wr::CompareSwap::new(r1, word_of(&target, off), first + 5, 77)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let t = s.post_send(&p.a, wr::FetchAdd::new(r2, word_of(&fresh, word_at), 9)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    let word = |b: &[u8]| u64::from_ne_bytes(b[..8].try_into().unwrap());
    let res = result.as_slice();
    assert_eq!((word(res), word(&res[4096..]), word(&res[8192..])), (first, first + 5, 0), "atomic results");
    assert_eq!(word(&read_back(&target, off, 8)), 77, "compare-and-swap landed");
    assert_eq!(word(&read_back(&fresh, word_at, 8)), 9, "fetch-and-add on an untouched page");
}

#[test]
fn ud_odp_memory_carries_send_and_recv() {
    let ctx = open();
    let Some(cap) = odp_cap::<UD>(&ctx, OdpOps::SEND | OdpOps::RECV) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let a = ud_qp(&pd, &cq, QpCaps::default());
    let b = ud_qp(&pd, &cq, QpCaps::default());
    let eb = b.endpoint(PORT, gid_index(), 0).unwrap();
    let ah = pd.create_ah(&AddressVector::global(PORT, eb.gid, gid_index())).unwrap();
    let data = pattern(512, 11);
    let mut src = pd.alloc_mr_odp(512, access::LOCAL_RW, &cap).unwrap();
    src.as_mut_slice().copy_from_slice(&data);
    let mut rbuf = pd.alloc_mr_odp(40 + 512, access::LOCAL_RW, &cap).unwrap();
    scope(|s| {
        let r = s.post_recv(&b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let t = s.post_send(&a, wr::Send::new(src.slice(..).unwrap()).to(&ah, eb.qp_num, QKEY)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let (c, _) = s.wait(r, WAIT).unwrap();
        assert_eq!((c.status(), c.byte_len(), c.src_qp()), (WcStatus::Success, 40 + 512, a.qp_num()), "{c:?}");
    })
    .unwrap();
    if odp_ignores_page_offsets(&ctx) {
        // The payload belongs after the 40-byte GRH; this kernel puts it at the page's start,
        // over the GRH.
        assert_bytes(&rbuf.as_slice()[..512], &data, "UD payload at the page start (rxe ODP quirk)");
    } else {
        assert_bytes(&rbuf.as_slice()[40..], &data, "UD receive after the GRH");
    }
    // The region was verified for UD: an RC QP may not use it. Its first chunk, at the page's
    // start: a chunk inside the page would be refused first, on a device whose ODP packets go
    // to page starts, for its placement.
    let rc = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let rc = rc.to_init(&ConnectedInit::new(PORT, Access::NONE)).unwrap();
    let first = rbuf.into_chunks(64).unwrap().swap_remove(0);
    let e = rc.post_recv_owned(wr::Recv::new(first)).map(|_| ()).unwrap_err();
    assert_invalid(&e.error, "ibv_post_recv", "is used on a RC QP for operation");
}

/// Receives into ODP memory through a shared receive queue, as owned chunks of one ODP region;
/// memory whose capability did not verify SRQ receives is refused before the provider sees it,
/// and so is a QP of another transport than the SRQ's ODP receives were verified for. A QP of
/// another transport attached to the SRQ and destroyed before the receives are posted does not
/// bar them.
#[test]
fn srq_receives_land_in_odp_memory() {
    let ctx = open();
    let Some(cap) = odp_cap::<RC>(&ctx, OdpOps::SEND | OdpOps::RECV | OdpOps::SRQ_RECV) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let srq = pd.create_srq(16).unwrap();
    let r = pd.create_qp::<RC>(&QpConfig::new(&cq).srq(&srq)).unwrap();
    let s = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let (es, er) = (s.endpoint(PORT, gid_index(), 7).unwrap(), r.endpoint(PORT, gid_index(), 9).unwrap());
    let (s, _r) = (connect_rc(s, Access::NONE, &es, &er), connect_rc(r, Access::NONE, &er, &es));
    // A UD QP that took its receives from the SRQ, destroyed: only RC QPs are left attached.
    drop(pd.create_qp::<UD>(&QpConfig::new(&cq).srq(&srq)).unwrap());
    let chunks = pd.alloc_mr_odp(4 * 4096, access::LOCAL_RW, &cap).unwrap().into_chunks(4096).unwrap();
    let tokens: Vec<_> = chunks.into_iter().map(|c| srq.post_recv_owned(wr::Recv::new(c)).unwrap()).collect();
    // Each receive a page; the messages fill it, or on a device with the page-offset quirk
    // take one packet.
    let msg = if odp_ignores_page_offsets(&ctx) { 1024 } else { 4096 };
    let mut src = pd.alloc_mr_odp(4 * 4096, access::LOCAL_RW, &cap).unwrap();
    let data = pattern(4 * 4096, 5);
    src.as_mut_slice().copy_from_slice(&data);
    scope(|sc| {
        for i in 0..4 {
            let t = sc.post_send(&s, wr::Send::new(src.slice(i * 4096..i * 4096 + msg).unwrap())).unwrap();
            assert!(sc.wait(t, WAIT).unwrap().0.is_success());
        }
    })
    .unwrap();
    for (i, t) in tokens.into_iter().enumerate() {
        let (c, chunk) = t.wait(WAIT).map_err(|e| e.error).unwrap();
        assert_eq!((c.status(), c.byte_len() as usize), (WcStatus::Success, msg), "{c:?}");
        let want = &data[i * 4096..i * 4096 + msg];
        assert_bytes(&chunk.as_slice()[..msg], want, &format!("SRQ receive {i}, in order"));
    }
    // Verified for RC receives but not SRQ receives: refused by the library.
    let no_srq = odp_cap::<RC>(&ctx, OdpOps::RECV).expect("RECV is reported with SRQ_RECV");
    let chunk = pd.alloc_mr_odp(4096, access::LOCAL_RW, &no_srq).unwrap().into_chunks(4096).unwrap().pop().unwrap();
    let e = srq.post_recv_owned(wr::Recv::new(chunk)).map(|_| ()).unwrap_err();
    assert!(matches!(&e.error, Error::InvalidArgument { reason, .. } if reason.contains("SRQ_RECV")), "{:?}", e.error);
    assert!(e.wr.is_some(), "the refused receive is handed back");
    // The SRQ holds receives verified for RC: a UD QP may not take its receives from it.
    match pd.create_qp::<UD>(&QpConfig::new(&cq).srq(&srq)) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("On-Demand Paging"), "{reason}"),
        other => panic!("expected Error::InvalidArgument, got {:?}", other.map(|q| q.qp_num())),
    }
}

/// ODP memory is not pinned: a 1 GiB ODP registration leaves `VmPin` where it was, a pinned
/// registration of the same size raises it by the region's size. (Other tests of this process
/// register small regions concurrently, hence the tolerance of a few MiB.)
#[test]
fn an_odp_region_pins_no_memory() {
    let ctx = open();
    let Some(cap) = odp_cap::<RC>(&ctx, OdpOps::WRITE) else { return };
    let pd = ctx.alloc_pd().unwrap();
    const GIB: usize = 1 << 30;
    const SLACK: usize = 64 * MIB;
    let before = status_bytes("VmPin:");
    let odp = pd.alloc_mr_odp(GIB, access::LOCAL_REMOTE_WRITE, &cap).unwrap();
    let with_odp = status_bytes("VmPin:");
    assert!(with_odp < before + SLACK, "VmPin {before} -> {with_odp} bytes for a 1 GiB ODP registration");
    drop(odp);
    let pinned = pd.alloc_mr(GIB, access::REMOTE_RW).unwrap();
    let with_pinned = status_bytes("VmPin:");
    assert!(
        with_pinned + SLACK > before + GIB,
        "VmPin {before} -> {with_pinned} bytes for a 1 GiB pinned registration"
    );
    drop(pinned);
    assert!(status_bytes("VmPin:") < before + SLACK, "deregistration unpins");
}

/// A region larger than the machine's memory: only the pages the device writes exist.
#[test]
fn a_sparse_odp_region_larger_than_memory() {
    let ctx = open();
    let Some(cap) = odp_cap::<RC>(&ctx, OdpOps::WRITE | OdpOps::READ) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE.remote_write().remote_read(), QpCaps::default());
    // rxe's ODP on the 6.18 backport never returns from registering 2 GiB or more (a kernel
    // bug, seen at exactly 2048 MiB; 2047 MiB registers in milliseconds): there the region is
    // just under 2 GiB, and scripts/test gives that VM less memory than that.
    let len =
        if odp_ignores_page_offsets(&ctx) { (2 << 30) - MIB } else { (2 * mem_total()).next_multiple_of(1 << 30) };
    assert!(
        len > mem_total(),
        "{len} bytes are not more than the machine's {} (scripts/test boots the ODP kernel with 1600M)",
        mem_total()
    );
    let rss_before = status_bytes("VmRSS:");
    let sparse = pd.alloc_mr_odp(len, access::REMOTE_RW, &cap).unwrap();
    assert_eq!(sparse.len(), len);
    // A packet at each page start, or where the device places data right, a page's worth
    // across two pages.
    let (shift, n) = if odp_ignores_page_offsets(&ctx) { (0, 1024) } else { (1000, 4096) };
    let mut src = pd.alloc_mr(n, access::LOCAL_RW).unwrap();
    let mut back = pd.alloc_mr(n, access::LOCAL_RW).unwrap();
    let page = |x: usize| x / 4096 * 4096 + shift;
    let offsets = [shift, page(len / 3), page(len / 2 + 12345), len - 4096 + shift - if shift > 0 { 4096 } else { 0 }];
    for (i, &off) in offsets.iter().enumerate() {
        let data = pattern(n, i as u8 + 40);
        src.as_mut_slice().copy_from_slice(&data);
        scope(|s| {
            let t = s
                .post_send(&p.a, wr::Write::new(src.slice(..).unwrap(), sparse.remote(off..off + n).unwrap()))
                .unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
            let t = s
                .post_send(&p.b, wr::Read::new(back.slice_mut(..).unwrap(), sparse.remote(off..off + n).unwrap()))
                .unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        })
        .unwrap();
        assert_bytes(back.as_slice(), &data, &format!("READ back at offset {off}"));
        assert_bytes(&read_back(&sparse, off, n), &data, &format!("the program sees the write at offset {off}"));
    }
    let rss = status_bytes("VmRSS:");
    assert!(rss < rss_before + 256 * MIB, "{len} bytes registered, resident {rss_before} -> {rss}");
}

/// Pages handed back to the kernel after registration (`madvise(MADV_DONTNEED)`): the device
/// no longer sees the old data (the ODP invalidation path), and its next WRITE and READ fault
/// fresh pages in with the right data.
#[test]
fn discarded_odp_pages_fault_back_in_for_write_and_read() {
    let ctx = open();
    let Some(cap) = odp_cap::<RC>(&ctx, OdpOps::WRITE | OdpOps::READ) else { return };
    let (off, len) = odp_xfer(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE.remote_write().remote_read(), QpCaps::default());
    let mut region = pd.alloc_mr_odp(REGION, access::REMOTE_RW, &cap).unwrap();
    let mut src = pd.alloc_mr(len, access::LOCAL_RW).unwrap();
    let mut back = pd.alloc_mr(len, access::LOCAL_RW).unwrap();
    let mut write_then_read = |region: &Mr<_, _>, data: Option<&[u8]>| -> Vec<u8> {
        scope(|s| {
            if let Some(data) = data {
                src.as_mut_slice().copy_from_slice(data);
                let t =
                    s.post_send(&p.a, wr::Write::new(src.slice(..).unwrap(), region.remote(off..off + len).unwrap()));
                assert!(s.wait(t.unwrap(), WAIT).unwrap().0.is_success());
            }
            let t =
                s.post_send(&p.b, wr::Read::new(back.slice_mut(..).unwrap(), region.remote(off..off + len).unwrap()));
            assert!(s.wait(t.unwrap(), WAIT).unwrap().0.is_success());
        })
        .unwrap();
        back.as_slice().to_vec()
    };
    let first = pattern(len, 1);
    assert_bytes(&write_then_read(&region, Some(&first)), &first, "WRITE then READ");
    assert_bytes(&read_back(&region, off, len), &first, "the program sees the WRITE");
    // Everything discarded; then a WRITE (the device faults fresh pages in) and a READ.
    region.discard_pages(..).unwrap();
    let second = pattern(len, 2);
    assert_bytes(&write_then_read(&region, Some(&second)), &second, "WRITE then READ after the discard");
    assert_bytes(&read_back(&region, off, len), &second, "the program sees the WRITE after the discard");
    // Discarded again from the transfer's second page on, or, for a transfer within one page,
    // from that page on: the device's READ sees zeros there (never the old data), the old data
    // before it. Either way the READ covers discarded bytes.
    let cut = if off % 4096 + len <= 4096 { off / 4096 * 4096 } else { (off + 1).next_multiple_of(4096) };
    region.discard_pages(cut..).unwrap();
    let mut expect = second.clone();
    let zeros_from = cut.saturating_sub(off);
    assert!(zeros_from < len, "the READ reaches the discarded pages ({off}..{} from {cut})", off + len);
    expect[zeros_from..].fill(0);
    assert_bytes(&write_then_read(&region, None), &expect, "the device reads the new pages, not the old");
    let mut rest = vec![0u8; REGION - cut];
    region.read_volatile_into(cut, &mut rest).unwrap();
    assert_bytes(&rest, &vec![0u8; REGION - cut], "discarded pages read as zeros");
    // Only whole pages.
    assert_refused(region.discard_pages(1..4097), "madvise", "whole pages of");
    assert_refused(region.discard_pages(0..REGION + 1), "madvise", "is outside the region of");
}

/// The quirk of rxe's ODP data path on the 6.18 backport (a kernel bug): the offset of an
/// access within its page is ignored. Each packet written into ODP memory lands at its page's
/// start and each packet read comes from there, whether the page was touched before or not;
/// pinned memory is not affected (every other test of this suite). On other devices and
/// kernels, the same accesses land where they were aimed.
#[test]
fn rxe_odp_places_every_packet_at_its_page_start() {
    let ctx = open();
    let Some(cap) = odp_cap::<RC>(&ctx, OdpOps::WRITE | OdpOps::READ) else { return };
    let quirk = odp_ignores_page_offsets(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE.remote_write().remote_read(), QpCaps::default());
    let mtu = 1024; // rxe's active MTU on the test network (the RC pair's path MTU).
    let mut src = pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    let mut back = pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    for touched in [false, true] {
        let mut region = pd.alloc_mr_odp(4 * 4096, access::REMOTE_RW, &cap).unwrap();
        let before = if touched { 0xee } else { 0 };
        if touched {
            region.write_volatile_from(0, &[0xee; 4 * 4096]).unwrap();
        }
        // (offset, length, fill): one packet at a page start, then at an offset within it (the
        // same page), one packet 40 bytes into the next page, two packets mid-page in the third.
        let writes = [(0, 64, 0x10u8), (1024, 64, 0x11), (4096 + 40, 64, 0x12), (8192 + 2048, 2048, 0x13)];
        let mut want = vec![before; 4 * 4096];
        for &(off, len, fill) in &writes {
            src.as_mut_slice()[..len].fill(fill);
            scope(|s| {
                let t = s
                    .post_send(&p.a, wr::Write::new(src.slice(..len).unwrap(), region.remote(off..off + len).unwrap()));
                assert!(s.wait(t.unwrap(), WAIT).unwrap().0.is_success());
            })
            .unwrap();
            for start in (off..off + len).step_by(mtu) {
                let n = mtu.min(off + len - start);
                let at = if quirk { start / 4096 * 4096 } else { start };
                want[at..at + n].fill(fill);
            }
        }
        assert_bytes(&read_back(&region, 0, 4 * 4096), &want, &format!("where the WRITEs landed (touched: {touched})"));
        // A READ of the first page: four packets, each from the page start on the quirky kernel.
        scope(|s| {
            let t = s.post_send(&p.b, wr::Read::new(back.slice_mut(..).unwrap(), region.remote(0..4096).unwrap()));
            assert!(s.wait(t.unwrap(), WAIT).unwrap().0.is_success());
        })
        .unwrap();
        let read_want: Vec<u8> = (0..4096).map(|i| if quirk { want[i % mtu] } else { want[i] }).collect();
        assert_bytes(back.as_slice(), &read_want, &format!("what the READ returned (touched: {touched})"));
    }
}

/// The implicit ODP region: where the device reports it, it lends plain memory; elsewhere the
/// capability is refused.
#[test]
fn implicit_odp_region_lends_plain_memory_where_reported() {
    let ctx = open();
    let caps = odp_caps(&ctx);
    let cap = match caps.check_implicit::<RC>(OdpOps::SEND | OdpOps::RECV) {
        Ok(cap) => cap,
        Err(Error::Unsupported { what, .. }) => {
            let reported = caps.implicit_supported() && caps.ops::<RC>().contains(OdpOps::SEND | OdpOps::RECV);
            assert!(!reported || is_soft_roce(&ctx), "{what}");
            assert!(what.contains("On-Demand Paging"), "{what}");
            return;
        }
        Err(e) => panic!("expected a capability or Error::Unsupported, got {e:?}"),
    };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(512).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let implicit = pd.register_implicit_odp(Access::NONE.local_write(), &cap).unwrap();
    let src = vec![7u8; 4096];
    let mut dst = vec![0u8; 4096];
    scope(|s| {
        let r = s.post_recv(&p.b, wr::Recv::new(implicit.buf_mut(&mut dst).unwrap())).unwrap();
        let t = s.post_send(&p.a, wr::Send::new(implicit.buf(&src).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        assert!(s.wait(r, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert_eq!(dst, src);
    let big = vec![0u8; IMPLICIT_MAX_OP + 1];
    // Above the 128 MiB limit.
    assert_refused(implicit.buf(&big), "ImplicitMr::buf", "an operation through the implicit ODP lkey takes 1..=");
    // Two views within the limit each, in one request: the operation is above it.
    let v = implicit.buf(&big[..IMPLICIT_MAX_OP]).unwrap();
    scope(|s| {
        let r = s.post_send(&p.a, wr::Send::new([v, v]));
        assert_refused(
            r.map(drop).map_err(|e| e.error),
            "ibv_post_send",
            "the entries through the implicit ODP lkey total",
        );
    })
    .unwrap();
}
