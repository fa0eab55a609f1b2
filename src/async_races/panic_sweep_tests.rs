//! Extreme values a program can pass to the public API, over the fake device of `async_races`
//! and the library's pure functions: lengths and offsets at 0, 1, `u32::MAX`, `u64::MAX` and
//! `usize::MAX`, `Duration::ZERO` and `Duration::MAX`, depths of 0 and `u32::MAX`, ports 0 and
//! 255, remote ranges that end at or past 2^64, payloads whose lengths add up past `usize::MAX`.
//! Each is a typed error naming the verb (or a result), never a panic, in debug builds
//! (overflow checks on) as in release ones.
#![allow(unsafe_code)]

use std::ops::Bound;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use typed_verbs_sys as sys;

use super::{bounded, invalid, post_send, send_wc, World};
use crate::access::{self, RemoteAll};
use crate::ah::AddressVector;
use crate::cq::Cq;
use crate::device::{Context, DeviceAttr, Gid};
use crate::mr::{Mr, RemoteSlice};
use crate::mw::WindowAdvert;
use crate::pd::Pd;
use crate::qp::{QpCaps, QpConfig};
use crate::scope::scope;
use crate::transport::RC;
use crate::wr::InlineSend;
use crate::Error;

/// A fake device context with room for queues (1024 requests of 4 entries).
fn roomy() -> &'static World {
    World::with_device(0x5a, 0x5a, DeviceAttr::fake(0x5a, true).with_fake_queue_limits())
}

/// A region of `len` bytes over a fake registration in `w`'s PD.
fn region(w: &'static World, len: usize) -> Mr<access::LocalRw> {
    Mr::fake(&w.pd, w.raw_mr(&w.pd), len)
}

#[test]
fn region_views_at_and_past_their_edges_are_typed() {
    let w = World::new();
    let mut mr = region(w, 64);
    let base = mr.addr();
    assert_eq!(mr.slice(..).expect("whole").len(), 64);
    let end = mr.slice(64..64).expect("the empty view at the end");
    assert!(end.is_empty() && end.addr() == base + 64);
    assert_eq!(mr.slice(63..=63).expect("last byte").addr(), base + 63);
    for (range, what) in [
        ((Bound::Included(65), Bound::Unbounded), "start past the end"),
        ((Bound::Unbounded, Bound::Included(usize::MAX)), "end at usize::MAX, inclusive"),
        ((Bound::Excluded(usize::MAX), Bound::Unbounded), "start after usize::MAX"),
        ((Bound::Included(usize::MAX), Bound::Excluded(usize::MAX)), "empty, at usize::MAX"),
        ((Bound::Included(10), Bound::Excluded(9)), "reversed"),
        ((Bound::Unbounded, Bound::Excluded(65)), "one past the end"),
    ] {
        invalid(&mr.slice(range).expect_err(what), "Mr::slice", "outside");
        invalid(&mr.slice_mut(range).expect_err(what), "Mr::slice_mut", "outside");
        invalid(&mr.remote(range).expect_err(what), "Mr::remote", "outside");
    }
    let r = mr.remote(..).expect("whole");
    assert_eq!((r.addr(), r.len(), r.rkey()), (base, 64, 0x78));
    let mut one = [0u8; 1];
    invalid(&mr.read_volatile_into(usize::MAX, &mut one).expect_err("offset usize::MAX"), "Mr::read_volatile_into", "");
    invalid(&mr.read_volatile_into(64, &mut one).expect_err("one past the end"), "Mr::read_volatile_into", "");
    invalid(&mr.write_volatile_from(usize::MAX, &[1]).expect_err("offset usize::MAX"), "Mr::write_volatile_from", "");
    mr.read_volatile_into(64, &mut []).expect("nothing at the end");
    mr.write_volatile_from(63, &[9]).expect("the last byte");
    mr.read_volatile_into(63, &mut one).expect("the last byte");
    assert_eq!(one, [9]);

    // A view split at 0, at its length, past it and at usize::MAX.
    let view = mr.slice_mut(0..64).expect("whole");
    let (head, tail) = view.split_at(0).expect("at 0");
    assert_eq!((head.len(), tail.len(), tail.addr()), (0, 64, base));
    let (head, tail) = tail.split_at(64).expect("at the end");
    assert_eq!((head.len(), tail.len(), tail.addr()), (64, 0, base + 64));
    let view = mr.slice_mut(..).expect("whole");
    invalid(&view.split_at(65).map(drop).expect_err("past the end"), "LocalBufMut::split_at", "beyond");
    let view = mr.slice_mut(..).expect("whole");
    invalid(&view.split_at(usize::MAX).map(drop).expect_err("usize::MAX"), "LocalBufMut::split_at", "beyond");
}

