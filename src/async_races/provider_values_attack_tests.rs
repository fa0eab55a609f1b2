//! Values that come from the provider, the device or the network, taken as untrusted input:
//! QP numbers a provider hands out at creation, `ibv_poll_cq` return values outside the
//! contract (more entries than asked, negative values other than -1), completions with
//! unknown statuses, opcodes and flags, and asynchronous events of unknown types or for
//! objects the library does not know. Each must end in a typed error or be ignored: no panic,
//! no buffer handed back while the device may use it, no completion delivered to another
//! request's token, every wait bounded.

use super::*;
use crate::event::{AsyncEvent, HandleId};

/// A buffer whose device side the test finishes by hand (`done`), counting the times it was
/// handed back or dropped before that.
fn watched() -> (Watch, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let done = Arc::new(AtomicBool::new(false));
    let early = Arc::new(AtomicUsize::new(0));
    let w = Watch { device_done: Arc::clone(&done), early: Arc::clone(&early), drops: Arc::new(AtomicUsize::new(0)) };
    (w, done, early)
}

/// An owned send token of `qp` over a watched buffer.
fn watched_send(qp: &Arc<QpShared>) -> (u64, OwnedToken<Watch>, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let seq = qp.sq.lock().push(true);
    let (buf, done, early) = watched();
    (seq, OwnedToken::new(QueueArc::Send(Arc::clone(qp)), seq, buf, None), done, early)
}

/// QP numbers are unique among a device's live QPs, and completions are routed by them. A
/// provider that hands out, at creation, the number of a QP that is alive and completes on
/// the same CQ would have the first QP's book take the second QP's completions: a request of
/// the first would read as complete (its buffer handed back) while the device still works on
/// it. The second QP is refused at its registration on the CQ; the first QP's request stays
/// outstanding until its own completion.
#[test]
fn a_provider_repeating_a_live_qp_number_does_not_complete_the_other_qps_requests() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let a = w.qp(0x7a0, 4, &cq, None);
    let raw = w.raw_qp(0x7a0);
    let refused = QpShared::try_fake_with_posts(raw, 0x7a0, 4, &cq, Arc::clone(&w.pd), None, fake_send, fake_recv);
    match refused {
        Err(crate::Error::InvalidArgument { verb: "ibv_create_qp", reason }) => {
            assert!(reason.contains("the number of a live QP"), "{reason}")
        }
        Err(e) => panic!("refused for another reason: {e:?}"),
        Ok(_) => panic!("a second live QP numbered {:#x} was registered on the CQ", 0x7a0),
    }
    let (sa, ta, a_done, a_early) = watched_send(&a);
    // A completion naming the number and request 0 can only be the first QP's now.
    let Err(ta) = ta.try_complete() else { panic!("handed back before any completion") };
    assert!(a.sq.is_pending(sa));
    assert_eq!(a_early.load(SeqCst), 0, "dropped early");
    a_done.store(true, SeqCst);
    fake.complete(send_wc(0x7a0, sa, sys::IBV_WC_SUCCESS));
    let (c, _buf) = ta.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("its own completion");
    assert!(c.is_success());
}

/// The device's side of a CQ whose `poll_cq` may return, instead of the number of entries it
/// wrote, what the test queued in `returns` (a negative value: a failure, nothing taken), and
/// whose `req_notify_cq` returns what the test queued in `arm_returns` (0 when none is left).
struct OddCq {
    entries: Mutex<VecDeque<sys::ibv_wc>>,
    returns: Mutex<VecDeque<i32>>,
    arm_returns: Mutex<VecDeque<i32>>,
    polls: AtomicUsize,
}

impl OddCq {
    fn complete(&self, wc: sys::ibv_wc) {
        self.entries.lock().unwrap().push_back(wc);
    }
    fn next_returns(&self, r: i32) {
        self.returns.lock().unwrap().push_back(r);
    }
}

