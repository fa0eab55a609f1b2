//! Attacks on scatter/gather lists (src/sgl.rs), the RAW_PACKET requests (TSO and
//! `IBV_SEND_IP_CSUM`, src/wr.rs) and On-Demand Paging prefetch (src/odp.rs) over the fake
//! device of `async_races`.
//!
//! What each test looks at: a list the verbs refuse (more entries than the queue takes, more
//! than `u32::MAX` bytes in all, entries of two PDs, ODP entries whose operation or transport
//! was not verified) is refused with a typed error before the (fake) provider sees it, on every
//! path that posts it; a list the library accepts reaches the provider entry for entry, its
//! empty entries left out; a prefetch reaches the provider only for a range of its region and
//! an advice the region allows.

use super::*;
use crate::mr::{Mr, Odp};
use crate::odp::{ImplicitMr, OdpOps, Prefetch};
use crate::srq::Srq;
use crate::transport::RAW_PACKET;
use crate::wr::{FetchAdd, InlineSend, Send as WrSend, Tso};
use crate::Error;

// ---------------------------------------------------------------------------------------------
// A provider that records every request as it sees it.
// ---------------------------------------------------------------------------------------------

/// One send request as the provider saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SeenSend {
    opcode: u32,
    flags: u32,
    /// `(addr, length, lkey)` of each entry of `sg_list[..num_sge]`.
    sges: Vec<(u64, u32, u32)>,
    /// `(hdr, hdr_sz, mss)` of a TSO request.
    tso: Option<(usize, u16, u16)>,
}

/// What the recording provider saw, by the address of the `ibv_qp` (sends, receives).
type Seen = (usize, Vec<SeenSend>, Vec<Vec<(u64, u32, u32)>>);
static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

fn with_seen<R>(qp: usize, f: impl FnOnce(&mut Vec<SeenSend>, &mut Vec<Vec<(u64, u32, u32)>>) -> R) -> R {
    let mut all = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let i = match all.iter().position(|(a, _, _)| *a == qp) {
        Some(i) => i,
        None => {
            all.push((qp, Vec::new(), Vec::new()));
            all.len() - 1
        }
    };
    let (_, sends, recvs) = &mut all[i];
    f(sends, recvs)
}

/// The entries of a request.
///
/// # Safety
/// `sg` points at `n` valid entries (or `n` is 0).
unsafe fn entries(sg: *const sys::ibv_sge, n: i32) -> Vec<(u64, u32, u32)> {
    (0..n.max(0) as usize)
        .map(|i| {
            // SAFETY: the caller's `n` entries.
            let e = unsafe { *sg.add(i) };
            (e.addr, e.length, e.lkey)
        })
        .collect()
}

/// The recording provider's `ibv_post_send`: takes every request of the list.
///
/// # Safety
/// As `ibv_post_send` is called: `wr` starts a valid list.
unsafe extern "C" fn record_send(
    qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_send_wr,
    _bad: *mut *mut sys::ibv_send_wr,
) -> i32 {
    let mut p = wr;
    while !p.is_null() {
        // SAFETY: a request of the caller's valid list, its entries valid for the call.
        let (seen, next) = unsafe {
            let w = &*p;
            let tso = (w.opcode == sys::IBV_WR_TSO).then(|| {
                let t = w.__bindgen_anon_2.tso;
                (t.hdr as usize, t.hdr_sz, t.mss)
            });
            (SeenSend { opcode: w.opcode, flags: w.send_flags, sges: entries(w.sg_list, w.num_sge), tso }, w.next)
        };
        with_seen(qp as usize, |s, _| s.push(seen));
        p = next;
    }
    0
}

/// The recording provider's `ibv_post_recv` of one receive: takes it.
///
/// # Safety
/// As `ibv_post_recv` is called with one request.
unsafe extern "C" fn record_recv(
    qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_recv_wr,
    _bad: *mut *mut sys::ibv_recv_wr,
) -> i32 {
    // SAFETY: the caller's valid request and its entries.
    let sges = unsafe { entries((*wr).sg_list, (*wr).num_sge) };
    with_seen(qp as usize, |_, r| r.push(sges));
    0
}

/// A QP in RTS of transport `T` over the recording provider (4 entries per request each way,
/// 64 bytes inline), with its shared part; never destroyed.
fn recording_qp<T: crate::transport::Transport>(
    w: &'static World,
    qp_num: u32,
    cq: &Arc<CqShared>,
) -> (Qp<T, RTS>, Arc<QpShared>) {
    let raw = w.raw_qp(qp_num);
    let shared = QpShared::try_fake_with_posts(raw, qp_num, 64, cq, Arc::clone(&w.pd), None, record_send, record_recv)
        .expect("fake attach");
    std::mem::forget(Arc::clone(&shared));
    (Qp::from_fake(Arc::clone(&shared)), shared)
}

fn seen_sends(qp: &QpShared) -> Vec<SeenSend> {
    with_seen(qp.as_ptr() as usize, |s, _| s.clone())
}

fn seen_recvs(qp: &QpShared) -> Vec<Vec<(u64, u32, u32)>> {
    with_seen(qp.as_ptr() as usize, |_, r| r.clone())
}

/// `e` is `TooManySges` of `n` entries over `max`.
#[track_caller]
fn too_many(e: &Error, n: u32, max: u32) {
    assert!(matches!(e, Error::TooManySges { n: got, max: m, .. } if *got == n && *m == max), "{e:?}");
}

