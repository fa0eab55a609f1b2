//! The routing of completions by QP number around a refused registration, the fake device's
//! typed verbs (`ContextInner::verbs`, `FAKE_VERBS`) against libibverbs' own, empty entries of
//! ODP memory in scatter/gather lists, write prefetches, and a shared receive queue's ODP
//! transports across its life.

use super::*;
use crate::mr::LocalBufMut;
use crate::pd::PdInner;

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
    let Err(s_tok) = s_tok.try_complete() else {
        panic!("the SRQ's receive completed without a completion of its own")
    };
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
    let refused =
        QpShared::try_fake_with_posts(w.raw_qp(0x7c0), 0x7c0, 4, &cq, Arc::clone(&w.pd), None, fake_send, fake_recv);
    assert!(refused.is_err(), "the second live QP numbered 0x7c0 was not refused");
    let t = post_send(&a, true);
    fake.complete(send_wc(0x7c0, 0, sys::IBV_WC_SUCCESS));
    let _z = w.qp(0x7c1, 4, &cq, None);
    match t.wait(Duration::from_millis(300)) {
        Ok((c, ())) => assert!(c.is_success()),
        Err(e) => panic!("the live QP's send completion was taken for the refused QP's: {}", e.error),
    }
}

/// A world whose provider takes SRQ receives ([`World::record_srq_posts`]).
fn srq_posting_world() -> &'static World {
    let w = World::new();
    w.record_srq_posts();
    w
}

fn view(w: &World, addr: u64, len: u32, odp: OdpTag) -> LocalBufMut<'static> {
    LocalBufMut::from_parts(addr, len, 7, odp, w.pd.id())
}

/// An empty receive entry of a list is no entry, and the device writes none of its memory: an
/// SRQ receive whose only ODP memory is an empty entry beside pinned memory reaches the
/// provider without it and binds the SRQ to no transport, so QPs and ODP receives of any
/// transport still come after it. A receive of a single view keeps that view's verification
/// even when it is empty (DESIGN §5): it binds its SRQ to the view's transport.
#[test]
fn empty_odp_entries_of_srq_receives_bind_the_srq_to_no_transport() {
    let w = srq_posting_world();
    let srq = w.srq(8);
    let handle = crate::srq::Srq { shared: Arc::clone(&srq) };
    let page = crate::mr::page_size() as u64;
    let srq_recv = sys::IBV_ODP_SUPPORT_SRQ_RECV;
    let ud = OdpTag::verified(sys::IBV_QPT_UD, srq_recv, false);
    let rc = OdpTag::verified(sys::IBV_QPT_RC, srq_recv, false);
    let beside = handle
        .post_recv_owned(Recv::new((view(w, 2 * page, 0, ud), view(w, 3 * page, 64, OdpTag::NONE))))
        .map_err(|e| e.error)
        .expect("an empty ODP entry beside pinned memory");
    assert_eq!(srq_posts(&srq), vec![1], "the empty entry reaches the provider as no entry, the pinned one alone");
    srq.attach_transport(sys::IBV_QPT_RC, "RC").expect("an RC QP attaches");
    let rc_recv =
        handle.post_recv_owned(Recv::new(view(w, 4 * page, 64, rc))).map_err(|e| e.error).expect("an RC receive");
    srq.detach_transport(sys::IBV_QPT_RC);
    // A single empty view: its UD verification is the receive's.
    let single = w.srq(8);
    let handle = crate::srq::Srq { shared: Arc::clone(&single) };
    let alone = handle.post_recv_owned(Recv::new(view(w, page, 0, ud))).map_err(|e| e.error).expect("an empty receive");
    assert_eq!(srq_posts(&single), vec![0]);
    assert!(single.attach_transport(sys::IBV_QPT_RC, "RC").is_err(), "the single view's UD verification binds it");
    single.attach_transport(sys::IBV_QPT_UD, "UD").expect("a UD QP attaches");
    single.detach_transport(sys::IBV_QPT_UD);
    std::mem::forget((alone, beside, rc_recv));
}