/// The odd provider's `poll_cq`.
///
/// # Safety
/// `cq` is one of [`odd_cq`]'s (its `cq_context` a leaked `OddCq`), `wc` has room for `n`
/// entries: as `ibv_poll_cq` is called.
unsafe extern "C" fn odd_poll(cq: *mut sys::ibv_cq, n: i32, wc: *mut sys::ibv_wc) -> i32 {
    // SAFETY: per this function's contract.
    let f = unsafe { &*((*cq).cq_context as *const OddCq) };
    f.polls.fetch_add(1, SeqCst);
    let ret = f.returns.lock().unwrap().pop_front();
    if let Some(r) = ret.filter(|&r| r < 0) {
        return r;
    }
    let mut e = f.entries.lock().unwrap();
    let mut i = 0;
    while i < n && !e.is_empty() {
        // SAFETY: `i < n`, within the caller's array.
        unsafe { *wc.add(i as usize) = e.pop_front().unwrap() };
        i += 1;
    }
    ret.unwrap_or(i)
}

/// The odd provider's `req_notify_cq`.
///
/// # Safety
/// `cq` is one of [`odd_cq`]'s.
unsafe extern "C" fn odd_arm(cq: *mut sys::ibv_cq, _solicited: i32) -> i32 {
    // SAFETY: per this function's contract.
    let f = unsafe { &*((*cq).cq_context as *const OddCq) };
    f.arm_returns.lock().unwrap().pop_front().unwrap_or(0)
}

/// A CQ of `w`'s device (its `CqShared` never destroyed) whose provider is [`odd_poll`] and
/// [`odd_arm`], reporting to no completion channel.
fn odd_cq(w: &'static World) -> (Arc<CqShared>, &'static OddCq) {
    // SAFETY: zeroed C structs (a valid value of each: pointers null), leaked for the test;
    // the context's two operations are this module's functions of the right types, which
    // `CqShared` calls as a provider's; the CQ points at the leaked `OddCq`.
    unsafe {
        let vctx: &'static mut sys::verbs_context = Box::leak(Box::new(std::mem::zeroed()));
        vctx.context.ops.poll_cq = Some(odd_poll);
        vctx.context.ops.req_notify_cq = Some(odd_arm);
        let raw: &'static mut sys::ibv_cq = Box::leak(Box::new(std::mem::zeroed()));
        raw.context = &mut vctx.context;
        let odd: &'static OddCq = Box::leak(Box::new(OddCq {
            entries: Mutex::new(VecDeque::new()),
            returns: Mutex::new(VecDeque::new()),
            arm_returns: Mutex::new(VecDeque::new()),
            polls: AtomicUsize::new(0),
        }));
        raw.cq_context = (odd as *const OddCq).cast_mut().cast();
        let cq = CqShared::fake(NonNull::from(raw), Arc::clone(&w.ctx), None, 1 << 20);
        std::mem::forget(Arc::clone(&cq));
        (cq, odd)
    }
}

/// The typed error of a failed `ibv_poll_cq` that returned `ret`: the verb named, an errno.
#[track_caller]
fn assert_poll_failed(e: &crate::Error, ret: i32) {
    match e {
        crate::Error::Verb { verb, source, .. } => {
            assert_eq!(verb.name(), "ibv_poll_cq", "{e}");
            let errno = source.raw_os_error().expect("an errno");
            assert_eq!(errno, ret.checked_neg().unwrap_or(ret), "{e}");
        }
        other => panic!("a failed poll returning {ret}: {other:?}"),
    }
}