#[test]
fn chunks_of_zero_past_u32_and_past_the_region_are_typed() {
    let w = World::new();
    for len in [0, u32::MAX as usize + 1, usize::MAX] {
        let e = region(w, 64).into_chunks(len).expect_err("no such chunk length");
        invalid(&e, "Mr::into_chunks", "1..=u32::MAX");
    }
    // Longer than the region: one chunk, the whole region.
    for len in [65, u32::MAX as usize] {
        let chunks = region(w, 64).into_chunks(len).expect("one chunk");
        assert_eq!(chunks.iter().map(|c| c.len()).collect::<Vec<_>>(), [64]);
    }
    // One byte each, and a short last one.
    let chunks = region(w, 5).into_chunks(1).expect("five");
    let base = chunks[0].addr();
    assert_eq!(
        chunks.iter().map(|c| (c.addr() - base, c.len())).collect::<Vec<_>>(),
        [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]
    );
    let chunks = region(w, 5).into_chunks(2).expect("three");
    assert_eq!(chunks.iter().map(|c| c.len()).collect::<Vec<_>>(), [2, 2, 1]);
    let (base, last) = (chunks[0].addr(), chunks[2].remote());
    assert_eq!((last.addr(), last.len()), (base + 4, 1));
}

#[test]
fn remote_slices_from_the_wire_that_reach_or_pass_2_pow_64_are_sliced_without_wrapping() {
    let all = RemoteSlice::<RemoteAll>::from_wire(u64::MAX, u64::MAX, 7);
    let s = all.slice(0, 0).expect("empty, at the start");
    assert_eq!((s.addr(), s.len(), s.rkey()), (u64::MAX, 0, 7));
    let s = all.slice(0, u64::MAX).expect("the whole claim");
    assert_eq!((s.addr(), s.len()), (u64::MAX, u64::MAX));
    for (off, len) in [(1, 0), (u64::MAX, 0), (u64::MAX, 1), (1, u64::MAX), (2, u64::MAX - 1)] {
        invalid(&all.slice(off, len).expect_err("past 2^64"), "RemoteSlice::slice", "outside");
    }
    // A region that ends exactly at 2^64: every byte in it can be named, nothing past it.
    let top = RemoteSlice::<RemoteAll>::from_wire(u64::MAX - 7, 8, 1);
    let s = top.slice(7, 1).expect("the last byte");
    assert_eq!((s.addr(), s.len()), (u64::MAX, 1));
    invalid(&top.slice(7, 2).expect_err("one past"), "RemoteSlice::slice", "outside");
    invalid(&top.slice(8, 0).expect_err("its end address is 2^64"), "RemoteSlice::slice", "outside");
    let zero = RemoteSlice::<RemoteAll>::from_wire(0, 0, 0);
    assert!(zero.is_empty() && zero.slice(0, 0).is_ok());
    invalid(&zero.slice(0, 1).expect_err("nothing to slice"), "RemoteSlice::slice", "outside");
}

