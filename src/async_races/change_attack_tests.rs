//! The routing of completions by QP number around a refused registration, the fake device's
//! typed verbs (`ContextInner::verbs`, `FAKE_VERBS`) against libibverbs' own, empty entries of
//! ODP memory in scatter/gather lists, write prefetches, and a shared receive queue's ODP
//! transports across its life.

use super::*;

/// A receive of `qp`'s own receive queue, booked (the fake device is told separately).
fn own_recv(qp: &Arc<QpShared>) -> (u64, OwnedToken<()>) {
    let seq = qp.rq.lock().push(true);
    (seq, OwnedToken::new(QueueArc::Recv(Arc::clone(qp)), seq, (), None))
}

/// A QP created with the number of a live QP completing on the same CQ is refused, and its
/// drop records it among the CQ's destroyed QPs under that number. The live QP's completions
/// still in the CQ when the next QP registers there (whose registration takes the destroyed
/// QPs' completions off the CQ) are the live QP's: its request completes, and nothing of the
/// refused QP's shared receive queue is completed by them (the SRQ's receive buffer stays with
/// the device until its own completion).
#[test]
fn a_refused_duplicate_number_does_not_divert_the_live_qps_completions_at_the_next_drain() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let a = w.qp(0x7b0, 4, &cq, None);
    let srq = w.srq(4);
    let (s_seq, s_tok) = post_srq_recv(&srq);
    let (a_seq, a_tok) = own_recv(&a);
    // Both queues number their first request alike: a completion of either names the same id.
    assert_eq!(s_seq, a_seq);
    let refused = QpShared::try_fake_with_posts(
        w.raw_qp(0x7b0),
        0x7b0,
        4,
        &cq,
        Arc::clone(&w.pd),
        Some(Arc::clone(&srq)),
        fake_send,
        fake_recv,
    );
    assert!(
        matches!(refused, Err(crate::Error::InvalidArgument { verb: "ibv_create_qp", .. })),
        "the second live QP numbered 0x7b0 was not refused"
    );
    // The device completes the live QP's receive; then another QP is created on the CQ.
    fake.complete(recv_wc(0x7b0, a_seq, sys::IBV_WC_SUCCESS));
    let _z = w.qp(0x7b1, 4, &cq, None);
    assert!(
        srq.rq.is_pending(s_seq),
        "the live QP's receive completion completed the refused QP's SRQ receive: its buffer is handed back while the device may write it"
    );
    let Err(s_tok) = s_tok.try_complete() else { panic!("the SRQ's receive completed without a completion of its own") };
    match a_tok.wait(Duration::from_millis(300)) {
        Ok((c, ())) => assert!(c.is_success()),
        Err(e) => panic!("the live QP's receive completion was lost: {}", e.error),
    }
    // The SRQ's receive still completes on its own completion, through a QP attached to it.
    let b = w.qp(0x7b2, 4, &cq, Some(Arc::clone(&srq)));
    fake.complete(recv_wc(0x7b2, s_seq, sys::IBV_WC_SUCCESS));
    let (c, ()) = s_tok.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("the SRQ's own completion");
    assert!(c.is_success());
    drop(b);
}

/// As above without a shared receive queue: the live QP's send completion, still in the CQ
/// when the next registration drains the refused QP's, completes the live QP's request.
#[test]
fn a_refused_duplicate_number_does_not_swallow_the_live_qps_send_completion() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let a = w.qp(0x7c0, 4, &cq, None);
    let refused = QpShared::try_fake_with_posts(w.raw_qp(0x7c0), 0x7c0, 4, &cq, Arc::clone(&w.pd), None, fake_send, fake_recv);
    assert!(refused.is_err(), "the second live QP numbered 0x7c0 was not refused");
    let t = post_send(&a, true);
    fake.complete(send_wc(0x7c0, 0, sys::IBV_WC_SUCCESS));
    let _z = w.qp(0x7c1, 4, &cq, None);
    match t.wait(Duration::from_millis(300)) {
        Ok((c, ())) => assert!(c.is_success()),
        Err(e) => panic!("the live QP's send completion was taken for the refused QP's: {}", e.error),
    }
}
