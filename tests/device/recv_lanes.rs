//! Receive lanes on the device: prepared receives re-posted through the exclusive poster of a
//! receive queue, their completions (taken by the lane's own wait, or kept when another poll
//! found them), the received bytes read through the prepared receive, the scope's drain of
//! outstanding lane receives, and the checks of opening and posting.

use std::time::{Duration, Instant};

use typed_verbs::qp::ObservedState;

use crate::common::*;
use typed_verbs::prelude::*;

/// The first byte of what `prepared` received (its last post must have completed).
fn first_byte(prepared: &PreparedRecv<'_, LocalBufMut<'_>>) -> u8 {
    let mut b = [0u8; 1];
    prepared.received().expect("the receive completed").read_volatile_into(&mut b);
    b[0]
}

/// Prepares `n` receives on `recv`, into consecutive slots of `len` bytes of `buf`.
fn prepare_slots<'scope, 'a: 'scope>(
    recv: &RecvLane<'scope, RC>,
    mut buf: LocalBufMut<'a>,
    n: usize,
    len: usize,
) -> Vec<PreparedRecv<'scope, LocalBufMut<'a>>> {
    let mut prepared = Vec::with_capacity(n);
    for _ in 0..n {
        let (slot, tail) = buf.split_at(len).unwrap();
        prepared.push(recv.prepare(wr::Recv::new(slot)).unwrap());
        buf = tail;
    }
    prepared
}

#[test]
fn two_qps_ping_pong_with_both_lanes_and_re_posted_receives() {
    // Each side opens both lanes of its QP (`Scope::lanes`), prepares one receive per buffer
    // and re-posts it; both QPs share one CQ, so each side's waits also poll (and keep) the
    // other side's completions.
    const ROUNDS: usize = 60;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(2 * 64, access::LOCAL_READ).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut dst = r.pd.alloc_mr(4 * 64, access::LOCAL_RW).unwrap();
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let qpn_b = p.b.qp_num();
    scope(|s| {
        let (half_a, half_b) = dst.slice_mut(..).unwrap().split_at(128).unwrap();
        let (a0, a1) = half_a.split_at(64).unwrap();
        let (b0, b1) = half_b.split_at(64).unwrap();
        let (mut send_a, mut recv_a) = s.lanes(&mut p.a).unwrap();
        let (mut send_b, mut recv_b) = s.lanes(&mut p.b).unwrap();
        // Message k of a is bytes [k % 2 * 64 ..][..40 + k % 2]; b answers with the other half.
        let mut pings =
            [0, 1].map(|k| send_a.prepare(wr::Send::new(src.slice(k * 64..k * 64 + 40 + k).unwrap())).unwrap());
        let mut pongs =
            [1, 0].map(|k| send_b.prepare(wr::Send::new(src.slice(k * 64..k * 64 + 20 + k).unwrap())).unwrap());
        let mut ra = [recv_a.prepare(wr::Recv::new(a0)).unwrap(), recv_a.prepare(wr::Recv::new(a1)).unwrap()];
        let mut rb = [recv_b.prepare(wr::Recv::new(b0)).unwrap(), recv_b.prepare(wr::Recv::new(b1)).unwrap()];
        assert!(ra[0].received().is_some(), "never posted: readable");
        for k in 0..ROUNDS {
            let slot = k % 2;
            let tb = recv_b.post(&mut rb[slot]).unwrap();
            let ta = recv_a.post(&mut ra[slot]).unwrap();
            assert!(rb[slot].received().is_none(), "posted: the device may write it");
            let t = send_a.post(&mut pings[slot]).unwrap();
            assert_eq!(send_a.wait(t, WAIT).unwrap().status(), WcStatus::Success);
            let c = recv_b.wait(tb, WAIT).unwrap();
            assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::Recv, 40 + slot as u32));
            assert_eq!(c.qp_num(), qpn_b);
            got_b.push(first_byte(&rb[slot]));
            let t = send_b.post(&mut pongs[slot]).unwrap();
            assert_eq!(send_b.wait_spin(t, WAIT).unwrap().status(), WcStatus::Success);
            let c = recv_a.wait_spin(ta, WAIT).unwrap();
            assert_eq!(
                (c.status(), c.opcode(), c.byte_len()),
                (WcStatus::Success, WcOpcode::Recv, 20 + 1 - slot as u32)
            );
            got_a.push(first_byte(&ra[slot]));
        }
        assert_eq!((recv_a.outstanding(), recv_b.outstanding()), (0, 0));
    })
    .unwrap();
    let want_b: Vec<u8> = (0..ROUNDS).map(|k| (k % 2 * 64) as u8).collect();
    let want_a: Vec<u8> = (0..ROUNDS).map(|k| ((1 - k % 2) * 64) as u8).collect();
    assert_eq!(got_b, want_b);
    assert_eq!(got_a, want_a);
    assert_eq!((p.a.outstanding(), p.b.outstanding()), ((0, 0), (0, 0)));
}