#[test]
fn window_adverts_of_every_length_and_flag_are_typed() {
    for len in [0, 1, WindowAdvert::LEN - 1, WindowAdvert::LEN + 1, 4096] {
        let bytes = vec![0u8; len];
        invalid(&WindowAdvert::decode(&bytes).expect_err("wrong length"), "WindowAdvert::decode", "expected 21");
    }
    let mut bytes = [0xffu8; WindowAdvert::LEN];
    invalid(&WindowAdvert::decode(&bytes).expect_err("unknown flags"), "WindowAdvert::decode", "unknown flags");
    bytes[20] = 0x0f;
    let advert = WindowAdvert::decode(&bytes).expect("every known flag");
    assert_eq!(advert.encode(), bytes);
    let r =
        advert
            .remote::<crate::access::WindowAccess<
                access::RemoteWrite,
                access::RemoteRead,
                access::RemoteAtomic,
                access::ZeroBased,
            >>()
            .expect("zero-based, every right");
    assert_eq!((r.addr(), r.len(), r.rkey()), (u64::MAX, u64::MAX, u32::MAX));
    invalid(&r.slice(1, u64::MAX).expect_err("wraps"), "RemoteSlice::slice", "outside");
}

#[test]
fn queue_depths_of_zero_and_u32_max_are_refused_before_the_provider() {
    let w = roomy();
    let ctx = Context { inner: Arc::clone(&w.ctx) };
    // The fake reports max_cqe 0: every size is outside 1..=0, as 0 and u32::MAX are anywhere.
    for cqe in [0, 1, i32::MAX as u32 + 1, u32::MAX] {
        invalid(&ctx.create_cq(cqe).map(drop).expect_err("no such CQ"), "ibv_create_cq", "entries requested");
    }
    let pd = Pd { inner: Arc::clone(&w.pd) };
    for (wr, sge) in [(0, 1), (u32::MAX, 1), (1025, 1), (1, 0), (1, u32::MAX), (u32::MAX, u32::MAX)] {
        invalid(&pd.create_srq_sge(wr, sge).map(drop).expect_err("no such SRQ"), "ibv_create_srq", "the device allows");
    }
    let (cq, _) = w.cq();
    let cq = Cq { inner: cq };
    let full = QpCaps { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    for caps in [
        QpCaps { max_send_wr: 0, ..full },
        QpCaps { max_send_wr: u32::MAX, ..full },
        QpCaps { max_recv_wr: 0, ..full },
        QpCaps { max_recv_wr: u32::MAX, ..full },
        QpCaps { max_send_sge: 0, ..full },
        QpCaps { max_send_sge: u32::MAX, ..full },
        QpCaps { max_recv_sge: 0, ..full },
        QpCaps { max_recv_sge: u32::MAX, ..full },
    ] {
        let e = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps)).map(drop).expect_err("no such QP");
        invalid(&e, "ibv_create_qp", "the device allows");
    }
}

#[test]
fn ports_0_and_255_and_gid_indices_past_the_table_are_typed() {
    let w = World::new();
    let ctx = Context { inner: Arc::clone(&w.ctx) };
    for port in [0u8, 1, 255] {
        invalid(&ctx.query_port(port).map(drop).expect_err("no such port"), "ibv_query_port", "does not exist");
        for index in [0u8, 255] {
            invalid(&ctx.query_gid(port, index).expect_err("no such port"), "ibv_query_port", "does not exist");
        }
        invalid(&ctx.gid_table(port).expect_err("no such port"), "ibv_query_port", "does not exist");
        invalid(&ctx.default_gid_index(port).expect_err("no such port"), "ibv_query_port", "does not exist");
    }
    let pd = Pd { inner: Arc::clone(&w.pd) };
    for port in [0u8, 255] {
        for av in [AddressVector::local(port, 1), AddressVector::global(port, Gid([0xff; 16]), 255)] {
            invalid(&pd.create_ah(&av).map(drop).expect_err("no such port"), "ibv_create_ah", "does not exist");
        }
    }
}

