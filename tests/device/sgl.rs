//! Scatter/gather lists on the device: a SEND gathered from three regions into a receive
//! scattered over two, an RDMA READ scattered into two regions, lists of owned chunks, lists on
//! lanes and on a shared receive queue, inline pieces, the per-queue entry limits, and lists
//! whose tokens are dropped or forgotten. Every byte is checked, with sentinels around.

use std::time::{Duration, Instant};

use typed_verbs::prelude::*;
use typed_verbs::scope::PostError;
use typed_verbs::sgl::Gather;

use crate::common::*;

/// Caps with room for `send` and `recv` entries per request (and no inline data, so that the
/// provider has no reason to grant more entries than asked).
fn sge_caps(send: u32, recv: u32) -> QpCaps {
    QpCaps { max_send_sge: send, max_recv_sge: recv, ..QpCaps::default() }
}

/// A region of `len` bytes filled with the pattern of `seed`.
fn patterned(pd: &Pd, len: usize, seed: u8) -> Mr<access::LocalRw> {
    let mut mr = pd.alloc_mr(len, access::LOCAL_RW).unwrap();
    fill(&mut mr, seed);
    mr
}

/// The pattern `fill` writes, for `len` bytes of `seed` from offset `from`.
fn pattern(seed: u8, from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_send_gathered_from_three_regions_lands_scattered_over_two() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, sge_caps(3, 2));
    assert!(p.a.caps().max_send_sge >= 3 && p.b.caps().max_recv_sge >= 2, "{:?}", p.a.caps());
    let (x, y, z) = (patterned(&r.pd, 4096, 1), patterned(&r.pd, 4096, 2), patterned(&r.pd, 4096, 3));
    // The receive side: 100 bytes into `d0` at offset 8, the rest into `d1` at offset 16; the
    // bytes around stay 0xee.
    let mut d0 = r.pd.alloc_mr(256, access::LOCAL_RW).unwrap();
    let mut d1 = r.pd.alloc_mr(512, access::LOCAL_RW).unwrap();
    d0.as_mut_slice().fill(0xee);
    d1.as_mut_slice().fill(0xee);
    let sent: Vec<u8> = [pattern(1, 10, 70), pattern(2, 0, 5), pattern(3, 100, 200)].concat();
    assert_eq!(sent.len(), 275);
    scope(|s| {
        let recv = wr::Recv::new((d0.slice_mut(8..108).unwrap(), d1.slice_mut(16..416).unwrap()));
        let rt = s.post_recv(&p.b, recv).unwrap();
        let gather = (x.slice(10..80).unwrap(), y.slice(..5).unwrap(), z.slice(100..300).unwrap());
        assert_eq!(gather.total_len(), 275);
        let st = s.post_send(&p.a, wr::Send::new(gather)).unwrap();
        let (c, (gx, gy, gz)) = s.wait(st, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!((gx.len(), gy.len(), gz.len()), (70, 5, 200), "the views come back, each itself");
        let (c, (_b0, _b1)) = s.wait(rt, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!((c.opcode(), c.byte_len()), (WcOpcode::Recv, 275));
    })
    .unwrap();
    let (got0, got1) = (d0.as_slice(), d1.as_slice());
    assert_eq!(&got0[8..108], &sent[..100], "the first 100 bytes fill the first entry");
    assert_eq!(&got1[16..191], &sent[100..], "the rest lands at the start of the second");
    assert!(got0[..8].iter().chain(&got0[108..]).all(|&b| b == 0xee), "around the first entry: untouched");
    assert!(got1[..16].iter().chain(&got1[191..]).all(|&b| b == 0xee), "around the second: untouched");
}

#[test]
fn a_read_scattered_into_two_regions() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_read(), sge_caps(2, 1));
    let mut remote = r.pd.alloc_mr(8192, access::REMOTE_RW).unwrap();
    let source = pattern(9, 0, 8192);
    remote.write_volatile_from(0, &source).unwrap();
    let mut d0 = r.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    let mut d1 = r.pd.alloc_mr(8192, access::LOCAL_RW).unwrap();
    d0.as_mut_slice().fill(0x5a);
    d1.as_mut_slice().fill(0x5a);
    scope(|s| {
        // 3000 bytes into d0[1000..4000], then 5000 into d1[100..5100]: 8000 bytes from 64.
        let into = [d0.slice_mut(1000..4000).unwrap(), d1.slice_mut(100..5100).unwrap()];
        let t = s.post_send(&p.a, wr::Read::new(into, remote.remote(64..8064).unwrap())).unwrap();
        let (c, [v0, v1]) = s.wait(t, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!((c.opcode(), c.byte_len()), (WcOpcode::RdmaRead, 8000));
        assert_eq!((v0.len(), v1.len()), (3000, 5000));
    })
    .unwrap();
    let (got0, got1) = (d0.as_slice(), d1.as_slice());
    assert_eq!(&got0[1000..4000], &source[64..3064]);
    assert_eq!(&got1[100..5100], &source[3064..8064]);
    assert!(got0[..1000].iter().all(|&b| b == 0x5a) && got1[..100].iter().all(|&b| b == 0x5a));
    assert!(got1[5100..].iter().all(|&b| b == 0x5a), "nothing beyond the second entry");
}