#[test]
fn an_ordered_receive_lane_hands_out_each_message_in_posting_order() {
    // Message m is bytes [m, 2m + 10) of a counting pattern (first byte m, length 10 + m),
    // received by four re-posted receives of an ordered receive lane (no token per receive):
    // each `wait_next` hands out the oldest receive, with that message's length and bytes,
    // whether the lane's own poll found it or `Cq::progress` (shared CQ) kept it for the lane;
    // with every receive handed out, the next wait says so at once.
    const MESSAGES: usize = 12;
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut dst = r.pd.alloc_mr(4 * 64, access::LOCAL_RW).unwrap();
    let mut got = Vec::new();
    scope(|s| {
        let mut recv = s.recv_lane(&mut p.b).unwrap().ordered();
        let mut prepared = Vec::new();
        let mut buf = dst.slice_mut(..).unwrap();
        for _ in 0..4 {
            let (slot, tail) = buf.split_at(64).unwrap();
            prepared.push(recv.prepare(wr::Recv::new(slot)).unwrap());
            buf = tail;
        }
        let started = Instant::now();
        let e = recv.wait_next(WAIT).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "nothing posted: {e:?}");
        assert!(started.elapsed() < WAIT / 2, "it waited {:?}", started.elapsed());
        for w in &mut prepared {
            recv.post(w).unwrap();
        }
        for m in 0..MESSAGES {
            let t = s.post_send(&p.a, wr::Send::new(src.slice(m..2 * m + 10).unwrap())).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
            if m % 3 == 2 {
                // Polled by someone else (the scope's wait above, on the shared CQ, or
                // `progress`): kept for the lane.
                let complete = (4 + m.min(MESSAGES - 4) - (m + 1)) as u64;
                let deadline = Instant::now() + WAIT;
                while recv.outstanding() > complete && Instant::now() < deadline {
                    r.cq.progress().unwrap();
                }
                assert_eq!(recv.outstanding(), complete, "message {m} polled by another poller");
            }
            let c = recv.wait_next(WAIT).unwrap();
            assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::Recv, 10 + m as u32));
            let slot = &mut prepared[m % 4];
            let mut first = [0u8; 1];
            slot.received().expect("its completion was handed out").read_volatile_into(&mut first);
            got.push(first[0]);
            if m + 4 < MESSAGES {
                recv.post(slot).unwrap();
            }
        }
        assert_eq!(recv.outstanding(), 0);
        let e = recv.wait_next(WAIT).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "all handed out: {e:?}");
    })
    .unwrap();
    assert_eq!(got, (0..MESSAGES as u8).collect::<Vec<_>>());
}

#[test]
fn completions_polled_for_a_later_receive_are_kept_for_their_tokens() {
    // Four receives of different lengths; the wait for the last one polls (and keeps) the
    // first three, whose tokens then collect them, in any order.
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0x33);
    let mut dst = r.pd.alloc_mr(4 * 64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let mut recv = s.recv_lane(&mut p.b).unwrap();
        let mut prepared = prepare_slots(&recv, dst.slice_mut(..).unwrap(), 4, 64);
        let mut tokens: Vec<_> = prepared.iter_mut().map(|w| Some(recv.post(w).unwrap())).collect();
        for i in 0..4 {
            let t = s.post_send(&p.a, wr::Send::new(src.slice(..10 + i).unwrap())).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        }
        let c = recv.wait(tokens[3].take().unwrap(), WAIT).unwrap();
        assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 13));
        for i in [1, 0, 2] {
            let c = recv.wait(tokens[i].take().unwrap(), Duration::ZERO).unwrap();
            assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::Recv, 10 + i as u32));
            assert_eq!(first_byte(&prepared[i]), 0x33);
        }
    })
    .unwrap();
}