#[test]
fn memory_of_zero_and_absurd_lengths_is_refused_without_allocating() {
    let w = World::new();
    let pd = Pd { inner: Arc::clone(&w.pd) };
    invalid(&pd.alloc_mr(0, access::LOCAL_RW).map(drop).expect_err("empty"), "ibv_reg_mr", "at least one");
    for len in [usize::MAX, isize::MAX as usize, isize::MAX as usize - 4095] {
        let e = pd.alloc_mr(len, access::LOCAL_RW).map(drop).expect_err("no such allocation");
        // Refused as a length, or reported as the allocation's failure: never an abort.
        assert!(
            matches!(&e, Error::InvalidArgument { verb: "ibv_reg_mr", .. })
                || matches!(&e, Error::Verb { verb: crate::Verb::RegMr, .. }),
            "{len}: {e:?}"
        );
    }
    invalid(&pd.register_borrowed(&mut [], access::LOCAL_RW).map(drop).expect_err("empty"), "ibv_reg_mr", "");
    for len in [0, usize::MAX] {
        invalid(&crate::dmabuf::udmabuf(len).map(drop).expect_err("no such dma-buf"), "UDMABUF_CREATE", "need 1");
    }
    let (r, _w) = std::io::pipe().expect("pipe");
    use std::os::fd::AsFd;
    for (offset, len, iova) in [(0, 0, 0), (0, 1, u64::MAX), (u64::MAX, 1, 0), (0, usize::MAX, 1), (1, usize::MAX, 0)] {
        let e = pd.reg_dmabuf_mr(r.as_fd(), offset, len, iova, access::LOCAL_RW).map(drop);
        invalid(&e.expect_err("refused before the provider"), "ibv_reg_dmabuf_mr", "");
    }
}

#[test]
fn timeouts_of_zero_and_duration_max_end_or_answer() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0x5b1, 4, &cq, None);
        let token = post_send(&qp, true);
        let back = token.wait(Duration::ZERO).expect_err("nothing completed yet");
        assert!(matches!(back.error, Error::Timeout { .. }), "{:?}", back.error);
        let token = back.token;
        fake.complete(send_wc(0x5b1, 0, sys::IBV_WC_SUCCESS));
        let (c, ()) = token.wait(Duration::MAX).map_err(|e| e.error).expect("completed: Duration::MAX returns");
        assert!(c.is_success());
        let e = w.ch.wait(Duration::ZERO).map(drop).expect_err("no event");
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
        let e = w.ch.wait(Duration::from_nanos(1)).map(drop).expect_err("no event");
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
        let r = crate::scope::scope_with_timeout(Duration::MAX, |_| 7).expect("nothing to drain");
        assert_eq!(r, 7);
        let r = crate::scope::scope_with_timeout(Duration::ZERO, |_| 8).expect("nothing to drain");
        assert_eq!(r, 8);
    });
}

/// The bytes of a private, read-only, never-touched mapping of `len` bytes (no memory is
/// committed for it, so it fits any machine with a 47-bit address space), leaked.
fn untouched_mapping(len: usize) -> &'static [u8] {
    // SAFETY: a new anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of {len} bytes: {}", std::io::Error::last_os_error());
    // SAFETY: `len` (at most isize::MAX) readable, zero-filled bytes mapped just now, never
    // written or unmapped (leaked), so a shared slice over them is valid forever.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
}

/// Pieces of an inline request: `N` times one 2^46-byte slice, 2^64 bytes in all.
const PIECES: usize = 1 << 18;

#[test]
fn inline_pieces_whose_lengths_add_up_past_usize_max_are_refused() {
    let bytes = untouched_mapping(1 << 46);
    // The request holds 2^18 slices (4 MiB), and its build as many entries: a thread with room.
    let run = std::thread::Builder::new().stack_size(64 << 20).spawn(move || {
        let w = World::new();
        let (cq, _) = w.cq();
        let (qp, shared) = w.rc_qp(0x5b2, 4, &cq);
        let wr = Box::new(InlineSend::gather([bytes; PIECES]));
        let r = scope(|s| s.post_inline(&qp, *wr).map(drop).map_err(|e| e.error));
        let e = r.expect("the scope").expect_err("2^64 bytes are not inline");
        assert!(matches!(e, Error::InlineTooLarge { len: usize::MAX, max: 64, .. }), "{e:?}");
        assert!(super::sends(&shared).is_empty(), "the provider saw nothing");
    });
    run.expect("thread").join().expect("no panic");
}