fn sink(w: &World, addr: u64, len: u32, odp: OdpTag) -> LocalBufMut<'static> {
    LocalBufMut::from_parts(addr, len, 7, odp, w.pd.id())
}

fn source(w: &World, addr: u64, len: u32) -> LocalBuf<'static> {
    LocalBuf::from_parts(addr, len, 7, OdpTag::default(), w.pd.id())
}

// ---------------------------------------------------------------------------------------------
// Entry counts and empty entries.
// ---------------------------------------------------------------------------------------------

/// A gather list of five non-empty entries on a send queue of `max_send_sge` 4 is refused with
/// `TooManySges` on the scope, owned and lane paths, the provider never called; five entries
/// one of which is empty are four entries: posted, the provider sees exactly the four in order,
/// none of zero bytes.
#[test]
fn gather_lists_above_max_send_sge_are_refused_and_empty_entries_do_not_count() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = recording_qp::<RC>(w, 0xc01, &cq);
    let five = |empty_at: Option<usize>| {
        let mut a = [0u64; 5].map(|_| source(w, 0, 0));
        for (i, v) in a.iter_mut().enumerate() {
            *v = source(w, 0x10000 + 0x100 * i as u64, if Some(i) == empty_at { 0 } else { 16 });
        }
        a
    };
    let r = scope(|s| {
        let e = s.post_send(&qp, WrSend::new(five(None))).map(drop).expect_err("5 > 4");
        too_many(&e.error, 5, 4);
        assert_eq!(e.wr.expect("handed back").into_buffers(crate::scope::INTERNAL).len(), 5);
        let e = s.post_send(&qp, Write::new(five(None), remote())).map(drop).expect_err("5 > 4");
        too_many(&e.error, 5, 4);
        assert!(seen_sends(&shared).is_empty(), "the provider saw none of them");
        let t = s.post_send(&qp, WrSend::new(five(Some(2)))).expect("four entries");
        let seen = seen_sends(&shared);
        assert_eq!(seen.len(), 1);
        let want: Vec<_> = [0u64, 1, 3, 4].iter().map(|&i| (0x10000 + 0x100 * i, 16, 7)).collect();
        assert_eq!(seen[0].sges, want, "the empty entry is left out, the rest in order");
        fake.complete(wc_of(0xc01, 0, sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND));
        let (c, back) = s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("completes");
        assert!(c.is_success());
        assert_eq!(back[2].len(), 0, "the list comes back as it went in, the empty entry included");
    });
    r.expect("scope");
    let e = qp.post_send_owned(WrSend::new(five(None))).map(drop).expect_err("owned: 5 > 4");
    too_many(&e.error, 5, 4);
    let r = scope(|s| {
        let lane = s.send_lane(&mut qp).expect("lane");
        let e = lane.prepare(WrSend::new(five(None))).map(drop).expect_err("lane: 5 > 4");
        too_many(&e.error, 5, 4);
    });
    r.expect("scope");
    assert_eq!(seen_sends(&shared).len(), 1, "only the list of four entries reached the provider");
}

/// A scatter list of five non-empty entries on a receive queue of `max_recv_sge` 4 is refused on
/// the scope, owned and lane paths; a list of empty entries around one of 8 bytes reaches the
/// provider as one entry, and a list of empty entries only as none.
#[test]
fn scatter_lists_above_max_recv_sge_are_refused_and_empty_entries_never_reach_the_provider() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = recording_qp::<RC>(w, 0xc02, &cq);
    let odp = OdpTag::default();
    let five = || [0u64, 1, 2, 3, 4].map(|i| sink(w, 0x20000 + 0x100 * i, 16, odp));
    let r = scope(|s| {
        let e = s.post_recv(&qp, Recv::new(five())).map(drop).expect_err("5 > 4");
        too_many(&e.error, 5, 4);
        let e = s.post_send(&qp, Read::new(five(), remote())).map(drop).expect_err("an RDMA READ of 5 > 4");
        too_many(&e.error, 5, 4);
        assert!(seen_recvs(&shared).is_empty() && seen_sends(&shared).is_empty());
        let list = (sink(w, 0x30000, 0, odp), sink(w, 0x31000, 8, odp), sink(w, 0x32000, 0, odp));
        let t = s.post_recv(&qp, Recv::new(list)).expect("one entry");
        assert_eq!(seen_recvs(&shared), [vec![(0x31000, 8, 7)]]);
        let none = [sink(w, 0x33000, 0, odp), sink(w, 0x34000, 0, odp)];
        let t2 = s.post_recv(&qp, Recv::new(none)).expect("no entry");
        assert_eq!(seen_recvs(&shared)[1], Vec::<(u64, u32, u32)>::new(), "num_sge 0");
        fake.complete(recv_wc(0xc02, 0, sys::IBV_WC_SUCCESS));
        fake.complete(recv_wc(0xc02, 1, sys::IBV_WC_SUCCESS));
        assert!(s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("completes").0.is_success());
        assert!(s.wait(t2, Duration::from_secs(1)).map_err(|e| e.error).expect("completes").0.is_success());
    });
    r.expect("scope");
    let e = qp.post_recv_owned(Recv::new(five())).map(drop).expect_err("owned: 5 > 4");
    too_many(&e.error, 5, 4);
    let r = scope(|s| {
        let lane = s.recv_lane(&mut qp).expect("lane");
        let e = lane.prepare(Recv::new(five())).map(drop).expect_err("lane: 5 > 4");
        too_many(&e.error, 5, 4);
    });
    r.expect("scope");
    assert_eq!(seen_recvs(&shared).len(), 2);
}