/// A shared receive queue whose QPs of one transport took its ODP receives, and whose QPs are
/// all destroyed since, still takes receives: into pinned memory, and into ODP memory verified
/// for the transport its earlier ODP receives were (a QP of it may still attach). An ODP
/// receive of another transport is refused, and the refusal names the transports of the
/// earlier receives that bar it (no QP is attached any more).
#[test]
fn an_srq_whose_odp_receives_completed_and_qps_are_gone_still_takes_receives() {
    let w = srq_posting_world();
    let (cq, fake) = w.cq();
    let srq = w.srq(8);
    let handle = crate::srq::Srq { shared: Arc::clone(&srq) };
    let page = crate::mr::page_size() as u64;
    let srq_recv = sys::IBV_ODP_SUPPORT_SRQ_RECV;
    let rc = OdpTag::verified(sys::IBV_QPT_RC, srq_recv, false);
    let ud = OdpTag::verified(sys::IBV_QPT_UD, srq_recv, false);
    // An RC QP (the fake's transport) consumes an ODP receive, then is destroyed.
    let qp = QpShared::fake(w.raw_qp(0x7d0), 0x7d0, 4, &cq, Arc::clone(&w.pd), Some(Arc::clone(&srq)));
    let t = handle.post_recv_owned(Recv::new(view(w, page, 64, rc))).map_err(|e| e.error).expect("an RC receive");
    fake.complete(recv_wc(0x7d0, 0, sys::IBV_WC_SUCCESS));
    let (c, _buf) = t.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("its completion");
    assert!(c.is_success());
    drop(qp);
    let pinned = handle.post_recv_owned(Recv::new(view(w, 2 * page, 64, OdpTag::NONE))).map_err(|e| e.error);
    let again = handle.post_recv_owned(Recv::new(view(w, 3 * page, 64, rc))).map_err(|e| e.error);
    let other = handle.post_recv_owned(Recv::new(view(w, 4 * page, 64, ud))).map_err(|e| e.error);
    let rc_attach = srq.attach_transport(sys::IBV_QPT_RC, "RC");
    assert!(pinned.is_ok(), "a pinned receive: {:?}", pinned.as_ref().err());
    assert!(again.is_ok(), "an ODP receive of the earlier receives' transport: {:?}", again.as_ref().err());
    assert!(rc_attach.is_ok(), "an RC QP: {rc_attach:?}");
    srq.detach_transport(sys::IBV_QPT_RC);
    let reason = match &other {
        Err(crate::Error::InvalidArgument { verb: "ibv_post_srq_recv", reason }) => reason.clone(),
        other => panic!("an ODP receive of UD after RC ones: {other:?}"),
    };
    std::mem::forget((pinned, again));
    // RC's bit among the transports (IBV_QPT_RC is 2).
    assert!(
        reason.contains("mask 0x4"),
        "the refusal does not name the earlier receives' transports that bar it: {reason}"
    );
}

/// `ibv_destroy_qp` failing (EBUSY, as when the QP is still in use): the QP stays in the
/// device.
unsafe extern "C" fn busy_destroy_qp(_: *mut sys::ibv_qp) -> std::ffi::c_int {
    libc::EBUSY
}

/// The fake device's verbs, but a QP's destroy fails.
static BUSY_DESTROY: crate::device::Verbs = crate::device::Verbs { destroy_qp: busy_destroy_qp, ..FAKE_VERBS };

/// A PD over `w`'s C objects whose context's QP destroys fail (both leaked).
fn busy_destroy_pd(w: &'static World) -> Arc<PdInner> {
    w.pd_with_verbs("fake-busy", &BUSY_DESTROY)
}

/// A QP whose destroy failed stays in the device and may still consume receives of its shared
/// receive queue: their completions, whenever polled (after other QPs were created on the CQ
/// too), complete the SRQ's requests, which would otherwise hold their buffers and their room
/// in the SRQ for ever.
#[test]
fn an_srq_receive_consumed_by_a_qp_whose_destroy_failed_reaches_the_srq_after_later_registrations() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let srq = w.srq(4);
    let x = QpShared::fake(w.raw_qp(0x7e0), 0x7e0, 4, &cq, busy_destroy_pd(w), Some(Arc::clone(&srq)));
    let (seq, t) = post_srq_recv(&srq);
    drop(x);
    // Another QP is created on the CQ; then the device completes the receive through the QP
    // whose destroy failed.
    let _z = w.qp(0x7e1, 4, &cq, None);
    fake.complete(recv_wc(0x7e0, seq, sys::IBV_WC_SUCCESS));
    match t.wait(Duration::from_millis(300)) {
        Ok((c, ())) => assert!(c.is_success()),
        Err(e) => panic!("the SRQ's receive consumed by the undestroyed QP never completes: {}", e.error),
    }
}