#[test]
fn transitions_to_ports_0_and_255_and_values_past_their_bits_are_refused_before_the_provider() {
    use crate::qp::{ConnectedInit, RcRts, SqPsn, UdInit};
    use crate::transport::{RESET, RTR, UD};
    let w = World::new();
    let (cq, _) = w.cq();
    let refused = |e: &Error, what: &str| invalid(e, "ibv_modify_qp", what);
    for port in [0u8, 255] {
        let qp = crate::qp::Qp::<RC, RESET>::from_fake(w.qp(0x5c0 + u32::from(port), 4, &cq, None));
        let e = qp.to_init(&ConnectedInit::new(port, access::REMOTE_ALL)).expect_err("no such port");
        refused(&e.error, "does not exist");
        std::mem::forget(e.qp);
        let qp = crate::qp::Qp::<UD, RESET>::from_fake(w.qp(0x5d0 + u32::from(port), 4, &cq, None));
        let e = qp.to_init(&UdInit { port, pkey_index: u16::MAX, qkey: u32::MAX }).expect_err("no such port");
        refused(&e.error, "does not exist");
        std::mem::forget(e.qp);
    }
    for (n, (rts, what)) in [
        (RcRts { sq_psn: u32::MAX, ..RcRts::new(0) }, "sq_psn"),
        (RcRts { timeout: u8::MAX, ..RcRts::new(0) }, "timeout"),
        (RcRts { retry_cnt: 8, ..RcRts::new(0) }, "retry_cnt"),
        (RcRts { rnr_retry: u8::MAX, ..RcRts::new(0) }, "rnr_retry"),
    ]
    .into_iter()
    .enumerate()
    {
        let qp = crate::qp::Qp::<RC, RTR>::from_fake(w.qp(0x5e0 + n as u32, 4, &cq, None));
        let e = qp.to_rts(&rts).expect_err("too wide");
        refused(&e.error, what);
        std::mem::forget(e.qp);
    }
    let qp = crate::qp::Qp::<UD, RTR>::from_fake(w.qp(0x5f0, 4, &cq, None));
    let e = qp.to_rts(&SqPsn { sq_psn: 1 << 24 }).expect_err("25 bits");
    refused(&e.error, "sq_psn");
    std::mem::forget(e.qp);
}

#[test]
fn private_data_of_the_limit_passes_and_one_byte_more_is_refused_never_truncated() {
    use crate::cm::{ud_param, ConnParam, ACCEPT_PRIVATE, CONNECT_PRIVATE, UD_ACCEPT_PRIVATE, UD_CONNECT_PRIVATE};
    for max in [CONNECT_PRIVATE, ACCEPT_PRIVATE] {
        let param = ConnParam { private_data: vec![7; max], ..ConnParam::default() };
        let raw = param.raw(0x11, max, "rdma_connect").expect("at the limit");
        assert_eq!(usize::from(raw.private_data_len), max);
        // One more, and 256 (which a u8 length would carry as 0).
        for len in [max + 1, 256, 4096] {
            let param = ConnParam { private_data: vec![7; len], ..ConnParam::default() };
            invalid(&param.raw(0x11, max, "rdma_connect").expect_err("above"), "rdma_connect", "at most");
        }
    }
    for max in [UD_CONNECT_PRIVATE, UD_ACCEPT_PRIVATE] {
        let raw = ud_param(&vec![1; max], 0x12, max, "rdma_accept").expect("at the limit");
        assert_eq!(usize::from(raw.private_data_len), max);
        for len in [max + 1, 256] {
            invalid(&ud_param(&vec![1; len], 0x12, max, "rdma_accept").expect_err("above"), "rdma_accept", "at most");
        }
    }
    let raw = ud_param(&[], 0x12, UD_CONNECT_PRIVATE, "rdma_connect").expect("none");
    assert!(raw.private_data.is_null() && raw.private_data_len == 0);
    for (retry, rnr) in [(8, 0), (0, 8), (u8::MAX, u8::MAX)] {
        let param = ConnParam { retry_count: retry, rnr_retry_count: rnr, ..ConnParam::default() };
        invalid(&param.raw(1, CONNECT_PRIVATE, "rdma_connect").expect_err("3 bits"), "rdma_connect", "0..=7");
    }
}

