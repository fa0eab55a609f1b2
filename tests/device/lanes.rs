//! Send lanes on the device: prepared requests re-posted through the exclusive poster of a send
//! queue, their tokens, the error and flush paths, the scope's drain of a lane (unsignaled tail,
//! forgotten lane), and the checks of opening and posting (owned tokens outstanding, a request
//! of another lane, a full send queue).

use std::time::{Duration, Instant};

use typed_verbs::access::AccessSet;
use typed_verbs::prelude::*;
use typed_verbs::qp::ObservedState;
use typed_verbs::wc::CompletionSource;

use crate::common::*;

/// Byte `j` of the `i`-th slice of a source region: the slice's index in its first four bytes
/// (so that no two slices are alike), then a pattern that depends on both.
fn pattern(i: usize, j: usize) -> u8 {
    match j {
        0..=3 => (i as u32).to_le_bytes()[j],
        _ => (i.wrapping_mul(13) ^ j.wrapping_mul(7)) as u8,
    }
}

/// The `i`-th slice of `len` bytes after [`pattern`].
fn pattern_slice(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| pattern(i, j)).collect()
}

/// Fills `mr` with `n` slices of `len` bytes after [`pattern`].
fn fill_slices<A: typed_verbs::access::PeerCannotWrite>(mr: &mut Mr<A>, len: usize) {
    for (i, slice) in mr.as_mut_slice().chunks_mut(len).enumerate() {
        for (j, b) in slice.iter_mut().enumerate() {
            *b = pattern(i, j);
        }
    }
}

fn bytes<A: typed_verbs::access::AccessSet>(mr: &Mr<A>, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mr.read_volatile_into(offset, &mut v).unwrap();
    v
}

/// Waits (bounded) until `qp` is observed in `want` (rxe writes an error completion before it
/// moves the QP to ERR).
fn wait_state<T: typed_verbs::transport::Transport, S: typed_verbs::transport::QpState>(
    qp: &Qp<T, S>,
    want: ObservedState,
) -> ObservedState {
    let start = Instant::now();
    loop {
        let st = qp.query_state().expect("ibv_query_qp");
        if st == want || start.elapsed() > Duration::from_secs(5) {
            return st;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Resets both QPs of a pair and connects them again with fresh PSNs.
fn reconnect(p: RcPair, access: impl AccessSet, psn: u32) -> RcPair {
    let a = p.a.reset().expect("reset a");
    let b = p.b.reset().expect("reset b");
    assert_eq!(a.query_state().unwrap(), ObservedState::Reset);
    assert_eq!(a.outstanding(), (0, 0));
    let ea = a.endpoint(PORT, gid_index(), psn).unwrap();
    let eb = b.endpoint(PORT, gid_index(), psn + 0x100).unwrap();
    RcPair { a: connect_rc(a, access, &ea, &eb), b: connect_rc(b, access, &eb, &ea) }
}

/// One RDMA WRITE through a new lane on `p.a`, signaled and awaited: the QP and lanes on it work.
fn lane_write_ok(p: &mut RcPair, src: LocalBuf<'_>, remote: RemoteSlice<typed_verbs::access::RemoteRw>) {
    scope(|s| {
        let mut lane = s.send_lane(&mut p.a).expect("open a lane");
        let mut wr = lane.prepare(wr::Write::new(src, remote)).unwrap();
        let t = lane.post(&mut wr).unwrap();
        let c = lane.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::RdmaWrite), "{c:?}");
        assert_eq!(lane.outstanding(), 0);
    })
    .unwrap();
}

#[test]
fn a_write_lane_moves_1000_distinct_slices_with_every_16th_signaled() {
    const N: usize = 1000;
    const LEN: usize = 64;
    let r = rig();
    let caps = QpCaps { max_send_wr: 128, ..QpCaps::default() };
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), caps);
    let qpn = p.a.qp_num();
    let mut src = r.pd.alloc_mr(N * LEN, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, LEN);
    let target = r.pd.alloc_mr(N * LEN, access::REMOTE_RW).unwrap();
    assert!(bytes(&target, 0, N * LEN).iter().all(|&b| b == 0));

    let signaled = scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        // One prepared request per slice: request i writes source slice i to target slice i.
        let mut wrs: Vec<_> = (0..N)
            .map(|i| {
                let range = i * LEN..(i + 1) * LEN;
                lane.prepare(wr::Write::new(src.slice(range.clone()).unwrap(), target.remote(range).unwrap())).unwrap()
            })
            .collect();
        let mut pending = std::collections::VecDeque::new();
        let mut signaled = 0;
        for (i, wr) in wrs.iter_mut().enumerate() {
            if i % 16 == 15 || i == N - 1 {
                pending.push_back(lane.post(wr).unwrap());
            } else {
                lane.post_unsignaled(wr).unwrap();
            }
            // At most 4 signaled requests in flight: 4 * 16 + 15 < 128, the queue never fills.
            while pending.len() > 3 {
                let c = lane.wait(pending.pop_front().unwrap(), WAIT).unwrap();
                assert_eq!((c.status(), c.opcode(), c.qp_num()), (WcStatus::Success, WcOpcode::RdmaWrite, qpn));
                signaled += 1;
            }
        }
        for t in pending {
            let c = lane.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode(), c.qp_num()), (WcStatus::Success, WcOpcode::RdmaWrite, qpn));
            assert_eq!(c.source(), CompletionSource::Own);
            signaled += 1;
        }
        assert_eq!(lane.outstanding(), 0);
        signaled
    })
    .unwrap();

    assert_eq!(signaled, N / 16 + 1, "every 16th and the last");
    assert_eq!(p.a.outstanding(), (0, 0));
    let got = bytes(&target, 0, N * LEN);
    for i in 0..N {
        assert_eq!(&got[i * LEN..(i + 1) * LEN], &src.as_slice()[i * LEN..(i + 1) * LEN], "slice {i}");
    }
}