#[test]
fn a_kept_completion_is_dropped_after_a_queue_depth_of_later_ones() {
    // Completions that another poll found are kept for their tokens, at most the receive
    // queue's depth of them: a token held while that many later receives complete (polled by
    // `Cq::progress`) finds its completion dropped, and says so.
    let r = rig();
    let caps = QpCaps { max_recv_wr: 4, ..QpCaps::default() };
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, caps);
    // The lane keeps the depth asked for (the provider may grant more).
    let depth = caps.max_recv_wr as usize;
    let mut src = r.pd.alloc_mr(8, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(1);
    let mut dst = r.pd.alloc_mr(depth * 8, access::LOCAL_RW).unwrap();
    scope(|s| {
        let mut recv = s.recv_lane(&mut p.b).unwrap();
        let mut prepared = prepare_slots(&recv, dst.slice_mut(..).unwrap(), depth, 8);
        // Sends `n` messages to b; their receive completions are polled by the scope's waits
        // and `Cq::progress` (shared CQ), never by the lane.
        let send = |n: usize, recv: &RecvLane<'_, RC>| {
            for _ in 0..n {
                let t = s.post_send(&p.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
                assert!(s.wait(t, WAIT).unwrap().0.is_success());
            }
            let deadline = Instant::now() + WAIT;
            while recv.outstanding() > 0 && Instant::now() < deadline {
                r.cq.progress().unwrap();
            }
            assert_eq!(recv.outstanding(), 0);
        };
        // The first receive's token is held throughout.
        let first = recv.post(&mut prepared[0]).unwrap();
        let mut later = Vec::new();
        for w in &mut prepared[1..] {
            later.push(recv.post(w).unwrap());
        }
        assert!(matches!(recv.post(&mut prepared[0]), Err(Error::QueueFull { queue: "receive", .. })));
        send(depth, &recv);
        for t in later {
            assert!(recv.wait(t, Duration::ZERO).unwrap().is_success());
        }
        // `depth` more completions kept after the first one's: it is dropped.
        for round in 0..depth {
            let t = recv.post(&mut prepared[1 + round % (depth - 1)]).unwrap();
            send(1, &recv);
            drop(t);
        }
        let e = recv.wait(first, WAIT).unwrap_err();
        assert!(
            matches!(&e.error, Error::InvalidArgument { reason, .. } if reason.contains("dropped")),
            "{:?}",
            e.error
        );
    })
    .unwrap();
}

#[test]
fn outstanding_lane_receives_make_the_scope_flush_and_report_the_qp_broken() {
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let qpn = p.b.qp_num();
    let mut dst = r.pd.alloc_mr(128, access::LOCAL_RW).unwrap();
    let started = Instant::now();
    let res = scope_with_timeout(Duration::from_secs(1), |s| {
        let mut recv = s.recv_lane(&mut p.b).unwrap();
        let (x, y) = dst.slice_mut(..).unwrap().split_at(64).unwrap();
        let (mut x, mut y) = (recv.prepare(wr::Recv::new(x)).unwrap(), recv.prepare(wr::Recv::new(y)).unwrap());
        // Two receives that no message will fill; their tokens are dropped.
        let _ = recv.post(&mut x).unwrap();
        let _ = recv.post(&mut y).unwrap();
        assert_eq!(recv.outstanding(), 2);
    });
    let took = started.elapsed();
    match res {
        Err(Error::QpBroken { qp_num }) => assert_eq!(qp_num, qpn),
        other => panic!("expected QpBroken, got {other:?}"),
    }
    assert!(took < Duration::from_secs(10), "the drain timeout, then at most the 5 s flush wait: {took:?}");
    assert_eq!(p.b.outstanding(), (0, 0));
    // rxe flushes the receives once the QP is in ERR; the drain then resets it.
    assert_eq!(p.b.query_state().unwrap(), ObservedState::Reset);
    // The device no longer writes the receives' memory: a message sent to the QP now does not
    // land in it. (Its peer in RESET drops it; the sender retries until its scope, given
    // 0.3 s, breaks it.)
    dst.as_mut_slice().fill(0x5a);
    let mut src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0xc3);
    let sent = scope_with_timeout(Duration::from_millis(300), |s| {
        let t = s.post_send(&p.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(t);
    });
    assert!(matches!(sent, Err(Error::QpBroken { qp_num }) if qp_num == p.a.qp_num()), "{sent:?}");
    assert!(dst.as_slice().iter().all(|&b| b == 0x5a), "a message landed in a receive buffer after the scope");
}