/// A `wr_id` a provider could report: the library's numbers near the edges of its ranges
/// (sends, receives, lane sends, lane receives), the integer limits, or anything.
fn odd_wr_id(rng: &mut crate::test_util::Rng) -> u64 {
    use crate::queue::{LANE_BIT, RECV_BIT};
    let near = [0, 1, 2, 3, 64, u64::from(u32::MAX), LANE_BIT - 1, RECV_BIT - 1, u64::MAX];
    let bits = [0, RECV_BIT, LANE_BIT, RECV_BIT | LANE_BIT];
    match rng.below(3) {
        0 => near[rng.below(near.len() as u64) as usize],
        1 => bits[rng.below(4) as usize].wrapping_add(rng.below(8)),
        _ => rng.next(),
    }
}

/// A provider's completion of `qp_num`'s queues (or, at times, of any QP) with any `wr_id`,
/// status, opcode, length and flags.
fn odd_wc(rng: &mut crate::test_util::Rng, qp_num: u32) -> sys::ibv_wc {
    sys::ibv_wc {
        wr_id: odd_wr_id(rng),
        status: [sys::IBV_WC_SUCCESS, sys::IBV_WC_WR_FLUSH_ERR, u32::MAX][rng.below(3) as usize],
        opcode: [sys::IBV_WC_SEND, sys::IBV_WC_RECV, sys::IBV_WC_RDMA_READ, u32::MAX][rng.below(4) as usize],
        qp_num: if rng.below(4) == 0 { rng.next() as u32 } else { qp_num },
        byte_len: [0, 1, u32::MAX][rng.below(3) as usize],
        wc_flags: rng.next() as u32,
        ..Default::default()
    }
}