#[test]
fn owned_lists_of_chunks_come_back_whole() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, sge_caps(2, 3));
    let mut src = r.pd.alloc_mr(4 * 128, access::LOCAL_RW).unwrap().into_chunks(128).unwrap();
    for (i, c) in src.iter_mut().enumerate() {
        c.as_mut_slice().fill(i as u8 + 1);
    }
    let [c0, c1, c2, c3]: [Chunk<access::LocalRw>; 4] = src.try_into().unwrap();
    let mut dst = r.pd.alloc_mr(3 * 128, access::LOCAL_RW).unwrap().into_chunks(128).unwrap();
    for c in &mut dst {
        c.as_mut_slice().fill(0xee);
    }
    let dst: [Chunk<access::LocalRw>; 3] = dst.try_into().unwrap();
    let rt = p.b.post_recv_owned(wr::Recv::new(dst)).unwrap();
    // Chunks 0 and 2 as one SEND: 256 bytes into the first two entries of the receive.
    let st = p.a.post_send_owned(wr::Send::new((c0, c2))).unwrap();
    let (c, (c0, c2)) = st.wait(WAIT).unwrap();
    assert!(c.is_success(), "{c:?}");
    let (c, [d0, d1, d2]) = rt.wait(WAIT).unwrap();
    assert!(c.is_success(), "{c:?}");
    assert_eq!(c.byte_len(), 256);
    assert!(d0.as_slice().iter().all(|&b| b == 1), "chunk 0 into the first entry");
    assert!(d1.as_slice().iter().all(|&b| b == 3), "chunk 2 into the second");
    assert!(d2.as_slice().iter().all(|&b| b == 0xee), "the third entry untouched");
    assert!(c0.as_slice().iter().all(|&b| b == 1) && c2.as_slice().iter().all(|&b| b == 3));
    drop((c1, c3));
    assert_eq!(p.a.outstanding(), (0, 0));
}

#[test]
fn a_dropped_owned_list_is_parked_until_the_device_is_done() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, sge_caps(1, 2));
    let mut dst = r.pd.alloc_mr(2 * 64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap();
    let d1 = dst.pop().unwrap();
    let d0 = dst.pop().unwrap();
    let t = p.b.post_recv_owned(wr::Recv::new((d0, d1))).unwrap();
    drop(t); // in flight: the QP keeps the whole list
    assert_eq!(p.b.parked_buffers(), 1);
    let mut src = r.pd.alloc_mr(100, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(7);
    scope(|s| {
        let t = s.post_send(&p.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    let deadline = Instant::now() + WAIT;
    while p.b.parked_buffers() > 0 && Instant::now() < deadline {
        r.cq.progress().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(p.b.parked_buffers(), 0, "the receive completed: the list is released");
}

#[test]
fn a_forgotten_token_of_a_scattered_read_is_drained_before_the_scope_returns() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_read(), sge_caps(2, 1));
    let mut remote = r.pd.alloc_mr(1 << 20, access::REMOTE_RW).unwrap();
    let source = pattern(5, 0, 1 << 20);
    remote.write_volatile_from(0, &source).unwrap();
    let mut d0 = r.pd.alloc_mr(1 << 19, access::LOCAL_RW).unwrap();
    let mut d1 = r.pd.alloc_mr(1 << 19, access::LOCAL_RW).unwrap();
    scope(|s| {
        let into = (d0.slice_mut(..).unwrap(), d1.slice_mut(..).unwrap());
        let t = s.post_send(&p.a, wr::Read::new(into, remote.remote(..).unwrap())).unwrap();
        std::mem::forget(t);
    })
    .unwrap();
    // The scope returned: the device is done with both entries, so they hold the whole read.
    assert_eq!(d0.as_slice(), &source[..1 << 19]);
    assert_eq!(d1.as_slice(), &source[1 << 19..]);
    assert_eq!(p.a.outstanding(), (0, 0));
}

#[test]
fn lanes_post_prepared_lists_again_and_again() {
    const ROUNDS: usize = 20;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, sge_caps(2, 2));
    let head = patterned(&r.pd, 64, 11);
    let body = patterned(&r.pd, 256, 12);
    let mut dst = r.pd.alloc_mr(2 * 512, access::LOCAL_RW).unwrap();
    let mut got = Vec::new();
    scope(|s| {
        let mut send = s.send_lane(&mut p.a).unwrap();
        let mut recv = s.recv_lane(&mut p.b).unwrap();
        let (lo, _hi) = dst.slice_mut(..).unwrap().split_at(512).unwrap();
        let (lo_head, lo_rest) = lo.split_at(16).unwrap();
        let mut prepared_recv = recv.prepare(wr::Recv::new((lo_head, lo_rest))).unwrap();
        let mut msg = send.prepare(wr::Send::new([head.slice(..).unwrap(), body.slice(..).unwrap()])).unwrap();
        for _ in 0..ROUNDS {
            let rt = recv.post(&mut prepared_recv).unwrap();
            let t = send.post(&mut msg).unwrap();
            assert_eq!(send.wait(t, WAIT).unwrap().status(), WcStatus::Success);
            let c = recv.wait(rt, WAIT).unwrap();
            assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 320));
            let (h, rest) = prepared_recv.received().expect("completed");
            let mut bytes = vec![0u8; 320];
            h.read_volatile_into(&mut bytes[..16]);
            rest.read_volatile_into(&mut bytes[16..]);
            got.push(bytes);
        }
    })
    .unwrap();
    let sent = [head.as_slice(), body.as_slice()].concat();
    assert_eq!(got.len(), ROUNDS);
    assert!(got.iter().all(|g| *g == sent), "every round: the 64 + 256 bytes, scattered 16 + 304");
}