/// Inline pieces count as entries: five non-empty pieces on a send queue of `max_send_sge` 4
/// are refused (`TooManySges`), five with one empty are posted as four entries with
/// `IBV_SEND_INLINE` and no lkey; more than `max_inline_data` bytes in all is `InlineTooLarge`,
/// whatever the number of pieces. The provider sees only the request it took.
#[test]
fn inline_gathers_keep_to_max_send_sge_and_max_inline_data() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = recording_qp::<RC>(w, 0xc03, &cq);
    let bytes = [7u8; 64];
    let r = scope(|s| {
        let one = &bytes[..1];
        let e = s.post_inline(&qp, InlineSend::gather([one; 5])).map(drop).expect_err("5 pieces > 4 entries");
        too_many(&e.error, 5, 4);
        let e = s.post_inline(&qp, InlineSend::gather([&bytes[..33], &bytes[..32]])).map(drop).expect_err("65 > 64");
        assert!(matches!(e.error, Error::InlineTooLarge { len: 65, max: 64, .. }), "{:?}", e.error);
        assert!(seen_sends(&shared).is_empty(), "the provider saw neither");
        let t = s.post_inline(&qp, InlineSend::gather([one, one, &bytes[..0], one, one])).expect("four entries");
        let seen = &seen_sends(&shared)[0];
        assert_eq!(seen.flags & sys::IBV_SEND_INLINE, sys::IBV_SEND_INLINE);
        assert_eq!(seen.sges.len(), 4);
        assert!(seen.sges.iter().all(|&(a, l, k)| a == one.as_ptr() as u64 && l == 1 && k == 0));
        fake.complete(wc_of(0xc03, 0, sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND));
        assert!(s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("completes").0.is_success());
    });
    r.expect("scope");
}

// ---------------------------------------------------------------------------------------------
// Lengths summed past u32::MAX.
// ---------------------------------------------------------------------------------------------

/// One message moves at most `u32::MAX` bytes (the provider sums the entries in 32 bits): a
/// SEND, an RDMA WRITE, an RDMA READ, a receive, a RAW_PACKET TSO (by its `max_tso`, at most
/// `u32::MAX`) and an SRQ receive whose entries total `u32::MAX + 1` bytes are refused with
/// `InvalidArgument` before the provider; exactly `u32::MAX` bytes in all are taken.
#[test]
fn lists_totalling_more_than_u32_max_bytes_are_refused_on_every_opcode() {
    let w = World::new();
    // SAFETY: the world's context is leaked and this test's own; the inline
    // `ibv_post_srq_recv` reads `srq->context->ops.post_srq_recv`.
    unsafe { (*w.ctxp).ops.post_srq_recv = Some(record_srq_recv) };
    let (cq, fake) = w.cq();
    let (qp, shared) = recording_qp::<RC>(w, 0xc04, &cq);
    let (raw_qp, raw_shared) = recording_qp::<RAW_PACKET>(w, 0xc05, &cq);
    let big = RemoteSlice::<RemoteAll>::new(0x1_0000_0000, 1 << 40, 0x55);
    let odp = OdpTag::default();
    let over = || [sink(w, 0x1000, u32::MAX, odp), sink(w, 0x2_0000_0000, 1, odp)];
    let exact = || [sink(w, 0x1000, u32::MAX - 1, odp), sink(w, 0x2_0000_0000, 1, odp)];
    let cap = crate::device::TsoCap::<RAW_PACKET>::reported(u32::MAX, w.ctx.id);
    let hdr = [0u8; 54];
    let r = scope(|s| {
        let e = s.post_send(&qp, WrSend::new(over())).map(drop).expect_err("SEND");
        invalid(&e.error, "ibv_post_send", "u32::MAX");
        let e = s.post_send(&qp, Write::new(over(), big)).map(drop).expect_err("WRITE");
        invalid(&e.error, "ibv_post_send", "u32::MAX");
        let e = s.post_send(&qp, Read::new(over(), big)).map(drop).expect_err("READ");
        invalid(&e.error, "ibv_post_send", "u32::MAX");
        let e = s.post_recv(&qp, Recv::new(over())).map(drop).expect_err("RECV");
        invalid(&e.error, "ibv_post_recv", "u32::MAX");
        // A TSO payload is bounded by `max_tso`, itself a u32.
        let e = s.post_send(&raw_qp, Tso::new(over(), &hdr, 1460, cap)).map(drop).expect_err("TSO");
        invalid(&e.error, "ibv_post_send (TSO)", "max_tso 4294967295");
        assert!(seen_sends(&shared).is_empty() && seen_recvs(&shared).is_empty() && seen_sends(&raw_shared).is_empty());
        let t = s.post_send(&qp, WrSend::new(exact())).expect("u32::MAX bytes in all");
        let seen = seen_sends(&shared);
        assert_eq!(seen[0].sges.iter().map(|e| u64::from(e.1)).sum::<u64>(), u64::from(u32::MAX));
        fake.complete(wc_of(0xc04, 0, sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND));
        assert!(s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("completes").0.is_success());
    });
    r.expect("scope");
    let srq = w.srq(8);
    let handle = Srq { shared: Arc::clone(&srq) };
    let e = handle.post_recv_owned(Recv::new(over())).map(drop).expect_err("SRQ");
    invalid(&e.error, "ibv_post_srq_recv", "u32::MAX");
    assert_eq!(srq_recvs(&srq), 0, "the provider saw no SRQ receive");
}