#[test]
fn a_read_lane_reposts_one_prepared_read_into_a_local_buf_mut() {
    const LEN: usize = 3000;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_read(), QpCaps::default());
    let mut remote = r.pd.alloc_mr(4096, access::REMOTE_READ_ONLY).unwrap();
    let mut local = r.pd.alloc_mr(4096, access::LOCAL_RW).unwrap();
    local.as_mut_slice().fill(0xee);

    scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut read =
            lane.prepare(wr::Read::new(local.slice_mut(..LEN).unwrap(), remote.remote(500..).unwrap())).unwrap();
        for round in 0..4u8 {
            // The remote region changes between rounds: each post reads it anew.
            fill(&mut remote, round.wrapping_mul(50));
            for _ in 0..round {
                lane.post_unsignaled(&mut read).unwrap();
            }
            let t = lane.post(&mut read).unwrap();
            let c = lane.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::RdmaRead), "{c:?}");
            assert_eq!(c.byte_len(), LEN as u32, "a READ completion reports the bytes read");
            assert_eq!(lane.outstanding(), 0);
        }
    })
    .unwrap();

    assert_eq!(&local.as_slice()[..LEN], &remote.as_slice()[500..500 + LEN], "the last round's data");
    assert!(local.as_slice()[LEN..].iter().all(|&b| b == 0xee), "nothing beyond the view was written");
}

/// Polls `cq` (routing what it finds) until `lane` has nothing outstanding; returns how many
/// completions that took.
fn drain_lane(cq: &Cq, lane: &SendLane<'_, RC, RTS>) -> usize {
    let (deadline, mut polled) = (Instant::now() + WAIT, 0);
    while lane.outstanding() > 0 && Instant::now() < deadline {
        polled += cq.progress().unwrap();
    }
    assert_eq!(lane.outstanding(), 0, "the lane's requests completed within {WAIT:?}");
    polled
}

#[test]
fn a_post_list_goes_in_one_call_signaled_every_cq_mod_and_at_its_end() {
    // 12 WRITEs chained, signaled every 4th: one post makes 3 completions, writes every slice,
    // and its token's completion covers the list. A list of 10 signaled every 4th also
    // signals its last (3 completions again).
    const LEN: usize = 64;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), QpCaps::default());
    let mut src = r.pd.alloc_mr(12 * LEN, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, LEN);
    let target = r.pd.alloc_mr(12 * LEN, access::LOCAL_REMOTE_WRITE).unwrap();
    scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let writes = |n: usize| -> Vec<_> {
            (0..n)
                .map(|i| {
                    let range = i * LEN..(i + 1) * LEN;
                    wr::Write::new(src.slice(range.clone()).unwrap(), target.remote(range).unwrap())
                })
                .collect()
        };
        for (n, every, completions) in [(12, 4, 3), (10, 4, 3), (5, 1, 5)] {
            let mut list = lane.prepare_list(writes(n), every).unwrap();
            assert_eq!(list.len(), n);
            let t = lane.post_list(&mut list).unwrap();
            assert_eq!(lane.outstanding(), n as u64);
            assert_eq!(drain_lane(&r.cq, &lane), completions, "{n} requests signaled every {every}");
            let c = lane.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::RdmaWrite));
            // Posted again: the same chain, new numbers.
            let t = lane.post_list(&mut list).unwrap();
            assert!(lane.wait(t, WAIT).unwrap().is_success());
            assert_eq!(list.into_inner().expect("nothing outstanding").len(), n);
        }
    })
    .unwrap();
    assert_eq!(bytes(&target, 0, 12 * LEN), bytes(&src, 0, 12 * LEN));
}

#[test]
fn a_post_list_is_checked_whole_and_keeps_the_unsignaled_run_short() {
    // Refused before anything is posted: an empty list, a list longer than the queue, a CQ
    // moderation longer than the lane's longest unsignaled run, a list with no room left.
    // A list after a run of unsignaled posts signals its first request when its own leading
    // unsignaled requests would make the run too long.
    let r = rig();
    let caps = QpCaps { max_send_wr: 16, ..QpCaps::default() };
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), caps);
    // The lane keeps the depth asked for (the provider may grant more).
    let depth = caps.max_send_wr as usize;
    let max_run = (depth / 2).max(1);
    let src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let target = r.pd.alloc_mr(64, access::LOCAL_REMOTE_WRITE).unwrap();
    scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let write = || wr::Write::new(src.slice(..).unwrap(), target.remote(..).unwrap());
        let invalid = |e: typed_verbs::scope::PostError<Vec<_>>, n: usize, why: &str| {
            assert_invalid(&e.error, "SendLane::prepare_list", why);
            assert_eq!(e.wr.expect("refused before the provider: handed back").len(), n, "the requests come back");
        };
        invalid(lane.prepare_list(Vec::new(), 1).unwrap_err(), 0, "an empty post list");
        let too_long = lane.prepare_list((0..depth + 1).map(|_| write()).collect(), 1).unwrap_err();
        invalid(too_long, depth + 1, "requests on a send queue of");
        let signal_every = "it must be 1 to";
        invalid(lane.prepare_list(vec![write(), write()], 0).unwrap_err(), 2, signal_every);
        invalid(lane.prepare_list(vec![write(), write()], max_run + 1).unwrap_err(), 2, signal_every);

        // max_run - 1 unsignaled posts, then a list of 4 signaled every 4: its first three
        // would make the run too long, so its first request is signaled too (2 completions).
        let mut one = lane.prepare(write()).unwrap();
        for _ in 0..max_run - 1 {
            lane.post_unsignaled(&mut one).unwrap();
        }
        let mut list = lane.prepare_list((0..4).map(|_| write()).collect(), 4).unwrap();
        let t = lane.post_list(&mut list).unwrap();
        assert_eq!(drain_lane(&r.cq, &lane), 2, "the list's first and last requests");
        assert!(lane.wait(t, WAIT).unwrap().is_success());

        // A full queue: a list that does not fit is refused whole.
        let mut big = lane.prepare_list((0..depth).map(|_| write()).collect(), max_run).unwrap();
        let t = lane.post_list(&mut big).unwrap();
        assert!(matches!(lane.post_list(&mut list), Err(Error::QueueFull { queue: "send", .. })));
        assert_eq!(lane.outstanding(), depth as u64, "nothing of the refused list was posted");
        assert!(lane.wait(t, WAIT).unwrap().is_success());
        let t = lane.post_list(&mut list).unwrap();
        assert!(lane.wait(t, WAIT).unwrap().is_success());
        assert_eq!(lane.outstanding(), 0);
    })
    .unwrap();
}