/// `ibv_poll_cq` returning more entries than asked for (a provider's mistake): the waits of an
/// owned send, an owned receive and `Cq::progress` take what was asked for at most, never read
/// past it, hand each completion to its own token once, and complete nothing else.
#[test]
fn a_poll_returning_more_entries_than_asked_completes_only_what_it_wrote() {
    let w = World::new();
    let (cq, odd) = odd_cq(w);
    let qp = w.qp(0x7b0, 8, &cq, None);
    // The awaited send's completion, the return saying 9 where 1 was asked for.
    let (s0, t0, d0, e0) = watched_send(&qp);
    let (s1, t1, d1, e1) = watched_send(&qp);
    d0.store(true, SeqCst);
    odd.complete(send_wc(0x7b0, s0, sys::IBV_WC_SUCCESS));
    odd.next_returns(9);
    let (c, _buf) = t0.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("its own completion");
    assert!(c.is_success());
    assert!(qp.sq.is_pending(s1), "a request nothing completed is complete");
    // An empty CQ that says it returned entries: no completion of anybody's.
    for r in [1, 16, i32::MAX] {
        odd.next_returns(r);
        let n = crate::cq::Cq { inner: Arc::clone(&cq) }.progress().expect("a poll");
        assert!(n <= 16, "{n} entries taken from a batch of 16");
    }
    assert!(qp.sq.is_pending(s1), "a request nothing completed is complete");
    let Err(t1) = t1.try_complete() else { panic!("handed back while still on the device") };
    // A receive, its completion in a batch that claims more than the batch holds.
    let r = post_recv(&qp);
    odd.complete(recv_wc(0x7b0, 0, sys::IBV_WC_SUCCESS));
    odd.next_returns(1000);
    let mut out = [crate::wc::Completion::default(); 3];
    let n = crate::cq::Cq { inner: Arc::clone(&cq) }.poll_into(&mut out).expect("a poll");
    assert!(n <= out.len());
    let (c, ()) = r.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("the receive's own completion");
    assert!(c.is_success() && c.qp_num() == 0x7b0);
    d1.store(true, SeqCst);
    odd.complete(send_wc(0x7b0, s1, sys::IBV_WC_SUCCESS));
    assert!(t1.wait(Duration::from_secs(1)).is_ok());
    assert_eq!(e0.load(SeqCst) + e1.load(SeqCst), 0, "a buffer handed back or dropped early");
}

/// `ibv_poll_cq` failing with negative values other than -1 (an errno returned negated, or a
/// value no errno has): every wait reports `Error::Verb` naming `ibv_poll_cq` with the token
/// handed back, nothing panics, and the request completes by its own completion afterwards.
#[test]
fn polls_failing_with_any_negative_value_are_typed_errors_on_every_wait() {
    let w = World::new();
    let (cq, odd) = odd_cq(w);
    let qp = w.qp(0x7c0, 8, &cq, None);
    let srq = w.srq(4);
    let qs = w.qp(0x7c1, 8, &cq, Some(Arc::clone(&srq)));
    let _ = &qs;
    for ret in [-2, -libc::EIO, -4095, i32::MIN, -1] {
        // An owned send.
        let (seq, t, done, early) = watched_send(&qp);
        odd.next_returns(ret);
        let Err(e) = t.wait(Duration::from_secs(1)) else { panic!("{ret}: the poll failed, the wait succeeded") };
        assert_poll_failed(&e.error, ret);
        done.store(true, SeqCst);
        odd.complete(send_wc(0x7c0, seq, sys::IBV_WC_SUCCESS));
        assert!(e.token.wait(Duration::from_secs(1)).is_ok(), "{ret}: its own completion");
        assert_eq!(early.load(SeqCst), 0);
        // An owned receive.
        let rseq = qp.rq.lock().push(true);
        let r = OwnedToken::new(QueueArc::Recv(Arc::clone(&qp)), rseq, (), None);
        odd.next_returns(ret);
        let e = r.wait(Duration::from_secs(1)).expect_err("the poll failed");
        assert_poll_failed(&e.error, ret);
        odd.complete(recv_wc(0x7c0, rseq, sys::IBV_WC_SUCCESS));
        assert!(e.token.wait(Duration::from_secs(1)).is_ok(), "{ret}: the receive's own completion");
        // A shared receive queue's receive.
        let (sseq, st) = post_srq_recv(&srq);
        odd.next_returns(ret);
        let e = st.wait(Duration::from_secs(1)).expect_err("the poll failed");
        assert_poll_failed(&e.error, ret);
        odd.complete(recv_wc(0x7c1, sseq, sys::IBV_WC_SUCCESS));
        assert!(e.token.wait(Duration::from_secs(1)).is_ok(), "{ret}: the SRQ receive's own completion");
        // Progress without a token.
        odd.next_returns(ret);
        let e = crate::cq::Cq { inner: Arc::clone(&cq) }.progress().expect_err("the poll failed");
        assert_poll_failed(&e, ret);
    }
}