static SRQ_SEEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The recording provider's `ibv_post_srq_recv`: takes the receive, notes the SRQ.
///
/// # Safety
/// As `ibv_post_srq_recv` is called.
unsafe extern "C" fn record_srq_recv(
    srq: *mut sys::ibv_srq,
    _wr: *mut sys::ibv_recv_wr,
    _bad: *mut *mut sys::ibv_recv_wr,
) -> i32 {
    SRQ_SEEN.lock().unwrap_or_else(|e| e.into_inner()).push(srq as usize);
    0
}

fn srq_recvs(srq: &Arc<SrqShared>) -> usize {
    let me = Srq { shared: Arc::clone(srq) }.as_ptr() as usize;
    SRQ_SEEN.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|&&s| s == me).count()
}

// ---------------------------------------------------------------------------------------------
// RAW_PACKET: TSO and checksum offload.
// ---------------------------------------------------------------------------------------------

/// TSO on RAW_PACKET: the payload list is checked as every list (entries, PDs), then against
/// `max_tso` (summed over the entries) and a non-zero `mss`; the request the provider takes
/// carries the header's own address and length and the list's non-empty entries. A capability
/// of another device context is refused. `IBV_SEND_IP_CSUM` reaches the provider only through
/// an `IpCsum` of the QP's context.
#[test]
fn raw_packet_tso_and_checksum_requests_reach_the_provider_only_as_checked() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = recording_qp::<RAW_PACKET>(w, 0xc06, &cq);
    let cap = crate::device::TsoCap::<RAW_PACKET>::reported(4096, w.ctx.id);
    let foreign = crate::device::TsoCap::<RAW_PACKET>::reported(4096, w.ctx.id + 1);
    let hdr = [0u8; 54];
    let r = scope(|s| {
        let payload = || [source(w, 0x1000, 2048), source(w, 0x2000, 0), source(w, 0x3000, 2048)];
        let e = s.post_send(&qp, Tso::new([source(w, 0x1000, 2048), source(w, 0x3000, 2049)], &hdr, 1460, cap));
        invalid(&e.map(drop).expect_err("4097 > max_tso").error, "ibv_post_send (TSO)", "max_tso 4096");
        let e = s.post_send(&qp, Tso::new(payload(), &hdr, 0, cap)).map(drop).expect_err("mss 0");
        invalid(&e.error, "ibv_post_send (TSO)", "mss 0");
        let e = s.post_send(&qp, Tso::new(payload(), &hdr, 1460, foreign)).map(drop).expect_err("other context");
        invalid(&e.error, "ibv_post_send", "another device context");
        let five = [0u64, 1, 2, 3, 4].map(|i| source(w, 0x1000 * (i + 1), 8));
        let e = s.post_send(&qp, Tso::new(five, &hdr, 1460, cap)).map(drop).expect_err("5 > 4 entries");
        too_many(&e.error, 5, 4);
        assert!(seen_sends(&shared).is_empty(), "the provider saw none of them");
        let t = s.post_send(&qp, Tso::new(payload(), &hdr, 1460, cap)).expect("4096 bytes");
        let seen = seen_sends(&shared);
        assert_eq!(seen[0].opcode, sys::IBV_WR_TSO);
        assert_eq!(seen[0].tso, Some((hdr.as_ptr() as usize, 54, 1460)));
        assert_eq!(seen[0].sges, [(0x1000, 2048, 7), (0x3000, 2048, 7)]);
        let csum = crate::device::IpCsum::<RAW_PACKET>::of_context(w.ctx.id);
        let t2 = s.post_send(&qp, WrSend::new(source(w, 0x5000, 60)).ip_csum(csum)).expect("checksummed");
        assert_eq!(seen_sends(&shared)[1].flags & sys::IBV_SEND_IP_CSUM, sys::IBV_SEND_IP_CSUM);
        let other = crate::device::IpCsum::<RAW_PACKET>::of_context(w.ctx.id + 1);
        let e = s.post_send(&qp, WrSend::new(source(w, 0x5000, 60)).ip_csum(other)).map(drop).expect_err("other");
        invalid(&e.error, "ibv_post_send", "another device context");
        // Each capability of a checksummed TSO is checked: the checksum's own, the TSO's foreign.
        let e = s.post_send(&qp, Tso::new(payload(), &hdr, 1460, foreign).ip_csum(csum)).map(drop).expect_err("TSO's");
        invalid(&e.error, "ibv_post_send", "another device context");
        let e = s.post_send(&qp, Tso::new(payload(), &hdr, 1460, cap).ip_csum(other)).map(drop).expect_err("csum's");
        invalid(&e.error, "ibv_post_send", "another device context");
        assert_eq!(seen_sends(&shared).len(), 2);
        fake.complete(wc_of(0xc06, 0, sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND));
        fake.complete(wc_of(0xc06, 1, sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND));
        assert!(s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("completes").0.is_success());
        assert!(s.wait(t2, Duration::from_secs(1)).map_err(|e| e.error).expect("completes").0.is_success());
    });
    r.expect("scope");
}