#[test]
fn a_prepared_request_is_given_back_only_when_its_lane_has_nothing_outstanding() {
    // A READ's destination is memory the device writes: `into_inner` refuses while the READ
    // (or an unsignaled run of it) is outstanding, and gives the request back once the lane's
    // last signaled request completed.
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_read(), QpCaps::default());
    let remote = r.pd.alloc_mr(64, access::REMOTE_READ_ONLY).unwrap();
    let mut local = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let read = lane.prepare(wr::Read::new(local.slice_mut(..).unwrap(), remote.remote(..).unwrap())).unwrap();
        let mut read = lane.prepare(read.into_inner().expect("never posted")).unwrap();
        lane.post_unsignaled(&mut read).unwrap();
        let mut read = read.into_inner().expect_err("an unsignaled READ is outstanding");
        let t = lane.post(&mut read).unwrap();
        let read = read.into_inner().expect_err("posted, its completion not polled");
        assert!(lane.wait(t, WAIT).unwrap().is_success());
        assert_eq!(lane.outstanding(), 0);
        read.into_inner().expect("the lane's last request completed, and the unsignaled one before it");
    })
    .unwrap();
}

#[test]
fn a_send_lane_on_rc_fills_the_peers_receives() {
    const N: usize = 16;
    const SLOT: usize = 256;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(4 * SLOT, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, SLOT);
    let mut dst = r.pd.alloc_mr(N * SLOT + 1, access::LOCAL_RW).unwrap();
    // Message k (of 4 prepared ones) is 100 + 10 k bytes of source slice k.
    let msg_len = |k: usize| 100 + 10 * k;

    scope(|s| {
        let mut rest = dst.slice_mut(..).unwrap();
        let mut recvs = Vec::new();
        for _ in 0..N {
            let (slot, tail) = rest.split_at(SLOT).unwrap();
            recvs.push(s.post_recv(&p.b, wr::Recv::new(slot)).unwrap());
            rest = tail;
        }
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut sends: Vec<_> = (0..4)
            .map(|k| lane.prepare(wr::Send::new(src.slice(k * SLOT..k * SLOT + msg_len(k)).unwrap())).unwrap())
            .collect();
        let mut tokens = Vec::new();
        for i in 0..N {
            let wr = &mut sends[i % 4];
            if i % 4 == 3 {
                tokens.push(lane.post(wr).unwrap());
            } else {
                lane.post_unsignaled(wr).unwrap();
            }
        }
        for t in tokens {
            let c = lane.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::Send), "{c:?}");
        }
        assert_eq!(lane.outstanding(), 0);
        for (i, t) in recvs.into_iter().enumerate() {
            let (c, _) = s.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::Recv), "{c:?}");
            assert_eq!(c.byte_len() as usize, msg_len(i % 4), "receive {i}");
        }
    })
    .unwrap();

    for i in 0..N {
        let k = i % 4;
        let got = &dst.as_slice()[i * SLOT..i * SLOT + msg_len(k)];
        assert_eq!(got, &src.as_slice()[k * SLOT..k * SLOT + msg_len(k)], "message {i}");
    }
    assert_eq!(p.b.outstanding(), (0, 0));
}

#[test]
fn a_ud_lane_posts_one_addressed_send_n_times() {
    const N: usize = 8;
    const SLOT: usize = 512;
    const LEN: usize = 200;
    let r = rig();
    let mut a = ud_qp(&r.pd, &r.cq, QpCaps::default());
    let b = ud_qp(&r.pd, &r.cq, QpCaps::default());
    let a_qpn = a.qp_num();
    let eb = b.endpoint(PORT, gid_index(), 0).unwrap();
    let ah = r.pd.create_ah(&AddressVector::global(PORT, eb.gid, gid_index())).unwrap();
    let mut src = r.pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    fill(&mut src, 77);
    let mut rbuf = r.pd.alloc_mr(N * SLOT + 1, access::LOCAL_RW).unwrap();

    scope(|s| {
        let mut rest = rbuf.slice_mut(..).unwrap();
        let mut recvs = Vec::new();
        for _ in 0..N {
            let (slot, tail) = rest.split_at(SLOT).unwrap();
            recvs.push(s.post_recv(&b, wr::Recv::new(slot)).unwrap());
            rest = tail;
        }
        let mut lane = s.send_lane(&mut a).unwrap();
        let mut send = lane.prepare(wr::Send::new(src.slice(..LEN).unwrap()).to(&ah, eb.qp_num, QKEY)).unwrap();
        let mut tokens = Vec::new();
        for i in 0..N {
            if i % 2 == 1 {
                tokens.push(lane.post(&mut send).unwrap());
            } else {
                lane.post_unsignaled(&mut send).unwrap();
            }
        }
        assert_eq!(tokens.len(), N / 2);
        for t in tokens {
            let c = lane.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode(), c.qp_num()), (WcStatus::Success, WcOpcode::Send, a_qpn), "{c:?}");
        }
        for (i, t) in recvs.into_iter().enumerate() {
            let (c, _) = s.wait(t, WAIT).unwrap_or_else(|e| panic!("receive {i}: {}", e.error));
            assert!(c.is_success(), "{c:?}");
            // UD receive buffers start with the 40-byte GRH.
            assert_eq!((c.byte_len() as usize, c.src_qp()), (40 + LEN, a_qpn), "receive {i}");
        }
    })
    .unwrap();

    for i in 0..N {
        assert_eq!(&rbuf.as_slice()[i * SLOT + 40..i * SLOT + 40 + LEN], &src.as_slice()[..LEN], "message {i}");
    }
    assert_eq!(b.outstanding(), (0, 0));
}