#[test]
fn a_recv_lane_refuses_an_srq_qp_and_a_queue_with_receives_posted_otherwise() {
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut dst = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let dst = dst.slice_mut(..).unwrap();
    let owned = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap().pop().unwrap();
    // An owned receive is outstanding: the lane does not open.
    let token = p.b.post_recv_owned(wr::Recv::new(owned)).unwrap();
    scope(|s| match s.recv_lane(&mut p.b) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("1 outstanding"), "{reason}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    })
    .unwrap();
    // Once it completed (a message fills it), the lane opens.
    let mut src = r.pd.alloc_mr(8, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(7);
    scope(|s| {
        let t = s.post_send(&p.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert!(token.wait(WAIT).unwrap().0.is_success());
    scope(|s| {
        let recv = s.recv_lane(&mut p.b).unwrap();
        let _unposted = recv.prepare(wr::Recv::new(dst)).unwrap();
    })
    .unwrap();

    // A QP that takes its receives from an SRQ has no receive queue of its own.
    let srq = r.pd.create_srq(16).unwrap();
    let qp = r.pd.create_qp::<RC>(&QpConfig::new(&r.cq).srq(&srq)).unwrap();
    let mut qp = qp.to_init(&ConnectedInit::new(PORT, Access::NONE)).unwrap();
    scope(|s| match s.recv_lane(&mut qp) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("shared receive queue"), "{reason}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    })
    .unwrap();
}

#[test]
fn a_wait_for_a_later_receive_keeps_the_earlier_completions_in_the_lane() {
    // b's receives complete on a CQ of their own, which only the lane polls, one completion
    // at a time: a wait for a later receive takes the earlier ones off the CQ on its way and
    // keeps them in the lane for the waits that follow (in order or not), which then find
    // them without polling.
    const N: usize = 8;
    let r = rig();
    let cq_b = r._ctx.create_cq(256).unwrap();
    let mut p = rc_pair(&r.pd, &r.cq, &cq_b, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0x44);
    let mut dst = r.pd.alloc_mr(N * 64, access::LOCAL_RW).unwrap();
    scope(|s| {
        let mut recv = s.recv_lane(&mut p.b).unwrap();
        let mut prepared = prepare_slots(&recv, dst.slice_mut(..).unwrap(), N, 64);
        let mut tokens: Vec<_> = prepared.iter_mut().map(|w| Some(recv.post(w).unwrap())).collect();
        for i in 0..N {
            let t = s.post_send(&p.a, wr::Send::new(src.slice(..1 + i).unwrap())).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        }
        // Every receive has completed (its send did); nothing but the lane polls cq_b.
        for i in [0, 3, 1, 2, 7, 4, 5, 6] {
            let c = recv.wait(tokens[i].take().unwrap(), WAIT).unwrap();
            assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::Recv, 1 + i as u32));
            assert_eq!(first_byte(&prepared[i]), 0x44);
        }
        assert_eq!(recv.outstanding(), 0);
    })
    .unwrap();
}

#[test]
fn a_prepared_receive_gives_its_buffer_back_only_once_its_post_completed() {
    // `into_inner` before the first post, and once the post's completion was polled; never
    // while the device may still write the buffer.
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(16, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0x5a);
    let mut dst = r.pd.alloc_mr(16, access::LOCAL_RW).unwrap();
    scope(|s| {
        let mut recv = s.recv_lane(&mut p.b).unwrap();
        let prepared = recv.prepare(wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let mut prepared = recv.prepare(prepared.into_inner().expect("never posted")).unwrap();
        let t = recv.post(&mut prepared).unwrap();
        let prepared = prepared.into_inner().expect_err("posted: the device may still write the buffer");
        let sent = s.post_send(&p.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(sent, WAIT).unwrap().0.is_success());
        assert!(recv.wait(t, WAIT).unwrap().is_success());
        let buf = prepared.into_inner().expect("its completion was polled").into_buffer();
        let mut got = [0u8; 16];
        buf.read_volatile_into(&mut got);
        assert_eq!(got, [0x5a; 16]);
    })
    .unwrap();
}