// ---------------------------------------------------------------------------------------------
// ODP entries mixed with pinned ones.
// ---------------------------------------------------------------------------------------------

/// A receive list whose pinned entries surround an ODP entry verified for SEND only on RC is
/// refused on RC (RECV not verified) on the scope, owned and lane paths; one verified for RECV
/// on UD is refused on RC; the same list verified for RECV on RC is posted whole. An atomic
/// result in ODP memory needs ATOMIC verified. Nothing refused reaches the provider.
#[test]
fn odp_entries_among_pinned_ones_keep_their_verification_on_every_receive_path() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = recording_qp::<RC>(w, 0xc07, &cq);
    let page = crate::mr::page_size() as u64;
    let (rc, ud) = (sys::IBV_QPT_RC, sys::IBV_QPT_UD);
    let pinned = OdpTag::default();
    let list = |tag: OdpTag| (sink(w, 0x10, 8, pinned), sink(w, 4 * page, 8, tag), sink(w, 0x20, 8, pinned));
    let send_only = OdpTag::verified(rc, sys::IBV_ODP_SUPPORT_SEND, true);
    let recv_on_ud = OdpTag::verified(ud, sys::IBV_ODP_SUPPORT_RECV, true);
    let recv_on_rc = OdpTag::verified(rc, sys::IBV_ODP_SUPPORT_RECV, true);
    let r = scope(|s| {
        for tag in [send_only, recv_on_ud] {
            let e = s.post_recv(&qp, Recv::new(list(tag))).map(drop).expect_err("not verified");
            invalid(&e.error, "ibv_post_recv", "was not verified");
        }
        let e = s.post_send(&qp, FetchAdd::new(sink(w, 4 * page, 8, recv_on_rc), remote(), 1)).map(drop);
        invalid(&e.expect_err("ATOMIC not verified").error, "ibv_post_send", "was not verified");
        assert!(seen_recvs(&shared).is_empty() && seen_sends(&shared).is_empty());
        let t = s.post_recv(&qp, Recv::new(list(recv_on_rc))).expect("verified");
        assert_eq!(seen_recvs(&shared)[0], [(0x10, 8, 7), (4 * page, 8, 7), (0x20, 8, 7)]);
        fake.complete(recv_wc(0xc07, 0, sys::IBV_WC_SUCCESS));
        assert!(s.wait(t, Duration::from_secs(1)).map_err(|e| e.error).expect("completes").0.is_success());
    });
    r.expect("scope");
    let e = qp.post_recv_owned(Recv::new(list(send_only))).map(drop).expect_err("owned");
    invalid(&e.error, "ibv_post_recv", "was not verified");
    let r = scope(|s| {
        let lane = s.recv_lane(&mut qp).expect("lane");
        let e = lane.prepare(Recv::new(list(recv_on_ud))).map(drop).expect_err("lane");
        invalid(&e.error, "ibv_post_recv", "was not verified");
    });
    r.expect("scope");
    assert_eq!(seen_recvs(&shared).len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Prefetch (ibv_advise_mr).
// ---------------------------------------------------------------------------------------------

/// One `ibv_advise_mr` call as the provider saw it: advice, flags, `(addr, length, lkey)` of
/// each entry.
type Advice = (u32, u32, Vec<(u64, u32, u32)>);
/// The calls, by PD, and what the provider answers them with (0 unless told).
static ADVISED: Mutex<Vec<(usize, Advice)>> = Mutex::new(Vec::new());
static ADVISE_ANSWER: Mutex<Vec<(usize, i32)>> = Mutex::new(Vec::new());

/// The fake provider's `advise_mr` (a `verbs_context` operation, with its signature).
///
/// # Safety
/// As `ibv_advise_mr` calls it: `sg` points at `n` valid entries.
unsafe extern "C" fn record_advise(
    pd: *mut sys::ibv_pd,
    advice: sys::ib_uverbs_advise_mr_advice,
    flags: u32,
    sg: *mut sys::ibv_sge,
    n: u32,
) -> i32 {
    // SAFETY: the caller's `n` entries.
    let sges = unsafe { entries(sg, n as i32) };
    ADVISED.lock().unwrap_or_else(|e| e.into_inner()).push((pd as usize, (advice, flags, sges)));
    let answers = ADVISE_ANSWER.lock().unwrap_or_else(|e| e.into_inner());
    answers.iter().find(|(p, _)| *p == pd as usize).map_or(0, |&(_, a)| a)
}

/// A world whose context has the extended operations `ibv_advise_mr` looks for, its
/// `advise_mr` [`record_advise`].
fn advising_world() -> &'static World {
    let w = World::new();
    // SAFETY: the world's `ibv_context` is the `context` member (the last) of a leaked,
    // zeroed `verbs_context` of this test's own; the inline `ibv_advise_mr` finds `advise_mr`
    // there once `abi_compat` marks the context extended and `sz` covers the operation.
    unsafe {
        let off = std::mem::offset_of!(sys::verbs_context, context);
        let vctx = w.ctxp.cast::<u8>().sub(off).cast::<sys::verbs_context>();
        (*vctx).sz = std::mem::size_of::<sys::verbs_context>();
        (*vctx).advise_mr = Some(record_advise);
        (*w.ctxp).abi_compat = usize::MAX as *mut std::ffi::c_void;
    }
    w
}