#[test]
fn a_lane_write_to_a_bad_rkey_fails_and_flushes_the_later_requests() {
    let r = rig();
    let access = Access::NONE.remote_write();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, access, QpCaps::default());
    let qpn = p.a.qp_num();
    let mut src = r.pd.alloc_mr(1024, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, 64);
    let target = r.pd.alloc_mr(1024, access::REMOTE_RW).unwrap();
    let good = target.remote(..).unwrap();
    // The right address with a wrong key: the responder rejects it.
    let bad = RemoteSlice::<access::RemoteRw>::from_wire(target.addr(), 1024, good.rkey() ^ 0xff);

    let (ok, failed, flushed) = scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let slice = |i: usize| src.slice(i * 64..(i + 1) * 64).unwrap();
        let mut w0 = lane.prepare(wr::Write::new(slice(0), target.remote(0..64).unwrap())).unwrap();
        let mut w1 = lane.prepare(wr::Write::new(slice(1), target.remote(64..128).unwrap())).unwrap();
        let mut wbad = lane.prepare(wr::Write::new(slice(2), bad)).unwrap();
        let mut later = lane.prepare(wr::Write::new(slice(3), target.remote(192..256).unwrap())).unwrap();
        // Posted back to back: the error arrives after all of them are on the send queue.
        lane.post_unsignaled(&mut w0).unwrap();
        let t_ok = lane.post(&mut w1).unwrap();
        let t_bad = lane.post(&mut wbad).unwrap();
        let t_later1 = lane.post(&mut later).unwrap();
        lane.post_unsignaled(&mut later).unwrap();
        let t_later2 = lane.post(&mut later).unwrap();

        let ok = lane.wait(t_ok, WAIT).unwrap();
        let failed = lane.wait(t_bad, WAIT).unwrap();
        let flushed = [lane.wait(t_later1, WAIT).unwrap(), lane.wait(t_later2, WAIT).unwrap()];
        assert_eq!(lane.outstanding(), 0, "the flush completed every request");
        (ok, failed, flushed)
    })
    .expect("everything completed (with errors): the scope drains without forcing a reset");

    assert_eq!((ok.status(), ok.opcode()), (WcStatus::Success, WcOpcode::RdmaWrite), "{ok:?}");
    assert_eq!(failed.status(), WcStatus::RemAccessErr, "{failed:?}");
    assert_eq!((failed.qp_num(), failed.source()), (qpn, CompletionSource::Own), "{failed:?}");
    for c in flushed {
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
        assert_eq!(c.qp_num(), qpn);
        assert_ne!(c.source(), CompletionSource::ForcedReset, "a flush completion of the device: {c:?}");
    }
    assert_eq!(wait_state(&p.a, ObservedState::Err), ObservedState::Err, "the error moved the QP to ERR");
    assert_eq!(p.a.outstanding(), (0, 0));
    assert_eq!(bytes(&target, 0, 128), &src.as_slice()[..128], "the writes before the error landed");

    // Reset and reconnect: a new lane on the same QP works.
    let mut p = reconnect(p, access, 0x7100);
    lane_write_ok(&mut p, src.slice(512..576).unwrap(), target.remote(512..576).unwrap());
    assert_eq!(bytes(&target, 512, 64), &src.as_slice()[512..576]);
}

/// The same end with scope tokens: the last request posted is unsignaled, its token dropped.
#[test]
fn a_scope_ending_with_an_unsignaled_token_request_breaks_the_qp_within_the_tail_grace() {
    let r = rig();
    let access = Access::NONE.remote_write();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, access, QpCaps::default());
    let mut src = r.pd.alloc_mr(128, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, 64);
    let target = r.pd.alloc_mr(128, access::REMOTE_RW).unwrap();

    let started = Instant::now();
    let res = scope(|s| {
        let t = s.post_send(&p.a, wr::Write::new(src.slice(..64).unwrap(), target.remote(..64).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
        let wr = wr::Write::new(src.slice(64..).unwrap(), target.remote(64..).unwrap()).unsignaled();
        drop(s.post_send(&p.a, wr).unwrap());
    });
    assert_the_tail_broke_the_qp("a scope with an unsignaled token tail", res, started.elapsed(), &p, &target);
    assert_the_tail_no_longer_reads(&mut src, &target);
}

/// The scope returned: the device no longer reads `src`, the unsignaled tail's source. A new
/// pattern written into it never reaches the tail's target (`target[64..128]`).
fn assert_the_tail_no_longer_reads(src: &mut Mr<access::LocalRead>, target: &Mr<access::RemoteRw>) {
    src.as_mut_slice().fill(0x5a);
    std::thread::sleep(Duration::from_millis(100));
    assert_ne!(bytes(target, 64, 64), vec![0x5a; 64], "the device read the tail's source after the scope");
}

/// After a scope on `p.a` that ended with an unsignaled tail behind one signaled 64-byte write
/// to `target`: the scope reported the QP broken without waiting the 5 s flush wait (only the
/// tail was left once the QP was in ERR: its grace is 0.2 s), the drain forced the QP to
/// RESET, and the signaled write had landed.
fn assert_the_tail_broke_the_qp<R: std::fmt::Debug>(
    what: &str,
    res: Result<R>,
    took: Duration,
    p: &RcPair,
    target: &Mr<access::RemoteRw>,
) {
    eprintln!("{what}: the scope returned {res:?} after {took:?}");
    match res {
        Err(Error::QpBroken { qp_num }) => assert_eq!(qp_num, p.a.qp_num()),
        other => panic!("expected QpBroken, got {other:?}"),
    }
    assert!(took < Duration::from_secs(3), "the tail's grace, not the 5 s flush wait: {took:?}");
    assert_eq!(p.a.outstanding(), (0, 0));
    assert_eq!(p.a.query_state().unwrap(), ObservedState::Reset, "the drain forced the QP to RESET");
    assert_eq!(bytes(target, 0, 64), pattern_slice(0, 64), "the signaled write had landed");
}

#[test]
fn an_unsignaled_tail_breaks_the_qp_until_it_is_reset() {
    let r = rig();
    let access = Access::NONE.remote_write();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, access, QpCaps::default());
    let qpn = p.a.qp_num();
    let mut src = r.pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, 64);
    let target = r.pd.alloc_mr(256, access::REMOTE_RW).unwrap();

    let started = Instant::now();
    let res = scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut w0 = lane.prepare(wr::Write::new(src.slice(..64).unwrap(), target.remote(..64).unwrap())).unwrap();
        let mut w1 =
            lane.prepare(wr::Write::new(src.slice(64..128).unwrap(), target.remote(64..128).unwrap())).unwrap();
        let t = lane.post(&mut w0).unwrap();
        assert!(lane.wait(t, WAIT).unwrap().is_success());
        // The last request of the lane is unsignaled: no completion will ever say it is done.
        lane.post_unsignaled(&mut w1).unwrap();
        assert_eq!(lane.outstanding(), 1);
        "the closure's result is lost"
    });
    assert_the_tail_broke_the_qp("a lane with an unsignaled tail", res, started.elapsed(), &p, &target);
    assert_the_tail_no_longer_reads(&mut src, &target);

    // Broken until reset: no lane opens.
    scope(|s| match s.send_lane(&mut p.a) {
        Err(Error::QpBroken { qp_num }) => assert_eq!(qp_num, qpn),
        other => panic!("expected QpBroken, got {other:?}"),
    })
    .unwrap();

    let mut p = reconnect(p, access, 0x7200);
    lane_write_ok(&mut p, src.slice(128..).unwrap(), target.remote(128..).unwrap());
    assert!(bytes(&target, 128, 128).iter().all(|&b| b == 0x5a));
}