#[test]
fn inline_pieces_are_gathered_in_order() {
    let r = rig();
    let caps = QpCaps { max_send_sge: 3, max_inline_data: 64, ..QpCaps::default() };
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, caps);
    let mut dst = r.pd.alloc_mr(128, access::LOCAL_RW).unwrap();
    let (a, b, c) = (*b"header:", [0xabu8; 20], *b"-tail");
    scope(|s| {
        let rt = s.post_recv(&p.b, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let t = s.post_inline(&p.a, wr::InlineSend::gather([&a[..], &b[..], &c[..]])).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let (c, _) = s.wait(rt, WAIT).unwrap();
        assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 32));
    })
    .unwrap();
    assert_eq!(&dst.as_slice()[..32], &[&a[..], &b[..], &c[..]].concat()[..]);
    assert!(dst.as_slice()[32..].iter().all(|&x| x == 0));
    // Above max_inline_data in all: refused before the provider sees it.
    let big = [0u8; 40];
    let r =
        scope(|s| s.post_inline(&p.a, wr::InlineSend::gather([&big[..], &big[..]])).map(|_| ()).map_err(|e| e.error));
    assert!(matches!(r.unwrap(), Err(Error::InlineTooLarge { len: 80, .. })));
}

#[test]
fn lists_above_the_queue_limits_are_typed_errors_before_the_provider() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), sge_caps(1, 1));
    let (max_send, max_recv) = (p.a.caps().max_send_sge, p.b.caps().max_recv_sge);
    let src = patterned(&r.pd, 4096, 4);
    let mut dst = r.pd.alloc_mr(4096, access::REMOTE_RW).unwrap();
    // A list longer than any send queue the provider may have granted for one entry asked
    // (a provider may grant more than asked: rxe sizes a send entry for the inline data too).
    const LONG: usize = 33;
    assert!((max_send as usize) < LONG, "max_send_sge {max_send} granted for 1 asked: no list here exceeds it");
    scope(|s| {
        let list: [LocalBuf<'_>; LONG] = std::array::from_fn(|i| src.slice(i * 8..i * 8 + 8).unwrap());
        let r = s.post_send(&p.a, wr::Send::new(list)).map(|_| ());
        match r {
            Err(PostError { error: Error::TooManySges { queue: "send", n, max, .. }, wr: Some(_) }) => {
                assert_eq!((n, max), (LONG as u32, max_send))
            }
            other => panic!("{LONG} entries on a send queue of {max_send}: {:?}", other.map_err(|e| e.error)),
        }
        let (d0, d1) = dst.slice_mut(..16).unwrap().split_at(8).unwrap();
        let r = s.post_recv(&p.b, wr::Recv::new([d0, d1])).map(|_| ());
        match r {
            Err(PostError { error: Error::TooManySges { queue: "receive", n: 2, max, .. }, wr: Some(_) }) => {
                assert_eq!(max, max_recv)
            }
            other => panic!("two entries on a receive queue of {max_recv}: {:?}", other.map_err(|e| e.error)),
        }
    })
    .unwrap();
    assert_eq!(p.a.outstanding(), (0, 0));
    assert_eq!(p.b.outstanding(), (0, 0));
}