fn advised(w: &World) -> Vec<Advice> {
    let pd = w.pd.pd.as_ptr() as usize;
    ADVISED.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|(p, _)| *p == pd).map(|(_, a)| a.clone()).collect()
}

fn answer_advise(w: &World, ret: i32) {
    ADVISE_ANSWER.lock().unwrap_or_else(|e| e.into_inner()).push((w.pd.pd.as_ptr() as usize, ret));
}

/// A fake registration (a zeroed `verbs_mr`-sized block) of the world's PD.
fn raw_mr(w: &'static World) -> NonNull<sys::ibv_mr> {
    let block: &'static mut [u64; 16] = Box::leak(Box::new([0u64; 16]));
    let mr = block.as_mut_ptr().cast::<sys::ibv_mr>();
    // SAFETY: the block is big enough and aligned for an `ibv_mr`.
    unsafe {
        (*mr).context = w.ctxp;
        (*mr).pd = w.pd.pd.as_ptr();
        (*mr).lkey = 0x66;
        (*mr).rkey = 0x67;
    }
    NonNull::new(mr).unwrap()
}

/// Prefetch ranges: inside the region, non-empty, at most `u32::MAX` bytes; outside, empty or
/// reversed ranges are refused before the provider, which sees exactly the range asked for with
/// the region's lkey; an implicit region takes 1 to 128 MiB.
#[test]
fn prefetch_ranges_outside_their_region_never_reach_the_provider() {
    let w = advising_world();
    let tag = OdpTag::verified(sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_SEND, false);
    let mr: Mr<crate::access::LocalRw, Odp> = Mr::fake_odp(&w.pd, raw_mr(w), 8192, tag);
    for bad in [8192..8193, 8192..8192, 0..0, 9000..9001] {
        invalid(&mr.prefetch(bad.clone(), Prefetch::Read).expect_err("refused"), "ibv_advise_mr", "");
        invalid(&mr.prefetch_sync(bad, Prefetch::Read).expect_err("refused"), "ibv_advise_mr", "");
    }
    assert!(advised(w).is_empty(), "the provider saw none");
    mr.prefetch_sync(100..8192, Prefetch::Write).expect("inside");
    let implicit: ImplicitMr<crate::access::Access<crate::access::LocalWrite>> =
        ImplicitMr::fake(&w.pd, raw_mr(w), sys::IBV_QPT_RC, OdpOps::SEND);
    let data = vec![0u8; crate::odp::IMPLICIT_MAX_OP + 1];
    invalid(&implicit.prefetch_sync(&data, Prefetch::Read).expect_err("128 MiB + 1"), "ibv_advise_mr", "");
    invalid(&implicit.prefetch_sync(&data[..0], Prefetch::Read).expect_err("empty"), "ibv_advise_mr", "");
    implicit.prefetch_sync(&data[..4096], Prefetch::Read).expect("4 KiB");
    let seen = advised(w);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], (sys::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE, 1, vec![(mr.addr() + 100, 8092, 0x66)]));
    assert_eq!(seen[1], (sys::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH, 1, vec![(data.as_ptr() as u64, 4096, 0x66)]));
    // Never deregistered: the fake's registration stays.
    std::mem::forget(mr);
    std::mem::forget(implicit);
}

/// ibv_advise_mr(3): EPERM when "the advice is IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE but the
/// specified MR in the scatter gather list is not registered as writable access". A region
/// without LOCAL_WRITE (explicit or implicit) is never prefetched for writing: the request is
/// refused before the provider, by `prefetch` (which would otherwise hide the error, best
/// effort) as by `prefetch_sync`.
#[test]
fn a_prefetch_for_writing_of_a_region_without_local_write_never_reaches_the_provider() {
    let w = advising_world();
    answer_advise(w, libc::EPERM);
    let tag = OdpTag::verified(sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_SEND, false);
    let mr: Mr<crate::access::Access, Odp> = Mr::fake_odp(&w.pd, raw_mr(w), 4096, tag);
    let best_effort = mr.prefetch(.., Prefetch::Write);
    let sync = mr.prefetch_sync(.., Prefetch::Write);
    let implicit: ImplicitMr<crate::access::Access> = ImplicitMr::fake(&w.pd, raw_mr(w), sys::IBV_QPT_RC, OdpOps::SEND);
    let data = [0u8; 64];
    let implicit_best_effort = implicit.prefetch(&data, Prefetch::Write);
    let seen = advised(w);
    std::mem::forget(mr);
    std::mem::forget(implicit);
    assert!(
        seen.iter().all(|(advice, _, _)| *advice != sys::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE),
        "PREFETCH_WRITE of a read-only region reached the provider {} times; prefetch said {:?}, prefetch_sync {:?}, \
         the implicit region's prefetch {:?}",
        seen.len(),
        best_effort,
        sync,
        implicit_best_effort
    );
    assert!(best_effort.is_err() && implicit_best_effort.is_err(), "a refused advice is no success");
}