#[test]
fn a_forgotten_lane_is_still_drained_by_its_scope() {
    const BIG: usize = 1 << 20;
    let r = rig();
    let access = Access::NONE.remote_write().remote_read();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, access, QpCaps::default());
    let mut src = r.pd.alloc_mr(8 * 64, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, 64);
    let target = r.pd.alloc_mr(8 * 64, access::REMOTE_RW).unwrap();
    let mut remote = r.pd.alloc_mr(BIG, access::REMOTE_READ_ONLY).unwrap();
    fill(&mut remote, 3);
    let mut local = r.pd.alloc_mr(BIG, access::LOCAL_RW).unwrap();

    let res = scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut writes: Vec<_> = (0..7)
            .map(|i| {
                let range = i * 64..(i + 1) * 64;
                lane.prepare(wr::Write::new(src.slice(range.clone()).unwrap(), target.remote(range).unwrap())).unwrap()
            })
            .collect();
        // The last request, signaled, is a 1 MiB READ: the device writes `local` for a while.
        let mut read = lane.prepare(wr::Read::new(local.slice_mut(..).unwrap(), remote.remote(..).unwrap())).unwrap();
        for w in &mut writes {
            lane.post_unsignaled(w).unwrap();
        }
        let token = lane.post(&mut read).unwrap();
        assert_eq!(lane.outstanding(), 8);
        // Neither has a `Drop` (forgetting them is dropping them, says clippy): what matters is
        // that the scope, not the lane, waits for the device, whatever happens to the lane.
        #[allow(clippy::forget_non_drop)]
        {
            std::mem::forget(token);
            std::mem::forget(lane);
        }
        42
    });
    assert_eq!(res.expect("the last request was signaled: the drain waits for it"), 42);
    assert_eq!(p.a.outstanding(), (0, 0));
    assert_eq!(local.as_slice(), remote.as_slice(), "the READ had landed when the scope returned");
    assert_eq!(bytes(&target, 0, 7 * 64), &src.as_slice()[..7 * 64]);
    local.as_mut_slice().fill(0); // reuse is allowed now

    // A new lane opens on the same QP in a later scope.
    lane_write_ok(&mut p, src.slice(7 * 64..).unwrap(), target.remote(7 * 64..).unwrap());
    assert_eq!(bytes(&target, 7 * 64, 64), &src.as_slice()[7 * 64..]);
}

#[test]
fn a_lane_does_not_open_while_an_owned_token_is_outstanding() {
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), QpCaps::default());
    let target = r.pd.alloc_mr(512, access::REMOTE_RW).unwrap();
    let mut chunks = r.pd.alloc_mr(2 * 256, access::LOCAL_RW).unwrap().into_chunks(256).unwrap();
    let mut chunk = chunks.pop().unwrap();
    chunk.as_mut_slice().fill(0xab);
    let mut src = r.pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0xcd);

    let token = p.a.post_send_owned(wr::Write::new(chunk, target.remote(..256).unwrap())).unwrap();
    // Nothing polls the CQ meanwhile: the owned request stays outstanding for the library.
    assert_eq!(p.a.outstanding(), (1, 0));
    scope(|s| match s.send_lane(&mut p.a) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("outstanding"), "{reason}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    })
    .unwrap();

    let (c, chunk) = token.wait(WAIT).unwrap();
    assert_eq!(c.status(), WcStatus::Success, "{c:?}");
    assert_eq!(p.a.outstanding(), (0, 0));
    lane_write_ok(&mut p, src.slice(..).unwrap(), target.remote(256..).unwrap());
    assert!(bytes(&target, 0, 256).iter().all(|&b| b == 0xab));
    assert!(bytes(&target, 256, 256).iter().all(|&b| b == 0xcd));
    drop(chunk);
}

#[test]
fn a_request_prepared_on_one_lane_is_refused_by_another() {
    let r = rig();
    let RcPair { mut a, mut b } = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), QpCaps::default());
    let (a_qpn, b_qpn) = (a.qp_num(), b.qp_num());
    let mut src = r.pd.alloc_mr(128, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, 64);
    let target = r.pd.alloc_mr(128, access::REMOTE_RW).unwrap();

    scope(|s| {
        let mut lane_a = s.send_lane(&mut a).unwrap();
        let mut lane_b = s.send_lane(&mut b).unwrap();
        let mut wa = lane_a.prepare(wr::Write::new(src.slice(..64).unwrap(), target.remote(..64).unwrap())).unwrap();
        let mut wb = lane_b.prepare(wr::Write::new(src.slice(64..).unwrap(), target.remote(64..).unwrap())).unwrap();
        match lane_b.post(&mut wa) {
            Err(e) => assert_invalid(&e, "send lane", "the request or token belongs to another lane than QP"),
            other => panic!("lane B posted lane A's request: {other:?}"),
        }
        match lane_b.post_unsignaled(&mut wa) {
            Err(e) => assert_invalid(&e, "send lane", "the request or token belongs to another lane than QP"),
            other => panic!("lane B posted lane A's request unsignaled: {other:?}"),
        }
        assert_eq!((lane_a.outstanding(), lane_b.outstanding()), (0, 0), "nothing was posted");

        let tb = lane_b.post(&mut wb).unwrap();
        let ta = lane_a.post(&mut wa).unwrap();
        // A token of lane A is not lane B's either; it comes back, still valid.
        let e = lane_b.wait(ta, WAIT).expect_err("a token of another lane");
        assert_invalid(&e.error, "send lane", "the request or token belongs to another lane than QP");
        let ta = e.token;
        let cb = lane_b.wait(tb, WAIT).unwrap();
        assert_eq!((cb.status(), cb.opcode(), cb.qp_num()), (WcStatus::Success, WcOpcode::RdmaWrite, b_qpn));
        let ca = lane_a.wait(ta, WAIT).unwrap();
        assert_eq!((ca.status(), ca.opcode(), ca.qp_num()), (WcStatus::Success, WcOpcode::RdmaWrite, a_qpn));
        assert_eq!((lane_a.outstanding(), lane_b.outstanding()), (0, 0));
    })
    .unwrap();
    assert_eq!(bytes(&target, 0, 128), src.as_slice());
}

/// The caps of the queue-full tests: a shallow send queue.
fn shallow() -> QpCaps {
    QpCaps { max_send_wr: 8, ..QpCaps::default() }
}