/// The lanes' waits over a provider whose polls fail with negative values other than -1, or
/// claim more entries than asked: the send lane's and the receive lane's waits report the
/// failure with the token back, and the request's own completion answers the next wait.
#[test]
fn lane_waits_over_odd_poll_returns_are_typed_and_answer_the_own_completion() {
    let w = World::new();
    let (cq, odd) = odd_cq(w);
    let shared = w.posting_qp(0x7d0, 8, &cq, None);
    std::mem::forget(Arc::clone(&shared));
    let mut qp: Qp<RC, RTS> = Qp::from_fake(Arc::clone(&shared));
    let r = scope(|s| {
        let (mut send, mut recv) = s.lanes(&mut qp).expect("lanes");
        let mut wr = send.prepare(Write::new(w.local(0x1000, 64), remote())).expect("prepared");
        let mut rr = recv.prepare(Recv::new(w.local_mut(0x2000, 64))).expect("prepared");
        for ret in [-2, i32::MIN, -libc::EAGAIN] {
            let t = send.post(&mut wr).expect("posted");
            let seq = sends(&shared).last().unwrap().0;
            odd.next_returns(ret);
            odd.next_returns(ret);
            let e = send.wait(t, Duration::from_secs(1)).expect_err("the poll failed");
            assert_poll_failed(&e.error, ret);
            odd.complete(wc_of(0x7d0, seq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RDMA_WRITE));
            // Claimed as more entries than the one asked for.
            odd.next_returns(5);
            assert!(send.wait(e.token, Duration::from_secs(1)).expect("own completion").is_success());
            let t = recv.post(&mut rr).expect("posted");
            let rseq = *recvs(&shared).last().unwrap();
            odd.next_returns(ret);
            odd.next_returns(ret);
            let e = recv.wait(t, Duration::from_secs(1)).expect_err("the poll failed");
            assert_poll_failed(&e.error, ret);
            assert!(rr.received().is_none(), "handed out while the device may write it");
            odd.complete(wc_of(0x7d0, rseq, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
            odd.next_returns(3);
            assert!(recv.wait(e.token, Duration::from_secs(1)).expect("own completion").is_success());
            assert!(rr.received().is_some());
        }
    });
    assert!(r.is_ok(), "{r:?}");
}

/// Asynchronous events the library does not know, or about objects it does not know: an event
/// type of a newer kernel comes out as `Unknown` with its value; a port event whose number is
/// no `u8` names port 0 (no port) rather than another port; a CQ error naming a CQ that none
/// of the context's CQs is breaks no QP; a QP event of a QP the library did not create is
/// reported with its number and changes nothing. Each is acknowledged, nothing panics.
#[test]
fn async_events_of_unknown_types_and_objects_are_typed_and_change_nothing() {
    let (w, wfd) = world_with_events();
    let (cq, _) = w.cq();
    w.ctx.cqs.lock().unwrap().push(Arc::downgrade(&cq));
    let qp = w.qp(0x7e0, 4, &cq, None);
    let ctx = crate::device::Context { inner: Arc::clone(&w.ctx) };
    let next = || ctx.next_async_event(Duration::from_secs(1)).expect("an event");
    for t in [0x7777, sys::IBV_EVENT_WQ_FATAL + 1000, u32::MAX] {
        inject_event(wfd, 0xdead_beef, t);
        let ev = next();
        assert_eq!(ev, AsyncEvent::Unknown(t));
        assert!(ev.to_string().contains(&t.to_string()), "{ev}");
        assert_eq!((ev.qp_num(), ev.port()), (None, None));
    }
    for (element, port) in [(1u64, 1u8), (255, 255), (256, 0), (0xffff_ffff, 0), (u64::MAX, 0)] {
        inject_event(wfd, element, sys::IBV_EVENT_PORT_ERR);
        assert_eq!(next(), AsyncEvent::PortError { port }, "element {element:#x}");
    }
    // A CQ of the device that is none of the context's CQs (an `ibv_cq` the library never
    // registered).
    // SAFETY: a zeroed `ibv_cq` (a valid value: its mutex and condition their static
    // initialisers), leaked: the acknowledgement locks it.
    let stray: &'static mut sys::ibv_cq = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    let stray_ptr: *mut sys::ibv_cq = stray;
    inject_event(wfd, stray_ptr as u64, sys::IBV_EVENT_CQ_ERR);
    assert_eq!(next(), AsyncEvent::CqError { cq: HandleId::of(stray_ptr) });
    assert!(qp.check_usable().is_ok(), "a CQ error of another CQ broke a QP");
    // A QP event of a QP the library did not create, numbered as one of its own.
    // SAFETY: a zeroed `ibv_qp`, leaked: the decoding reads its number, the acknowledgement
    // locks it.
    let foreign: &'static mut sys::ibv_qp = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    foreign.qp_num = 0x7e0;
    let foreign_ptr: *mut sys::ibv_qp = foreign;
    for t in [sys::IBV_EVENT_QP_FATAL, sys::IBV_EVENT_QP_LAST_WQE_REACHED, sys::IBV_EVENT_COMM_EST] {
        inject_event(wfd, foreign_ptr as u64, t);
        assert_eq!(next().qp_num(), Some(0x7e0));
    }
    assert!(qp.check_usable().is_ok(), "a QP event broke a QP");
    assert!(matches!(ctx.next_async_event(Duration::ZERO), Err(crate::Error::Timeout { .. })));
}

/// QP numbers are 24 bits; the number a provider hands out at creation is taken as it comes.
/// A destroyed shared receive queue is recorded among a CQ's destroyed objects under the
/// number no QP has (`u32::MAX`): a QP the provider numbered so must not have its completions
/// taken for the destroyed SRQ's when the next registration drains that list (its request
/// would never complete: its wait would time out, a scope would break the QP).
#[test]
fn a_qp_numbered_beyond_24_bits_keeps_its_completions_across_a_drain_of_destroyed_objects() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let x = w.qp(u32::MAX, 4, &cq, None);
    let srq = w.destroyable_srq(4);
    let y = w.posting_qp(0x7f1, 4, &cq, Some(Arc::clone(&srq)));
    drop(y);
    drop(srq);
    let t = post_send(&x, true);
    fake.complete(send_wc(u32::MAX, 0, sys::IBV_WC_SUCCESS));
    // The next QP created on the CQ drains what the destroyed ones may have left in it.
    let _z = w.qp(0x7f2, 4, &cq, None);
    match t.wait(Duration::from_millis(200)) {
        Ok((c, ())) => assert!(c.is_success()),
        Err(e) => panic!("the live QP's completion was taken for a destroyed SRQ's: {}", e.error),
    }
}

/// A UD receive's source fields come from the network (the LRH's service level, the source
/// LID, the destination LID's path bits): an address handle back from a completion whose
/// fields do not fit the headers' widths is refused before the provider sees them, as an
/// address vector of the program's own would be (providers shift them unmasked into their
/// hardware's words). A completion that is no successful receive (an unknown status or
/// opcode) is refused too. Nothing panics.
#[test]
fn an_address_handle_back_from_out_of_range_datagram_fields_is_refused_before_the_provider() {
    let w = World::new();
    let pd = crate::pd::Pd { inner: Arc::clone(&w.pd) };
    let recv = |sl: u8, path_bits: u8| {
        let wc = sys::ibv_wc {
            opcode: sys::IBV_WC_RECV,
            qp_num: 0x7f8,
            src_qp: 0xff_ffff,
            slid: u16::MAX,
            pkey_index: u16::MAX,
            sl,
            dlid_path_bits: path_bits,
            byte_len: u32::MAX,
            ..Default::default()
        };
        crate::wc::Completion::from_raw(&wc, crate::cq::WcFlagsQuirk::None, w.ctx.tag)
    };
    for (sl, bits, why) in
        [(16, 0, "service level"), (255, 0, "service level"), (0, 0x80, "path bits"), (15, 0xff, "path bits")]
    {
        match pd.create_ah_from_wc(1, &recv(sl, bits), &[0u8; 40]) {
            Err(crate::Error::InvalidArgument { reason, .. }) => assert!(reason.contains(why), "{reason}"),
            other => panic!("sl {sl}, path bits {bits:#x}: {:?}", other.map(|ah| *ah.address())),
        }
    }
    for (status, opcode) in
        [(0x77, sys::IBV_WC_RECV), (sys::IBV_WC_SUCCESS, 0x7777), (sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND)]
    {
        let wc = sys::ibv_wc { status, opcode, qp_num: 0x7f8, ..Default::default() };
        let c = crate::wc::Completion::from_raw(&wc, crate::cq::WcFlagsQuirk::None, w.ctx.tag);
        crate::test_util::assert_refused(
            pd.create_ah_from_wc(1, &c, &[0u8; 40]),
            "ibv_create_ah_from_wc",
            "not a received datagram",
        );
    }
    std::mem::forget(pd);
}

/// Completions whose status, opcode and flags the library does not know, and whose length
/// exceeds any buffer: each reaches its own token as the device wrote it (an unknown status is
/// a failure, never a success; its flags decode no invalidation), and nothing reads a buffer
/// by the reported length.
#[test]
fn completions_with_unknown_status_opcode_flags_and_any_length_reach_their_own_tokens() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let qp = w.qp(0x7f9, 8, &cq, None);
    let odd = |wr_id: u64, status: u32| sys::ibv_wc {
        wr_id,
        status,
        opcode: 0x999,
        qp_num: 0x7f9,
        wc_flags: u32::MAX,
        byte_len: u32::MAX,
        vendor_err: u32::MAX,
        ..Default::default()
    };
    // A send with an unknown status, an earlier unsignaled one it covers, a receive.
    let a = post_send(&qp, false);
    let b = post_send(&qp, true);
    let r = post_recv(&qp);
    fake.complete(odd(1, 0x55));
    fake.complete(odd(RECV_BIT, 0x56));
    let (cb, ()) = b.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("b's own completion");
    assert_eq!((cb.status(), cb.opcode()), (crate::wc::WcStatus::Unknown(0x55), crate::wc::WcOpcode::Unknown(0x999)));
    assert!(!cb.is_success() && cb.ok().is_err());
    // Shown (`Debug`, and as an error) with the unknown values' numbers.
    assert!(format!("{cb:?}").contains("Unknown(85)"), "{cb:?}");
    assert!(cb.ok().unwrap_err().to_string().contains("unknown (85)"));
    assert_eq!(cb.invalidation_serial(), 0, "a failed completion's flags mean nothing");
    let (ca, ()) = a.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("a, covered");
    assert_eq!(ca.source(), crate::wc::CompletionSource::ImpliedByLater);
    let (cr, ()) = r.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("the receive's own");
    assert_eq!((cr.status(), cr.byte_len()), (crate::wc::WcStatus::Unknown(0x56), u32::MAX));
    // A receive lane's receive whose success says it wrote more than its buffer holds: the
    // buffer is handed out as it is, once its receive completed.
    let shared = w.posting_qp(0x7fa, 8, &cq, None);
    std::mem::forget(Arc::clone(&shared));
    let mut typed: Qp<RC, RTS> = Qp::from_fake(Arc::clone(&shared));
    let res = scope(|s| {
        let mut lane = s.recv_lane(&mut typed).expect("lane");
        let mut rr = lane.prepare(Recv::new(w.local_mut(0x3000, 16))).expect("prepared");
        let t = lane.post(&mut rr).expect("posted");
        assert!(rr.received().is_none());
        let seq = *recvs(&shared).last().unwrap();
        fake.complete(sys::ibv_wc {
            qp_num: 0x7fa,
            status: sys::IBV_WC_SUCCESS,
            opcode: sys::IBV_WC_RECV,
            ..odd(seq, 0)
        });
        let c = lane.wait(t, Duration::from_secs(1)).expect("its completion");
        assert_eq!(c.byte_len(), u32::MAX);
        assert_eq!(rr.received().map(|b| b.len()), Some(16));
    });
    assert!(res.is_ok(), "{res:?}");
}