#[test]
fn completions_with_any_wr_id_status_opcode_and_length_never_panic_a_poll_or_a_wait() {
    bounded(60, || {
        let w = World::new();
        let mut rng = crate::test_util::Rng(0x5eed_5eed);
        for round in 0..40u32 {
            // Owned tokens, the program's polls and the tokens' waits.
            let (cq, fake) = w.cq();
            let qp_num = 0x600 + 2 * round;
            let shared = w.qp(qp_num, 4, &cq, None);
            let tokens = [post_send(&shared, rng.below(2) == 0), super::post_recv(&shared)];
            for _ in 0..32 {
                fake.complete(odd_wc(&mut rng, qp_num));
            }
            let mut out = [crate::wc::Completion::default(); 7];
            let cq_handle = Cq { inner: Arc::clone(&cq) };
            while fake.left() > 0 {
                let n = cq_handle.poll_into(&mut out).expect("polled");
                assert!(n <= out.len());
            }
            for t in tokens {
                match t.wait(Duration::ZERO) {
                    Ok((c, ())) => assert_eq!(c.qp_num(), qp_num),
                    Err(e) => assert!(matches!(e.error, Error::Timeout { .. }), "{:?}", e.error),
                }
            }
            // Lanes: their own numbers and made-up ones, polled by their waits.
            let (mut qp, lanes_shared) = w.rc_qp(qp_num + 1, 4, &cq);
            let r = crate::scope::scope_with_timeout(Duration::from_millis(20), |s| {
                let (mut lane, mut rlane) = s.lanes(&mut qp).expect("lanes");
                let mut wr =
                    lane.prepare(crate::wr::Write::new(w.local(0x1000, 8), super::remote())).expect("prepared");
                let tok = lane.post(&mut wr).expect("posted");
                let mut rcv = rlane.prepare(crate::wr::Recv::new(w.local_mut(0x2000, 8))).expect("prepared");
                let rtok = rlane.post(&mut rcv).expect("posted");
                for _ in 0..32 {
                    fake.complete(odd_wc(&mut rng, qp_num + 1));
                }
                // Then the device's own completions of the two (else the drain forces the QP
                // to ERR and waits its flush timeout for flushes the fake never sends).
                let (seq, _) = *super::sends(&lanes_shared).last().expect("the lane's send");
                let rseq = *super::recvs(&lanes_shared).last().expect("the lane's receive");
                fake.complete(super::wc_of(qp_num + 1, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
                fake.complete(super::wc_of(qp_num + 1, rseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
                for r in [
                    lane.wait(tok, Duration::ZERO).map(drop).map_err(|e| e.error),
                    rlane.wait(rtok, Duration::ZERO).map(drop).map_err(|e| e.error),
                ] {
                    if let Err(e) = r {
                        assert!(
                            matches!(
                                e,
                                Error::Timeout { .. }
                                    | Error::InvalidArgument { .. }
                                    | Error::Completion(_)
                                    | Error::QpBroken { .. }
                            ),
                            "{e:?}"
                        );
                    }
                }
            });
            // The drain ends, in time, whatever the completions were.
            assert!(matches!(r, Ok(()) | Err(Error::QpBroken { .. })), "{r:?}");
            while fake.left() > 0 {
                let _ = cq_handle.progress();
            }
        }
    });
}

#[test]
fn srq_limits_empty_polls_and_implicit_odp_views_at_their_edges_are_typed() {
    let w = World::new();
    let srq = crate::srq::Srq { shared: w.srq(16) };
    for limit in [16, 17, u32::MAX] {
        invalid(&srq.arm_limit(limit).expect_err("not below max_wr"), "ibv_modify_srq", "not below max_wr 16");
    }
    let (cq, fake) = w.cq();
    fake.complete(send_wc(0x5f5, 0, sys::IBV_WC_SUCCESS));
    let cq = Cq { inner: cq };
    assert_eq!(cq.poll_into(&mut []).expect("nothing asked"), 0);
    assert_eq!(fake.left(), 1, "an empty slice polls nothing");
    let mr = NonNull::new(Box::leak(Box::new([0u64; 16])).as_mut_ptr().cast::<sys::ibv_mr>()).unwrap();
    let implicit: &'static crate::odp::ImplicitMr<access::LocalRw> =
        Box::leak(Box::new(crate::odp::ImplicitMr::fake(&w.pd, mr, sys::IBV_QPT_RC, crate::odp::OdpOps::all())));
    invalid(&implicit.buf(&[]).expect_err("empty"), "ImplicitMr::buf", "1..=");
    invalid(&implicit.buf_mut(&mut []).expect_err("empty"), "ImplicitMr::buf_mut", "1..=");
    let mut big = vec![0u8; crate::odp::IMPLICIT_MAX_OP + 1];
    invalid(&implicit.buf(&big).expect_err("above 128 MiB"), "ImplicitMr::buf", "1..=");
    invalid(&implicit.buf_mut(&mut big).expect_err("above 128 MiB"), "ImplicitMr::buf_mut", "1..=");
    let at = implicit.buf(&big[..crate::odp::IMPLICIT_MAX_OP]).expect("at the limit");
    assert_eq!(at.len(), crate::odp::IMPLICIT_MAX_OP);
    for data in [&big[..0], &big[..]] {
        let e = implicit.prefetch(data, crate::odp::Prefetch::Read).expect_err("outside 1..=128 MiB");
        invalid(&e, "ibv_advise_mr", "1..=");
    }
}