#[test]
fn a_full_send_queue_is_queue_full_until_tokens_are_collected() {
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), shallow());
    let qpn = p.a.qp_num();
    // The lane keeps the depth asked for (the provider may grant more).
    let depth = shallow().max_send_wr as usize;
    assert!(depth >= 8, "asked {depth}");
    let mut src = r.pd.alloc_mr(4 * 64, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, 64);
    let target = r.pd.alloc_mr(4 * 64, access::REMOTE_RW).unwrap();

    let (filled, posted_after) = scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut wrs: Vec<_> = (0..4)
            .map(|i| {
                let range = i * 64..(i + 1) * 64;
                lane.prepare(wr::Write::new(src.slice(range.clone()).unwrap(), target.remote(range).unwrap())).unwrap()
            })
            .collect();
        // No waits: every third request signaled, the rest unsignaled, until the queue is full.
        let mut tokens = Vec::new();
        let mut posted = 0;
        loop {
            assert!(posted <= 4 * depth, "{posted} posts on a queue of {depth} without QueueFull");
            let wr = &mut wrs[posted % 4];
            let res = if posted % 3 == 2 { lane.post(wr).map(|t| tokens.push(t)) } else { lane.post_unsignaled(wr) };
            match res {
                Ok(()) => posted += 1,
                Err(Error::QueueFull { queue, qp_num, depth: d }) => {
                    assert_eq!((queue, qp_num, d as usize), ("send", qpn, depth));
                    break;
                }
                Err(e) => panic!("post {posted}: {e}"),
            }
        }
        assert_eq!(lane.outstanding(), posted as u64);
        // Still full when asked again (nothing polled meanwhile).
        assert!(matches!(lane.post(&mut wrs[0]), Err(Error::QueueFull { .. })));
        assert!(matches!(lane.post_unsignaled(&mut wrs[0]), Err(Error::QueueFull { .. })));

        // Collect the tokens: the queue drains up to the last of them.
        for t in tokens {
            let c = lane.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::RdmaWrite), "{c:?}");
        }
        // Posting continues: a signaled request covers what followed the last token, then
        // rounds that fill the queue exactly, each ended by a signaled request and its wait.
        let mut posted_after = 0;
        let t = lane.post(&mut wrs[0]).unwrap();
        assert!(lane.wait(t, WAIT).unwrap().is_success());
        posted_after += 1;
        assert_eq!(lane.outstanding(), 0);
        for round in 0..3 {
            for j in 0..depth - 1 {
                lane.post_unsignaled(&mut wrs[j % 4]).unwrap_or_else(|e| panic!("round {round}, post {j}: {e}"));
            }
            let t = lane.post(&mut wrs[round % 4]).unwrap();
            let c = lane.wait(t, WAIT).unwrap();
            assert!(c.is_success(), "{c:?}");
            assert_eq!(lane.outstanding(), 0);
            posted_after += depth;
        }
        (posted, posted_after)
    })
    .unwrap();
    assert_eq!(filled, depth, "the queue holds exactly its depth");
    assert_eq!(posted_after, 1 + 3 * depth);
    assert_eq!(bytes(&target, 0, 4 * 64), src.as_slice());
}

#[test]
fn forced_signals_keep_an_all_unsignaled_lane_from_deadlocking() {
    forced_signals_keep_a_lane_live(shallow());
}

/// On a send queue one request deep, no lane request may go unsignaled: one would fill the
/// queue with a request that nothing completes, and every later post would be `QueueFull`
/// (the unsignaled run is `depth / 2`, 0 there).
#[test]
fn a_lane_on_a_one_deep_send_queue_signals_every_request() {
    forced_signals_keep_a_lane_live(QpCaps { max_send_wr: 1, ..QpCaps::default() });
}

/// Only unsignaled posts on a lane of a queue of depth `caps.max_send_wr`: they go on, the
/// queue full now and then, until a forced signal's completion makes room.
fn forced_signals_keep_a_lane_live(caps: QpCaps) {
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), caps);
    let depth = caps.max_send_wr as usize; // the lane keeps the depth asked for
    let mut src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    fill_slices(&mut src, 64);
    let target = r.pd.alloc_mr(64, access::REMOTE_RW).unwrap();

    let fulls = scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut wr = lane.prepare(wr::Write::new(src.slice(..).unwrap(), target.remote(..).unwrap())).unwrap();
        // Only unsignaled posts, 10 queues' worth: whenever the queue is full, polling the CQ
        // (no token to wait on) finds a forced-signaled completion that makes room.
        let mut fulls = 0;
        let mut posted = 0;
        let deadline = Instant::now() + WAIT;
        while posted < 10 * depth {
            match lane.post_unsignaled(&mut wr) {
                Ok(()) => posted += 1,
                Err(Error::QueueFull { .. }) => {
                    fulls += 1;
                    assert!(Instant::now() < deadline, "no room after {posted} posts: deadlocked");
                    r.cq.progress().unwrap();
                }
                Err(e) => panic!("post {posted}: {e}"),
            }
        }
        // End with a signaled request, so the scope has nothing uncovered to drain (on a
        // queue one deep, once the last forced signal's completion made room).
        let t = loop {
            match lane.post(&mut wr) {
                Err(Error::QueueFull { .. }) if Instant::now() < deadline => r.cq.progress().map(drop).unwrap(),
                t => break t.unwrap(),
            }
        };
        assert!(lane.wait(t, WAIT).unwrap().is_success());
        assert_eq!(lane.outstanding(), 0);
        fulls
    })
    .unwrap();
    assert!(fulls > 0, "10 queues' worth of posts without a wait never found the queue full");
    assert_eq!(bytes(&target, 0, 64), src.as_slice());
}

