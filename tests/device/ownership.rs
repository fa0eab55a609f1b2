//! Buffer ownership on the device: unsignaled batches, post lists, owned buffers handed back on
//! success and on flush, receives that survive state transitions, dropped tokens, SRQ.

use std::time::Duration;

use typed_verbs::prelude::*;
use typed_verbs::wc::CompletionSource;

use crate::common::*;

#[test]
fn a_batch_of_1000_unsignaled_writes_with_the_last_signaled() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(2048).unwrap();
    let caps = QpCaps { max_send_wr: 1024, ..QpCaps::default() };
    let p = rc_pair(&pd, &cq, &cq, Access::NONE.remote_write(), caps);
    let mut src = pd.alloc_mr(1000 * 8, access::LOCAL_READ).unwrap();
    for (i, w) in src.as_mut_slice().chunks_mut(8).enumerate() {
        w.copy_from_slice(&(i as u64 * 3 + 1).to_le_bytes());
    }
    let dst = pd.alloc_mr(1000 * 8, access::REMOTE_RW).unwrap();
    let sources = scope(|s| {
        let write =
            |i: usize| wr::Write::new(src.slice(i * 8..i * 8 + 8).unwrap(), dst.remote(i * 8..i * 8 + 8).unwrap());
        // One post list of 999 unsignaled writes, then the signaled last one.
        let tokens = s.post_send_list(&p.a, (0..999).map(|i| write(i).unsignaled())).expect("post list");
        assert_eq!(tokens.len(), 999);
        let last = write(999);
        let t = s.post_send(&p.a, last).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!(c.source(), CompletionSource::Own, "the signaled last write: {c:?}");
        let mut sources = Vec::new();
        for t in tokens {
            let (c, _) = s.wait(t, Duration::ZERO).expect("already complete: covered by the last one");
            assert!(c.is_success(), "{c:?}");
            sources.push(c.source());
        }
        sources
    })
    .unwrap();
    // Each request's source individually. The library breaks a run of unsignaled requests
    // before it reaches half the requested depth (1024 / 2 = 512), so the queue can never
    // fill up: the 512th request of the run (index 511) is signaled behind the caller's back
    // and completes on its own; every other one is known complete through a later one.
    for (i, source) in sources.iter().enumerate() {
        let want = if i == 511 { CompletionSource::Own } else { CompletionSource::ImpliedByLater };
        assert_eq!(*source, want, "write {i} of the unsignaled list");
    }
    let mut got = vec![0u8; 8000];
    dst.read_volatile_into(0, &mut got).unwrap();
    assert_eq!(got, src.as_slice());
    assert_eq!(p.a.outstanding(), (0, 0));
}

#[test]
fn owned_receives_posted_in_init_survive_the_transitions() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let (ea, eb) = (a.endpoint(PORT, gid_index(), 1).unwrap(), b.endpoint(PORT, gid_index(), 2).unwrap());
    // Pre-post receives on b in INIT, as the C pingpong examples do, then connect.
    let b = b.to_init(&ConnectedInit::new(PORT, Access::NONE)).unwrap();
    let chunks = pd.alloc_mr(4 * 256, access::LOCAL_RW).unwrap().into_chunks(256).unwrap();
    let tokens: Vec<_> = chunks.into_iter().map(|c| b.post_recv_owned(wr::Recv::new(c)).unwrap()).collect();
    let av = AddressVector::global(PORT, ea.gid, gid_index());
    let b = b.to_rtr(&RcRtr::new(av, ea.qp_num, ea.psn)).unwrap().to_rts(&RcRts::new(eb.psn)).unwrap();
    let a = connect_rc(a, Access::NONE, &ea, &eb);
    let mut src = pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    for i in 0..4u8 {
        src.as_mut_slice().fill(b'a' + i);
        scope(|s| {
            let t = s.post_send(&a, wr::Send::new(src.slice(..100 + usize::from(i)).unwrap())).unwrap();
            assert!(s.wait(t, WAIT).unwrap().0.is_success());
        })
        .unwrap();
    }
    for (i, t) in tokens.into_iter().enumerate() {
        let (c, chunk) = t.wait(WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        assert_eq!(c.byte_len() as usize, 100 + i);
        assert!(chunk.as_slice()[..100 + i].iter().all(|&x| x == b'a' + i as u8));
        assert_eq!(chunk.len(), 256);
    }
    assert_eq!(b.outstanding(), (0, 0));
}