/// ibv_advise_mr(3): "EOPNOTSUPP libibverbs or provider driver doesn't support the
/// ibv_advise_mr() verb (ENOSYS may sometimes be returned by old versions of libibverbs)". A
/// provider without the verb is reported as `Error::Unsupported` by both prefetches, whichever
/// of the two it answers.
#[test]
fn a_provider_answering_enosys_to_advise_mr_is_reported_unsupported() {
    let w = advising_world();
    answer_advise(w, libc::ENOSYS);
    let tag = OdpTag::verified(sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_SEND, false);
    let mr: Mr<crate::access::LocalRw, Odp> = Mr::fake_odp(&w.pd, raw_mr(w), 4096, tag);
    let best_effort = mr.prefetch(.., Prefetch::Read);
    let sync = mr.prefetch_sync(.., Prefetch::Read);
    std::mem::forget(mr);
    assert!(matches!(sync, Err(Error::Unsupported { .. })), "prefetch_sync: {sync:?}");
    assert!(matches!(best_effort, Err(Error::Unsupported { .. })), "prefetch: {best_effort:?}");
}

// ---------------------------------------------------------------------------------------------
// The checks of a list against a model.
// ---------------------------------------------------------------------------------------------

/// One entry of a random list: its view's fields and what the model needs of them.
#[derive(Clone, Copy, Debug)]
struct Entry {
    addr: u64,
    len: u32,
    other_pd: bool,
    /// `(transport, operations, page_starts, implicit)` of an ODP entry.
    odp: Option<(u32, u32, bool, bool)>,
}

impl Entry {
    fn tag(&self) -> OdpTag {
        match self.odp {
            None => OdpTag::default(),
            Some((t, ops, starts, implicit)) => {
                let tag = OdpTag::verified(t, ops, starts);
                if implicit {
                    tag.implicit()
                } else {
                    tag
                }
            }
        }
    }

    fn view(&self) -> LocalBufMut<'static> {
        let pd = if self.other_pd { crate::pd::PdId::other_dummy() } else { crate::pd::PdId::dummy() };
        LocalBufMut::from_parts(self.addr, self.len, 9, self.tag(), pd)
    }

    fn random(rng: &mut crate::test_util::Rng, page: u64) -> Entry {
        let len = match rng.below(8) {
            0 | 1 => 0,
            2 => u32::MAX,
            3 => crate::odp::IMPLICIT_MAX_OP as u32,
            4 => (1 << 27) + 1,
            _ => 1 + rng.below(4096) as u32,
        };
        let addr = page * (1 + rng.below(64)) + if rng.below(4) == 0 { 8 } else { 0 };
        let ops_of = |bits: u64| {
            [sys::IBV_ODP_SUPPORT_SEND, sys::IBV_ODP_SUPPORT_RECV, sys::IBV_ODP_SUPPORT_WRITE]
                .iter()
                .enumerate()
                .filter(|(i, _)| bits >> i & 1 == 1)
                .fold(0, |a, (_, &b)| a | b)
        };
        let odp = match rng.below(3) {
            0 => None,
            _ => Some((
                [sys::IBV_QPT_RC, sys::IBV_QPT_UD][rng.below(2) as usize],
                ops_of(rng.below(8)),
                rng.below(2) == 0,
                rng.below(4) == 0,
            )),
        };
        Entry { addr, len, other_pd: rng.below(16) == 0, odp }
    }
}

/// What the verbs allow of a list: every entry of one PD, every ODP entry placed where a device
/// that moves packets to page starts needs it, at most `u32::MAX` bytes in all and at most
/// `IMPLICIT_MAX_OP` in all where any entry goes through the implicit lkey; then the non-empty entries in order, and an
/// operation on a transport allowed when every non-empty ODP entry verified it there.
fn model_allows(list: &[Entry], page: u64) -> bool {
    let one_pd = list.iter().all(|e| e.other_pd == list[0].other_pd);
    let placed = list.iter().all(|e| !matches!(e.odp, Some((_, _, true, _))) || e.addr % page == 0);
    let total: u64 = list.iter().map(|e| u64::from(e.len)).sum();
    let implicit = list.iter().any(|e| matches!(e.odp, Some((_, _, _, true))));
    one_pd && placed && total <= u64::from(u32::MAX) && (!implicit || total <= crate::odp::IMPLICIT_MAX_OP as u64)
}

fn model_verifies(list: &[Entry], t: u32, op: u32) -> bool {
    list.iter().filter(|e| e.len != 0).all(|e| match e.odp {
        None => true,
        Some((u, ops, _, _)) => u == t && ops & op == op,
    })
}