#[test]
fn inline_requests_are_prepared_once_and_copied_at_each_post() {
    let r = rig();
    let caps = QpCaps { max_inline_data: 64, ..QpCaps::default() };
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), caps);
    let max = p.a.caps().max_inline_data as usize;
    assert!(max >= 48, "granted {max}");
    let data: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(5).wrapping_add(1)).collect();
    let too_big = vec![7u8; max + 1];
    let target = r.pd.alloc_mr(4 * 64, access::REMOTE_RW).unwrap();
    let mut rbuf = r.pd.alloc_mr(4 * 64 + 1, access::LOCAL_RW).unwrap();

    scope(|s| {
        let mut rest = rbuf.slice_mut(..).unwrap();
        let mut recvs = Vec::new();
        for _ in 0..4 {
            let (slot, tail) = rest.split_at(64).unwrap();
            recvs.push(s.post_recv(&p.b, wr::Recv::new(slot)).unwrap());
            rest = tail;
        }
        let mut lane = s.send_lane(&mut p.a).unwrap();
        // The inline size is checked once, when preparing.
        match lane.prepare(wr::InlineSend::new(&too_big)) {
            Err(e) => assert!(matches!(e.error, Error::InlineTooLarge { len, .. } if len == max + 1), "{:?}", e.error),
            Ok(_) => panic!("an inline payload of {} bytes was prepared on a QP with max_inline_data {max}", max + 1),
        }
        let mut writes: Vec<_> = (0..4)
            .map(|i| lane.prepare(wr::InlineWrite::new(&data[..16 + 8 * i], target.remote(i * 64..).unwrap())).unwrap())
            .collect();
        let mut send = lane.prepare(wr::InlineSend::new(&data[..40])).unwrap();
        for w in &mut writes {
            lane.post_unsignaled(w).unwrap();
        }
        let mut tokens = Vec::new();
        for i in 0..4 {
            if i % 2 == 1 {
                tokens.push(lane.post(&mut send).unwrap());
            } else {
                lane.post_unsignaled(&mut send).unwrap();
            }
        }
        for t in tokens {
            let c = lane.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::Send), "{c:?}");
        }
        for t in recvs {
            let (c, _) = s.wait(t, WAIT).unwrap();
            assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 40), "{c:?}");
        }
    })
    .unwrap();

    for i in 0..4 {
        let len = 16 + 8 * i;
        assert_eq!(bytes(&target, i * 64, len), &data[..len], "write {i}");
        assert!(bytes(&target, i * 64 + len, 64 - len).iter().all(|&b| b == 0), "write {i} wrote too much");
        assert_eq!(&rbuf.as_slice()[i * 64..i * 64 + 40], &data[..40], "send {i}");
    }
}

/// Posts `$wr` once through `$lane`, signaled, and returns its completion.
macro_rules! lane_once {
    ($lane:expr, $wr:expr) => {{
        let mut wr = $lane.prepare($wr).unwrap();
        let t = $lane.post(&mut wr).unwrap();
        $lane.wait(t, WAIT).unwrap()
    }};
}

#[test]
fn lane_completions_report_what_the_device_reports() {
    let r = rig();
    let access = Access::NONE.remote_write().remote_read().remote_atomic();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, access, QpCaps::default());
    let mut src = r.pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    fill(&mut src, 17);
    let target = r.pd.alloc_mr(256, access::REMOTE_ALL).unwrap();
    let mut local = r.pd.alloc_mr(256, access::LOCAL_RW).unwrap();
    let mut rbuf = r.pd.alloc_mr(512, access::LOCAL_RW).unwrap();
    let word = || target.remote(128..136).unwrap();
    const KINDS: [&str; 6] = ["write", "write_imm", "send", "read", "fetch_add", "compare_swap"];

    // The device's completions, through scope tokens.
    let device = scope(|s| {
        let (rd, rest) = local.slice_mut(..).unwrap().split_at(64).unwrap();
        let (fa, rest) = rest.split_at(8).unwrap();
        let (cs, _) = rest.split_at(8).unwrap();
        let (r1, r2) = rbuf.slice_mut(..).unwrap().split_at(256).unwrap();
        let recvs = [s.post_recv(&p.b, wr::Recv::new(r1)).unwrap(), s.post_recv(&p.b, wr::Recv::new(r2)).unwrap()];
        let a = &p.a;
        let out = vec![
            s.wait(
                s.post_send(a, wr::Write::new(src.slice(..64).unwrap(), target.remote(..64).unwrap())).unwrap(),
                WAIT,
            )
            .unwrap()
            .0,
            s.wait(
                s.post_send(a, wr::WriteImm::new(src.slice(..32).unwrap(), target.remote(64..).unwrap(), 1)).unwrap(),
                WAIT,
            )
            .unwrap()
            .0,
            s.wait(s.post_send(a, wr::Send::new(src.slice(..100).unwrap())).unwrap(), WAIT).unwrap().0,
            s.wait(s.post_send(a, wr::Read::new(rd, target.remote(..64).unwrap())).unwrap(), WAIT).unwrap().0,
            s.wait(s.post_send(a, wr::FetchAdd::new(fa, word(), 5)).unwrap(), WAIT).unwrap().0,
            s.wait(s.post_send(a, wr::CompareSwap::new(cs, word(), 5, 9)).unwrap(), WAIT).unwrap().0,
        ];
        for t in recvs {
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        }
        out
    })
    .unwrap();

    // The lane's, for the same requests.
    let lane = scope(|s| {
        let (rd, rest) = local.slice_mut(..).unwrap().split_at(64).unwrap();
        let (fa, rest) = rest.split_at(8).unwrap();
        let (cs, _) = rest.split_at(8).unwrap();
        let (r1, r2) = rbuf.slice_mut(..).unwrap().split_at(256).unwrap();
        let recvs = [s.post_recv(&p.b, wr::Recv::new(r1)).unwrap(), s.post_recv(&p.b, wr::Recv::new(r2)).unwrap()];
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let out = vec![
            lane_once!(lane, wr::Write::new(src.slice(..64).unwrap(), target.remote(..64).unwrap())),
            lane_once!(lane, wr::WriteImm::new(src.slice(..32).unwrap(), target.remote(64..).unwrap(), 1)),
            lane_once!(lane, wr::Send::new(src.slice(..100).unwrap())),
            lane_once!(lane, wr::Read::new(rd, target.remote(..64).unwrap())),
            lane_once!(lane, wr::FetchAdd::new(fa, word(), 5)),
            lane_once!(lane, wr::CompareSwap::new(cs, word(), 14, 20)),
        ];
        for t in recvs {
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        }
        out
    })
    .unwrap();

    for ((kind, d), l) in KINDS.iter().zip(&device).zip(&lane) {
        eprintln!("{kind}: device {d:?}\n{kind}: lane   {l:?}");
        assert!(d.is_success(), "{kind}: {d:?}");
        assert_eq!((l.status(), l.opcode(), l.qp_num()), (d.status(), d.opcode(), d.qp_num()), "{kind}");
        assert_eq!(l.source(), CompletionSource::Own, "{kind}");
        // ibv_poll_cq(3): on the send queue, byte_len is defined for RDMA READ and atomics.
        if matches!(*kind, "read" | "fetch_add" | "compare_swap") {
            assert_eq!(l.byte_len(), d.byte_len(), "{kind}");
        }
    }
    let mut w = [0u8; 8];
    target.read_volatile_into(128, &mut w).unwrap();
    assert_eq!(u64::from_ne_bytes(w), 20, "5, 9, 14, then 20: both compare-and-swaps matched");
}