#[test]
fn a_flush_hands_every_owned_buffer_back_with_a_flush_status() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let chunks = pd.alloc_mr(8 * 64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap();
    let addrs: Vec<u64> = chunks.iter().map(|c| c.addr()).collect();
    let tokens: Vec<_> = chunks.into_iter().map(|c| p.b.post_recv_owned(wr::Recv::new(c)).unwrap()).collect();
    assert_eq!(p.b.outstanding(), (0, 8));
    // Typed transition to ERR: outstanding requests flush.
    let b = p.b.to_error().unwrap();
    for (t, addr) in tokens.into_iter().zip(addrs) {
        let (c, mut chunk) = t.wait(WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::WrFlushErr, "{c:?}");
        assert_eq!(chunk.addr(), addr, "the same buffer comes back");
        chunk.as_mut_slice().fill(7); // usable again
    }
    assert_eq!(b.outstanding(), (0, 0));
}

#[test]
fn a_dropped_owned_token_parks_its_buffer_until_the_device_is_done() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let mut chunks = pd.alloc_mr(2 * 128, access::LOCAL_RW).unwrap().into_chunks(128).unwrap();
    let keep = chunks.pop().unwrap();
    let t = p.b.post_recv_owned(wr::Recv::new(chunks.pop().unwrap())).unwrap();
    drop(t); // in flight: the QP keeps the buffer
    assert_eq!(p.b.parked_buffers(), 1);
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(1);
    scope(|s| {
        let t = s.post_send(&p.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    // The receive completes; polling routes it and releases the parked buffer.
    let deadline = std::time::Instant::now() + WAIT;
    while p.b.parked_buffers() > 0 && std::time::Instant::now() < deadline {
        cq.progress().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(p.b.parked_buffers(), 0);
    drop(keep);
}

#[test]
fn a_scope_with_receives_still_posted_ends_cleanly_after_a_flush() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let mut rbuf = pd.alloc_mr(1024, access::LOCAL_RW).unwrap();
    let r = scope(|s| {
        let (x, y) = rbuf.slice_mut(..).unwrap().split_at(512).unwrap();
        let _t1 = s.post_recv(&p.b, wr::Recv::new(x)).unwrap();
        let _t2 = s.post_recv(&p.b, wr::Recv::new(y)).unwrap();
        s.flush(&p.b, WAIT).unwrap();
        42
    });
    assert_eq!(r.unwrap(), 42, "no QpBroken: the flush completed everything");
    rbuf.as_mut_slice().fill(0);
}

#[test]
fn a_bounded_wait_times_out_and_gives_the_token_back() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE, QpCaps::default());
    let chunk = pd.alloc_mr(64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap().remove(0);
    let t = p.b.post_recv_owned(wr::Recv::new(chunk)).unwrap();
    let started = std::time::Instant::now();
    let e = t.wait(Duration::from_millis(300)).expect_err("nothing was sent");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(e.error, Error::Timeout { .. }), "{:?}", e.error);
    // The token is still valid: send, and it completes.
    let mut src = pd.alloc_mr(8, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(3);
    scope(|s| {
        let t = s.post_send(&p.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    let (c, _) = e.token.wait(WAIT).unwrap();
    assert!(c.is_success() && c.byte_len() == 8, "{c:?}");
}

#[test]
fn an_srq_shared_by_two_qps() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let srq = pd.create_srq(64).unwrap();
    // Two receivers on the SRQ, each connected to its own sender.
    let mk = |srq_cfg: bool| {
        let cfg = QpConfig::new(&cq);
        let cfg = if srq_cfg { cfg.srq(&srq) } else { cfg };
        pd.create_qp::<RC>(&cfg).unwrap()
    };
    let (s1, r1, s2, r2) = (mk(false), mk(true), mk(false), mk(true));
    let e = |q: &Qp<RC, RESET>, psn| q.endpoint(PORT, gid_index(), psn).unwrap();
    let (es1, er1, es2, er2) = (e(&s1, 10), e(&r1, 20), e(&s2, 30), e(&r2, 40));
    let acc = Access::NONE;
    let (s1, r1) = (connect_rc(s1, acc, &es1, &er1), connect_rc(r1, acc, &er1, &es1));
    let (s2, r2) = (connect_rc(s2, acc, &es2, &er2), connect_rc(r2, acc, &er2, &es2));
    let chunks = pd.alloc_mr(16 * 64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap();
    let tokens: Vec<_> = chunks.into_iter().map(|c| srq.post_recv_owned(wr::Recv::new(c)).unwrap()).collect();
    assert_eq!(srq.outstanding(), 16);
    // Receiving on a QP that uses an SRQ is refused (post to the SRQ).
    let stray = pd.alloc_mr(64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap().remove(0);
    assert_refused(
        r1.post_recv_owned(wr::Recv::new(stray)).map(drop).map_err(|e| e.error),
        "ibv_post_recv",
        "takes its receives from a shared receive queue; post to the SRQ",
    );
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    for i in 0..8u8 {
        for (sender, tag) in [(&s1, 1u8), (&s2, 2u8)] {
            src.as_mut_slice()[..2].copy_from_slice(&[tag, i]);
            scope(|s| {
                let t = s.post_send(sender, wr::Send::new(src.slice(..2).unwrap())).unwrap();
                assert!(s.wait(t, WAIT).unwrap().0.is_success());
            })
            .unwrap();
        }
    }
    let mut seen = Vec::new();
    for t in tokens {
        let (c, chunk) = t.wait(WAIT).unwrap();
        assert!(c.is_success(), "{c:?}");
        let who = if c.qp_num() == r1.qp_num() {
            1
        } else {
            assert_eq!(c.qp_num(), r2.qp_num());
            2
        };
        assert_eq!(chunk.as_slice()[0], who, "the message from sender {who} arrived on its receiver");
        seen.push((chunk.as_slice()[0], chunk.as_slice()[1]));
    }
    seen.sort();
    let expected: Vec<_> = (1..=2u8).flat_map(|t| (0..8u8).map(move |i| (t, i))).collect();
    assert_eq!(seen, expected, "every message was received exactly once");
    assert_eq!(srq.outstanding(), 0);
}

#[test]
fn an_armed_srq_limit_reports_srq_limit_reached() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let srq = pd.create_srq(16).unwrap();
    let r = pd.create_qp::<RC>(&QpConfig::new(&cq).srq(&srq)).unwrap();
    let s = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let (es, er) = (s.endpoint(PORT, gid_index(), 7).unwrap(), r.endpoint(PORT, gid_index(), 9).unwrap());
    let (s, r) = (connect_rc(s, Access::NONE, &es, &er), connect_rc(r, Access::NONE, &er, &es));
    let chunks = pd.alloc_mr(8 * 64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap();
    let mut tokens: Vec<_> = chunks.into_iter().map(|c| srq.post_recv_owned(wr::Recv::new(c)).unwrap()).collect();
    // Fire when fewer than 4 receives remain posted.
    srq.arm_limit(4).unwrap();
    // The limit must be below max_wr.
    assert_refused(srq.arm_limit(16), "ibv_modify_srq", "is not below max_wr");
    let mut src = pd.alloc_mr(8, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(1);
    for _ in 0..5 {
        scope(|sc| {
            let t = sc.post_send(&s, wr::Send::new(src.slice(..).unwrap())).unwrap();
            assert!(sc.wait(t, WAIT).unwrap().0.is_success());
        })
        .unwrap();
    }
    let ev = ctx.next_async_event(WAIT).expect("the limit event");
    assert_eq!(ev, typed_verbs::event::AsyncEvent::SrqLimitReached { srq: srq.handle_id() });
    // The five consumed receives completed on the receiving QP.
    let mut done = 0;
    for t in tokens.drain(..) {
        match t.wait(Duration::from_millis(200)) {
            Ok((c, _)) => {
                assert!(c.is_success() && c.qp_num() == r.qp_num(), "{c:?}");
                done += 1;
            }
            Err(e) => drop(e.token),
        }
    }
    assert_eq!(done, 5);
}

#[test]
fn poll_into_reports_a_batch_and_the_tokens_still_hand_over_once() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let p = rc_pair(&pd, &cq, &cq, Access::NONE.remote_write(), QpCaps::default());
    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(2);
    let dst = pd.alloc_mr(64, access::REMOTE_RW).unwrap();
    scope(|s| {
        let tokens: Vec<_> = (0..6)
            .map(|i| {
                s.post_send(
                    &p.a,
                    wr::Write::new(src.slice(i * 8..i * 8 + 8).unwrap(), dst.remote(i * 8..i * 8 + 8).unwrap()),
                )
                .unwrap()
            })
            .collect();
        let mut seen = Vec::new();
        let mut batch = [Completion::default(); 4];
        let deadline = std::time::Instant::now() + WAIT;
        while seen.len() < 6 && std::time::Instant::now() < deadline {
            let n = cq.poll_into(&mut batch).unwrap();
            assert!(n <= batch.len());
            seen.extend_from_slice(&batch[..n]);
        }
        assert_eq!(seen.len(), 6, "every completion reported once");
        assert!(seen.iter().all(|c| c.is_success() && c.qp_num() == p.a.qp_num() && c.opcode() == WcOpcode::RdmaWrite));
        for t in tokens {
            let (c, _) = s.wait(t, Duration::ZERO).expect("already routed");
            assert!(c.is_success());
        }
        assert_eq!(cq.poll_into(&mut batch).unwrap(), 0);
    })
    .unwrap();
}

/// `try_complete` polls the CQ once: a request whose completion waits in the CQ behind others'
/// completes with that one poll (which routes the others to their tokens), whatever its place
/// among the entries of one batch.
#[test]
fn try_complete_takes_a_completion_queued_behind_others_in_one_call() {
    const N: usize = 4;
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let (cq_a, cq_b) = (ctx.create_cq(256).unwrap(), ctx.create_cq(256).unwrap());
    let p = rc_pair(&pd, &cq_a, &cq_b, Access::NONE, QpCaps::default());
    let chunks = pd.alloc_mr(N * 64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap();
    let mut receives: Vec<_> = chunks.into_iter().map(|c| p.b.post_recv_owned(wr::Recv::new(c)).unwrap()).collect();
    for i in 0..N {
        let mut m = pd.alloc_mr(8, access::LOCAL_RW).unwrap().into_chunks(8).unwrap().remove(0);
        m.as_mut_slice().fill(i as u8 + 1);
        // Waited on the send CQ: the receive completions stay in the receive CQ, unpolled.
        let (c, _) = p.a.post_send_owned(wr::Send::new(m)).unwrap().wait(WAIT).unwrap();
        assert!(c.is_success(), "send {i}: {c:?}");
    }
    // Every receive completed on the device (the sends completed); let rxe write the last entry.
    std::thread::sleep(Duration::from_millis(50));
    let last = receives.pop().unwrap();
    let (c, buf) = last.try_complete().expect("the last receive's completion, behind three, in one call");
    assert!(c.is_success(), "{c:?}");
    assert_eq!(&buf.as_slice()[..8], &[N as u8; 8]);
    // The poll routed the others to their tokens: each comes back without polling again.
    for (i, t) in receives.into_iter().enumerate() {
        assert!(t.is_complete(), "receive {i} was routed by that poll");
        let (c, buf) = t.try_complete().unwrap();
        assert!(c.is_success(), "receive {i}: {c:?}");
        assert_eq!(&buf.as_slice()[..8], &[i as u8 + 1; 8]);
    }
}