#[test]
fn an_srq_scatters_into_its_entries_and_refuses_more_than_it_was_made_for() {
    let r = rig();
    let srq = r.pd.create_srq_sge(16, 2).unwrap();
    let one = r.pd.create_srq(16).unwrap();
    let s1 = r.pd.create_qp::<RC>(&QpConfig::new(&r.cq)).unwrap();
    let r1 = r.pd.create_qp::<RC>(&QpConfig::new(&r.cq).srq(&srq)).unwrap();
    let (e1, e2) = (s1.endpoint(PORT, gid_index(), 7).unwrap(), r1.endpoint(PORT, gid_index(), 9).unwrap());
    let (s1, _r1) = (connect_rc(s1, Access::NONE, &e1, &e2), connect_rc(r1, Access::NONE, &e2, &e1));
    let mut dst = r.pd.alloc_mr(2 * 32, access::LOCAL_RW).unwrap().into_chunks(32).unwrap();
    let d1 = dst.pop().unwrap();
    let d0 = dst.pop().unwrap();
    let (d0, d1) = match one.post_recv_owned(wr::Recv::new((d0, d1))) {
        Err(PostError { error: Error::TooManySges { queue: "shared receive", n: 2, max: 1, .. }, wr: Some(wr) }) => {
            wr.into_buffer()
        }
        other => panic!("two entries on an SRQ of one: {:?}", other.map(|_| ()).map_err(|e| e.error)),
    };
    let t = srq.post_recv_owned(wr::Recv::new((d0, d1))).unwrap();
    let msg = patterned(&r.pd, 48, 6);
    scope(|s| {
        let st = s.post_send(&s1, wr::Send::new(msg.slice(..).unwrap())).unwrap();
        assert!(s.wait(st, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    let (c, (d0, d1)) = t.wait(WAIT).unwrap();
    assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 48));
    assert_eq!(d0.as_slice(), &msg.as_slice()[..32]);
    assert_eq!(&d1.as_slice()[..16], &msg.as_slice()[32..]);
    assert!(d1.as_slice()[16..].iter().all(|&b| b == 0));
}

/// Attack: a SEND gathered from 32 copies of one shared view of 128 MiB + 1 byte (a
/// `LocalBuf` is `Copy`) names 2^32 + 32 bytes, a length no message has: the provider sums
/// the entries into 32 bits. It must be refused with a typed error before the provider sees
/// it; if it is accepted, what each side saw is reported.
#[test]
fn a_gather_of_more_than_u32_max_bytes_is_refused_before_the_provider() {
    const N: usize = 32;
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, sge_caps(N as u32, 1));
    let len = (1usize << 27) + 1;
    let src = r.pd.alloc_mr(len, access::LOCAL_RW).unwrap();
    let mut dst = r.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    let v = src.slice(..).unwrap();
    assert_eq!([v; N].total_len(), (1u64 << 32) + N as u64);
    let seen = scope(|s| {
        let rt = s.post_recv(&p.b, wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        match s.post_send(&p.a, wr::Send::new([v; N])) {
            Err(PostError { error, wr: Some(_) }) => {
                assert_invalid(&error, "ibv_post_send", "one work request moves at most u32::MAX");
                // Nothing was sent: the receive is flushed so that the scope can end.
                s.flush(&p.b, WAIT).unwrap();
                let (c, _) = s.wait(rt, WAIT).unwrap();
                assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
                None
            }
            Err(e) => panic!("refused, but not before the provider: {:?}", e.error),
            Ok(st) => {
                let sent = s.wait(st, WAIT).map(|(c, _)| c);
                let got = s.wait(rt, Duration::from_secs(5)).map(|(c, _)| c);
                Some(format!("sender: {sent:?}; receiver: {got:?}"))
            }
        }
    })
    .unwrap();
    if let Some(seen) = seen {
        panic!("a gather of 2^32 + {N} bytes reached the provider: {seen}");
    }
}

/// Lists of no entry: a SEND of nothing lands as a message of 0 bytes in a receive of no
/// entry; both complete successfully and the queues are empty afterwards.
#[test]
fn lists_of_no_entry_send_and_receive_nothing() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, sge_caps(1, 1));
    scope(|s| {
        let none: [LocalBufMut<'_>; 0] = [];
        let rt = s.post_recv(&p.b, wr::Recv::new(none)).unwrap();
        let nothing: [LocalBuf<'_>; 0] = [];
        let st = s.post_send(&p.a, wr::Send::new(nothing)).unwrap();
        let (c, []) = s.wait(st, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        let (c, []) = s.wait(rt, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::Recv, 0));
    })
    .unwrap();
    assert_eq!((p.a.outstanding(), p.b.outstanding()), ((0, 0), (0, 0)));
}