#[test]
fn an_atomic_lane_re_posts_one_fetch_add() {
    const N: u64 = 40;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_atomic(), QpCaps::default());
    let mut target = r.pd.alloc_mr(64, access::REMOTE_ALL).unwrap();
    target.write_volatile_from(8, &1000u64.to_ne_bytes()).unwrap();
    let mut result = r.pd.alloc_mr(8, access::LOCAL_RW).unwrap();

    scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut add =
            lane.prepare(wr::FetchAdd::new(result.slice_mut(..).unwrap(), target.remote(8..16).unwrap(), 3)).unwrap();
        for i in 0..N {
            if i % 8 == 7 {
                let t = lane.post(&mut add).unwrap();
                let c = lane.wait(t, WAIT).unwrap();
                assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::FetchAdd, 8), "{c:?}");
            } else {
                lane.post_unsignaled(&mut add).unwrap();
            }
        }
        assert_eq!(lane.outstanding(), 0);
    })
    .unwrap();

    let mut w = [0u8; 8];
    target.read_volatile_into(8, &mut w).unwrap();
    assert_eq!(u64::from_ne_bytes(w), 1000 + 3 * N, "every post added once");
    let last = u64::from_ne_bytes(result.as_slice().try_into().unwrap());
    assert_eq!(last, 1000 + 3 * (N - 1), "the last post fetched the value before its add");
}

#[test]
fn a_panic_with_a_lane_read_in_flight_drains_then_resumes() {
    const BIG: usize = 1 << 20;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_read(), QpCaps::default());
    let mut remote = r.pd.alloc_mr(BIG, access::REMOTE_READ_ONLY).unwrap();
    fill(&mut remote, 9);
    let mut local = r.pd.alloc_mr(BIG, access::LOCAL_RW).unwrap();

    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = scope(|s| {
            let mut lane = s.send_lane(&mut p.a).unwrap();
            let mut read =
                lane.prepare(wr::Read::new(local.slice_mut(..).unwrap(), remote.remote(..).unwrap())).unwrap();
            let _t = lane.post(&mut read).unwrap();
            panic!("boom with a lane READ in flight");
        });
    }));
    let msg = res.expect_err("the panic must propagate");
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"boom with a lane READ in flight"));
    assert_eq!(p.a.outstanding(), (0, 0));
    assert_eq!(local.as_slice(), remote.as_slice(), "the READ had landed before the panic resumed");
}

#[test]
fn two_lanes_ping_pong_sends_and_receive_on_their_own_qps() {
    // Each side sends with its lane and receives on the lane's QP through the scope
    // (`post_recv_lane`), as a SEND latency test does; both QPs share one CQ, so each side's
    // waits also route the other side's completions.
    const ROUNDS: u8 = 50;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(2 * 64, access::LOCAL_READ).unwrap();
    src.as_mut_slice()[..64].fill(0xa1);
    src.as_mut_slice()[64..].fill(0xb2);
    let mut dst = r.pd.alloc_mr(2 * 64, access::LOCAL_RW).unwrap();
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    scope(|s| {
        let (buf_a, buf_b) = dst.slice_mut(..).unwrap().split_at(64).unwrap();
        let (mut buf_a, mut buf_b) = (Some(buf_a), Some(buf_b));
        let mut lane_a = s.send_lane(&mut p.a).unwrap();
        let mut lane_b = s.send_lane(&mut p.b).unwrap();
        let mut ping = lane_a.prepare(wr::Send::new(src.slice(..64).unwrap())).unwrap();
        let mut pong = lane_b.prepare(wr::Send::new(src.slice(64..).unwrap())).unwrap();
        for _ in 0..ROUNDS {
            let rb = s.post_recv_lane(&lane_b, wr::Recv::new(buf_b.take().unwrap())).unwrap();
            let ra = s.post_recv_lane(&lane_a, wr::Recv::new(buf_a.take().unwrap())).unwrap();
            let t = lane_a.post(&mut ping).unwrap();
            assert_eq!(lane_a.wait(t, WAIT).unwrap().status(), WcStatus::Success);
            let (c, b) = s.wait(rb, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::Recv, 64), "{c:?}");
            let mut first = [0u8; 1];
            b.read_volatile_into(&mut first);
            got_b.push(first[0]);
            buf_b = Some(b);
            let t = lane_b.post(&mut pong).unwrap();
            assert_eq!(lane_b.wait(t, WAIT).unwrap().status(), WcStatus::Success);
            let (c, b) = s.wait(ra, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::Recv, 64), "{c:?}");
            let mut first = [0u8; 1];
            b.read_volatile_into(&mut first);
            got_a.push(first[0]);
            buf_a = Some(b);
        }
        assert_eq!((lane_a.outstanding(), lane_b.outstanding()), (0, 0));
    })
    .unwrap();
    assert_eq!(got_b, vec![0xa1; ROUNDS as usize]);
    assert_eq!(got_a, vec![0xb2; ROUNDS as usize]);
    assert_eq!((p.a.outstanding(), p.b.outstanding()), ((0, 0), (0, 0)));
}

#[test]
fn spinning_waits_complete_and_stay_bounded() {
    // `SendLane::wait_spin` and `Scope::wait_spin` busy-poll (no yield) but keep their bound:
    // a write completes, a receive that nothing fills times out near its timeout, then the
    // scope flushes it.
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), QpCaps::default());
    let mut src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0x5a);
    let dst = r.pd.alloc_mr(64, access::REMOTE_RW).unwrap();
    let mut rbuf = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let remote = dst.remote(..).unwrap();
    scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut wr = lane.prepare(wr::Write::new(src.slice(..).unwrap(), remote)).unwrap();
        for _ in 0..20 {
            let t = lane.post(&mut wr).unwrap();
            let c = lane.wait_spin(t, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::RdmaWrite), "{c:?}");
        }
        let r = s.post_recv(&p.b, wr::Recv::new(rbuf.slice_mut(..).unwrap())).unwrap();
        let bound = Duration::from_millis(300);
        let started = Instant::now();
        let e = s.wait_spin(r, bound).unwrap_err();
        let took = started.elapsed();
        assert!(matches!(e.error, Error::Timeout { after, .. } if after == bound), "{:?}", e.error);
        assert!(took >= bound && took < bound + Duration::from_secs(2), "{took:?}");
        drop(e);
        s.flush(&p.b, WAIT).unwrap();
    })
    .unwrap();
    let mut seen = [0u8; 64];
    dst.read_volatile_into(0, &mut seen).unwrap();
    assert_eq!(seen, [0x5a; 64]);
}