/// Random lists of four entries (two PDs, empty and huge lengths, ODP entries of RC and UD with
/// random operations, placed or not, through the implicit lkey or not) against the model: the
/// list is accepted exactly when the model allows it, keeps exactly its non-empty entries in
/// order, and lets no operation through on a transport that one of its non-empty ODP entries
/// did not verify; where a non-empty entry comes before every empty ODP entry, it lets through
/// exactly what every non-empty entry verified.
#[test]
fn random_lists_are_checked_as_the_model_says() {
    let page = crate::mr::page_size() as u64;
    let mut rng = crate::test_util::Rng(0x5eed_1234_abcd_0001);
    let mut accepted = 0;
    for round in 0..20_000 {
        let list: [Entry; 4] = std::array::from_fn(|_| Entry::random(&mut rng, page));
        let views = list.map(|e| e.view());
        let got = crate::sgl::Collected::of(&views, "ibv_post_send");
        let allowed = model_allows(&list, page);
        match got {
            Err(Error::InvalidArgument { verb: "ibv_post_send", .. }) if !allowed => {}
            Err(e) => panic!("round {round}: {list:?} refused ({e}) though the model allows it: {allowed}"),
            Ok(_) if !allowed => panic!("round {round}: {list:?} accepted though the model refuses it"),
            Ok(c) => {
                accepted += 1;
                let want: Vec<_> = list.iter().filter(|e| e.len != 0).map(|e| (e.addr, e.len)).collect();
                let have: Vec<_> = c.used().iter().map(|s| (s.addr, s.length)).collect();
                assert_eq!(have, want, "round {round}: the non-empty entries in order");
                let first = list.iter().position(|e| e.len != 0);
                let exact = first.is_some_and(|f| list[f..].iter().all(|e| e.len != 0 || e.odp.is_none()));
                for t in [sys::IBV_QPT_RC, sys::IBV_QPT_UD] {
                    for op in [sys::IBV_ODP_SUPPORT_SEND, sys::IBV_ODP_SUPPORT_RECV, sys::IBV_ODP_SUPPORT_WRITE] {
                        let lets = c.odp.check(t, "T", op).is_ok();
                        let model = model_verifies(&list, t, op);
                        assert!(!lets || model, "round {round}: {list:?} lets op {op:#x} through on QP type {t}");
                        if exact {
                            assert_eq!(lets, model, "round {round}: {list:?}, op {op:#x} on QP type {t}");
                        }
                    }
                }
            }
        }
    }
    assert!(accepted > 1000, "the model's lists are mostly refused: {accepted} accepted");
}

/// Entries of zero bytes are no entries (left out of the list): an empty ODP entry verified
/// for another transport does not decide what the list may be posted for, whether it comes
/// before or after the non-empty ones.
#[test]
fn an_empty_odp_entry_counts_alike_before_and_after_the_others() {
    let (rc, ud, send) = (sys::IBV_QPT_RC, sys::IBV_QPT_UD, sys::IBV_ODP_SUPPORT_SEND);
    let pd = crate::pd::PdId::dummy();
    let page = crate::mr::page_size() as u64;
    let on_ud = LocalBuf::from_parts(page, 64, 5, OdpTag::verified(ud, send, false), pd);
    let empty_on_rc = LocalBuf::from_parts(2 * page, 0, 5, OdpTag::verified(rc, send, false), pd);
    let before = crate::sgl::Collected::of(&(empty_on_rc, on_ud), "ibv_post_send").expect("one PD");
    let after = crate::sgl::Collected::of(&(on_ud, empty_on_rc), "ibv_post_send").expect("one PD");
    assert_eq!((before.num_sge, after.num_sge), (1, 1), "the empty entry is left out either way");
    let (b, a) = (before.odp.check(ud, "UD", send).is_ok(), after.odp.check(ud, "UD", send).is_ok());
    assert!(b, "the empty entry first: a SEND on UD is verified");
    assert_eq!(a, b, "the empty entry last refuses the same SEND on UD that it allows first");
    // A request of a single empty view is checked against that view's memory (DESIGN §5).
    let single = crate::sgl::Gather::collect(&empty_on_rc, "ibv_post_send").expect("one PD");
    assert_eq!(single.num_sge, 0);
    assert!(single.odp.check(ud, "UD", send).is_err() && single.odp.check(rc, "RC", send).is_ok());
}

// ---------------------------------------------------------------------------------------------
// ODP receives of a shared receive queue without QPs.
// ---------------------------------------------------------------------------------------------

/// An SRQ with no QP attached takes an ODP receive verified for UD; a second one verified for
/// RC is refused (it would leave the SRQ holding receives that a QP of neither transport may
/// consume, since each transport's attach is then refused for the other's receives), and the
/// provider sees only the first; a UD QP may still attach, an RC QP may not.
#[test]
fn odp_receives_of_two_transports_never_both_land_in_an_srq_without_qps() {
    let w = World::new();
    // SAFETY: the world's context is leaked and this test's own; the inline
    // `ibv_post_srq_recv` reads `srq->context->ops.post_srq_recv`.
    unsafe { (*w.ctxp).ops.post_srq_recv = Some(record_srq_recv) };
    let srq = w.srq(8);
    let handle = Srq { shared: Arc::clone(&srq) };
    let page = crate::mr::page_size() as u64;
    let srq_recv = sys::IBV_ODP_SUPPORT_SRQ_RECV;
    let ud = OdpTag::verified(sys::IBV_QPT_UD, srq_recv, false);
    let rc = OdpTag::verified(sys::IBV_QPT_RC, srq_recv, false);
    let first = handle.post_recv_owned(Recv::new(sink(w, page, 64, ud))).expect("the first ODP receive");
    let second = handle.post_recv_owned(Recv::new(sink(w, 2 * page, 64, rc)));
    let (rc_attach, ud_attach) =
        (srq.attach_transport(sys::IBV_QPT_RC, "RC").is_ok(), srq.attach_transport(sys::IBV_QPT_UD, "UD").is_ok());
    let provider_saw = srq_recvs(&srq);
    let second_ok = second.is_ok();
    if let Ok(t) = second {
        std::mem::forget(t);
    }
    std::mem::forget(first);
    assert!(
        !second_ok,
        "a receive verified for RC joined one verified for UD: the provider took {provider_saw} receives, and now an RC \
         QP attaches: {rc_attach}, a UD QP: {ud_attach}"
    );
    assert_eq!(provider_saw, 1);
    assert!(ud_attach && !rc_attach, "RC attaches: {rc_attach}, UD: {ud_attach}");
}
