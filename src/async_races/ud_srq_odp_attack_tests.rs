//! Attacks on UD address handles (src/ah.rs, `To` in src/wr.rs), shared receive queues
//! (src/srq.rs) and the On-Demand Paging checks of work requests (src/mr.rs `OdpTag`,
//! src/sgl.rs) over the fake device.
//!
//! What each test looks at: a request the library must refuse is refused with a typed error
//! naming the verb, handed back, and never reaches the (fake) provider; an address handle
//! named by a UD request stays alive (its `ibv_destroy_ah` is not called) until the library
//! knows the request is done, whatever the program does with its handle and its token.

use super::*;
use crate::ah::Ah;
use crate::srq::Srq;
use crate::transport::UD;
use crate::wr::{InlineSend, Send as WrSend};
use crate::Error;

// ---------------------------------------------------------------------------------------------
// Fakes: address handles whose destroy is recorded, a second PD, a UD QP, an SRQ provider.
// ---------------------------------------------------------------------------------------------

/// The `ibv_ah`s whose `ibv_destroy_ah` ran, by address.
static DESTROYED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Every private operation of a recording context: only `destroy_ah` is ever called through
/// it (it is the context of address handles only), with the handle.
unsafe extern "C" fn record_destroy(ah: *mut sys::ibv_ah) -> i32 {
    DESTROYED.lock().unwrap_or_else(|e| e.into_inner()).push(ah as usize);
    0
}

fn destroyed(ah: usize) -> bool {
    DESTROYED.lock().unwrap_or_else(|e| e.into_inner()).contains(&ah)
}

/// A leaked fake context whose private operations all record a destroyed address handle.
fn recording_context() -> *mut sys::ibv_context {
    // SAFETY: a zeroed `verbs_context` (valid: pointers null) and a table of function
    // pointers, both leaked; `ibv_destroy_ah` reads `destroy_ah` from the table behind `priv`.
    unsafe {
        let vctx: &'static mut sys::verbs_context = Box::leak(Box::new(std::mem::zeroed()));
        let f = record_destroy as unsafe extern "C" fn(*mut sys::ibv_ah) -> i32 as usize;
        let ops: &'static mut [usize; 8192] = Box::leak(Box::new([f; 8192]));
        vctx.priv_ = (ops as *mut [usize; 8192]).cast();
        &mut vctx.context
    }
}

/// An address handle in `pd` whose destroy is recorded; and its raw address.
fn watched_ah(pd: &Arc<PdInner>) -> (Ah, usize) {
    // SAFETY: all-zero is a valid `ibv_ah`; leaked.
    let raw: &'static mut sys::ibv_ah = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    raw.context = recording_context();
    let addr = raw as *mut sys::ibv_ah as usize;
    (Ah::fake(NonNull::from(raw), Arc::clone(pd)), addr)
}

/// A second PD of the world's context (leaked).
fn other_pd(w: &'static World) -> Arc<PdInner> {
    // SAFETY: all-zero is a valid `ibv_pd`; leaked.
    let rawpd: &'static mut sys::ibv_pd = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    rawpd.context = w.ctxp;
    let pd = Arc::new(PdInner { pd: NonNull::from(rawpd), ctx: Arc::clone(&w.ctx) });
    std::mem::forget(Arc::clone(&pd));
    pd
}

/// A UD QP in RTS over the fake provider (`posting_qp`), typed, with its shared part.
fn ud_qp(
    w: &'static World,
    qp_num: u32,
    depth: u32,
    cq: &Arc<CqShared>,
    srq: Option<Arc<SrqShared>>,
) -> (Qp<UD, RTS>, Arc<QpShared>) {
    let shared = w.posting_qp(qp_num, depth, cq, srq);
    std::mem::forget(Arc::clone(&shared));
    (Qp::from_fake(Arc::clone(&shared)), shared)
}

/// A local view of the world's PD with the ODP tag `odp`.
fn odp_buf(w: &World, addr: u64, len: u32, odp: OdpTag) -> LocalBuf<'static> {
    LocalBuf::from_parts(addr, len, 7, odp, w.pd.id())
}

fn odp_sink(w: &World, addr: u64, len: u32, odp: OdpTag) -> LocalBufMut<'static> {
    LocalBufMut::from_parts(addr, len, 7, odp, w.pd.id())
}

/// A world whose provider takes SRQ receives ([`World::record_srq_posts`]), and an SRQ of it
/// (`max_sge` 1).
fn srq_world(max_wr: u32) -> (&'static World, Arc<SrqShared>) {
    let w = World::new();
    w.record_srq_posts();
    let srq = w.srq(max_wr);
    (w, srq)
}

// ---------------------------------------------------------------------------------------------
// Address handles of another PD.
// ---------------------------------------------------------------------------------------------

/// A UD send naming an address handle of another PD (of the same context) is refused on every
/// path that posts sends (scope post, inline, list, lane prepare and prepared list, owned),
/// bare or under flag wrappers, with `InvalidArgument` of `ibv_post_send`, the request handed
/// back, the provider never called; the same requests with the QP's own PD's handle are posted.
#[test]
fn an_address_handle_of_another_pd_is_refused_on_every_send_path_before_the_provider() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (mut qp, shared) = ud_qp(w, 0xd01, 8, &cq, None);
    let (foreign, _) = watched_ah(&other_pd(w));
    let (mine, _) = watched_ah(&w.pd);
    let what = "the address handle belongs to another protection domain";
    let r = scope(|s| {
        let e = s.post_send(&qp, WrSend::new(w.local(0x1000, 8)).to(&foreign, 0x12, 0x1111)).expect_err("foreign AH");
        invalid(&e.error, "ibv_post_send", what);
        assert!(e.wr.is_some(), "handed back");
        let e = s
            .post_send(&qp, WrSend::new(w.local(0x1000, 8)).unsignaled().to(&foreign, 0x12, 0x1111).solicited())
            .expect_err("foreign AH under wrappers");
        invalid(&e.error, "ibv_post_send", what);
        assert!(e.wr.is_some());
        let e = s.post_inline(&qp, InlineSend::new(b"datagram").to(&foreign, 0x12, 0x1111)).expect_err("inline");
        invalid(&e.error, "ibv_post_send", what);
        assert!(e.wr.is_some());
        let e = s
            .post_send_list(
                &qp,
                [
                    WrSend::new(w.local(0x1000, 8)).to(&mine, 0x12, 0x1111),
                    WrSend::new(w.local(0x2000, 8)).to(&foreign, 0x12, 0x1111),
                ],
            )
            .expect_err("a list with one foreign AH");
        invalid(&e.error, "ibv_post_send", what);
        assert_eq!((e.posted.len(), e.rejected.len()), (0, 2), "nothing of the list is posted");
    });
    r.expect("nothing was posted: the scope ends clean");
    assert!(sends(&shared).is_empty(), "the provider saw a request: {:?}", sends(&shared));
    // Lanes.
    let r = scope(|s| {
        let lane = s.send_lane(&mut qp).expect("lane");
        let e = lane.prepare(WrSend::new(w.local(0x1000, 8)).to(&foreign, 0x12, 0x1111)).expect_err("lane");
        invalid(&e.error, "ibv_post_send", what);
        assert!(e.wr.is_some());
        let e = lane
            .prepare_list(
                vec![
                    WrSend::new(w.local(0x1000, 8)).to(&mine, 0x12, 0x1111),
                    WrSend::new(w.local(0x2000, 8)).to(&foreign, 0x12, 0x1111),
                ],
                1,
            )
            .expect_err("lane list");
        invalid(&e.error, "ibv_post_send", what);
        assert_eq!(e.wr.map(|v| v.len()), Some(2), "the whole list back");
    });
    r.expect("nothing posted");
    assert!(sends(&shared).is_empty(), "the provider saw a lane request");
    // Owned.
    let e = qp.post_send_owned(WrSend::new(w.local(0x1000, 8)).to(&foreign, 0x12, 0x1111)).expect_err("owned");
    invalid(&e.error, "ibv_post_send", what);
    assert!(e.wr.is_some());
    assert!(sends(&shared).is_empty());
    // The QP's own PD's handle: posted.
    let t = qp.post_send_owned(WrSend::new(w.local(0x1000, 8)).to(&mine, 0x12, 0x1111)).expect("own PD");
    let posted = sends(&shared);
    assert_eq!(posted.len(), 1);
    fake.complete(send_wc(0xd01, posted[0].0, sys::IBV_WC_SUCCESS));
    let (c, _) = t.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("completes");
    assert!(c.is_success());
}

/// `remote_qpn` beyond the wire's 24 bits is refused when the request is built (scope and
/// owned), before the provider.
#[test]
fn a_remote_qpn_beyond_24_bits_is_refused_before_the_provider() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (qp, shared) = ud_qp(w, 0xd02, 8, &cq, None);
    let (ah, _) = watched_ah(&w.pd);
    let e = qp.post_send_owned(WrSend::new(w.local(0x1000, 8)).to(&ah, 1 << 24, 0x1111)).expect_err("25 bits");
    invalid(&e.error, "ibv_post_send", "remote_qpn");
    assert!(e.wr.is_some());
    scope(|s| {
        let e = s.post_inline(&qp, InlineSend::new(b"x").to(&ah, u32::MAX, 0)).expect_err("32 bits");
        invalid(&e.error, "ibv_post_send", "remote_qpn");
    })
    .unwrap();
    assert!(sends(&shared).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Address handles stay alive while a request names them.
// ---------------------------------------------------------------------------------------------

/// An owned UD send: the program drops its address handle and then the token while the
/// request is in flight: `ibv_destroy_ah` waits for the completion (polled by someone else).
#[test]
fn an_address_handle_outlives_a_dropped_owned_token_until_its_completion() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = ud_qp(w, 0xd03, 8, &cq, None);
    let (ah, raw) = watched_ah(&w.pd);
    let t = qp.post_send_owned(WrSend::new(w.local(0x1000, 8)).to(&ah, 0x12, 0x1111)).expect("posted");
    drop(ah);
    assert!(!destroyed(raw), "destroyed while the request names it (program's handle dropped)");
    drop(t);
    assert!(!destroyed(raw), "destroyed when the token was dropped, the request in flight");
    cq.poll_and_route().unwrap();
    assert!(!destroyed(raw), "destroyed by an empty poll");
    let seq = sends(&shared)[0].0;
    fake.complete(send_wc(0xd03, seq, sys::IBV_WC_SUCCESS));
    cq.poll_and_route().unwrap();
    assert!(destroyed(raw), "the completion was polled: the last handle is gone");
}

/// An unsignaled owned UD send followed by a signaled one, each with its own address handle,
/// both handles and the first token dropped: neither handle is destroyed before the signaled
/// request's completion (which covers the unsignaled one) is polled; both are after it.
#[test]
fn an_unsignaled_requests_address_handle_lives_until_a_later_completion_covers_it() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = ud_qp(w, 0xd04, 8, &cq, None);
    let (a, ra) = watched_ah(&w.pd);
    let (b, rb) = watched_ah(&w.pd);
    let ta = qp.post_send_owned(WrSend::new(w.local(0x1000, 8)).unsignaled().to(&a, 0x12, 0x1111)).expect("A");
    let tb = qp.post_send_owned(WrSend::new(w.local(0x2000, 8)).to(&b, 0x13, 0x1111)).expect("B");
    drop((a, b, ta));
    let posted = sends(&shared);
    assert_eq!(posted.iter().map(|p| p.1).collect::<Vec<_>>(), [false, true], "A unsignaled, B signaled");
    cq.poll_and_route().unwrap();
    assert!(!destroyed(ra) && !destroyed(rb), "an address handle destroyed before any completion");
    fake.complete(send_wc(0xd04, posted[1].0, sys::IBV_WC_SUCCESS));
    cq.poll_and_route().unwrap();
    assert!(destroyed(ra), "A is covered by B's completion: its handle is released");
    assert!(!destroyed(rb), "B's token still holds its handle");
    let (c, _) = tb.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("B");
    assert!(c.is_success());
    assert!(destroyed(rb));
}

/// The provider refuses an owned UD send with `bad_wr` NULL (it may have queued it): nothing
/// is handed back, and the address handle is kept until a later completion covers the request
/// (or a reset settles it), not destroyed with the error.
#[test]
fn an_address_handle_of_a_send_that_may_be_queued_is_kept_until_a_completion_or_reset() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = ud_qp(w, 0xd05, 8, &cq, None);
    let (a, ra) = watched_ah(&w.pd);
    answer_next(&shared, Answer::RefuseNull);
    let e = qp.post_send_owned(WrSend::new(w.local(0x1000, 8)).to(&a, 0x12, 0x1111)).expect_err("refused");
    assert!(e.wr.is_none(), "it may be queued: not handed back");
    drop(e);
    drop(a);
    assert!(!destroyed(ra), "destroyed with the refusal, though the provider may have queued the request");
    // A later signaled request's completion covers it.
    let (b, rb) = watched_ah(&w.pd);
    let tb = qp.post_send_owned(WrSend::new(w.local(0x2000, 8)).to(&b, 0x13, 0x1111)).expect("B");
    drop(b);
    assert!(!destroyed(ra));
    let seq_b = sends(&shared).last().unwrap().0;
    fake.complete(send_wc(0xd05, seq_b, sys::IBV_WC_SUCCESS));
    let (c, _) = tb.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("B");
    assert!(c.is_success());
    assert!(destroyed(ra), "covered by B's completion");
    assert!(destroyed(rb));
    // Again, settled by a reset this time.
    let (d, rd) = watched_ah(&w.pd);
    answer_next(&shared, Answer::RefuseNull);
    let e = qp.post_send_owned(WrSend::new(w.local(0x1000, 8)).to(&d, 0x12, 0x1111)).expect_err("refused");
    drop(e);
    drop(d);
    assert!(!destroyed(rd));
    let qp = qp.reset().map_err(|e| e.error).expect("reset");
    assert!(destroyed(rd), "the reset settled the request: its handle is released");
    drop(qp);
}

/// A leaked (forgotten) owned token: its address handle is never destroyed, even after the
/// request's completion is polled (the request's result is kept for a token that never comes).
#[test]
fn a_forgotten_owned_tokens_address_handle_is_never_destroyed() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = ud_qp(w, 0xd06, 8, &cq, None);
    let (a, ra) = watched_ah(&w.pd);
    let t = qp.post_send_owned(WrSend::new(w.local(0x1000, 8)).to(&a, 0x12, 0x1111)).expect("A");
    drop(a);
    std::mem::forget(t);
    fake.complete(send_wc(0xd06, sends(&shared)[0].0, sys::IBV_WC_SUCCESS));
    cq.poll_and_route().unwrap();
    assert!(!destroyed(ra), "a forgotten token's handle destroyed");
}

/// Many threads post owned UD sends with fresh address handles, drop handle and token at once,
/// while another thread completes them out of order and polls: no handle is destroyed before
/// its request's completion was polled.
#[test]
fn address_handles_of_dropped_tokens_die_only_after_their_completions_across_threads() {
    bounded(60, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = ud_qp(w, 0xd07, 64, &cq, None);
        let qp = Arc::new(qp);
        let completed: Arc<Mutex<Vec<u64>>> = Arc::default();
        let record: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
        let posters: Vec<_> = (0..4)
            .map(|i| {
                let (qp, record, shared) = (Arc::clone(&qp), Arc::clone(&record), Arc::clone(&shared));
                std::thread::spawn(move || {
                    for j in 0..50u64 {
                        let (ah, raw) = watched_ah(&w.pd);
                        let buf = w.local(0x1000 * (i + 1), 8);
                        let mut rec = record.lock().unwrap();
                        match qp.post_send_owned(WrSend::new(buf).to(&ah, 0x12, 0x1111)) {
                            Ok(t) => {
                                let seq = sends(&shared).last().unwrap().0;
                                rec.push((seq, raw));
                                drop(rec);
                                if j % 2 == 0 {
                                    drop(t);
                                } else {
                                    let _ = t.wait(Duration::from_secs(5));
                                }
                            }
                            Err(e) => {
                                drop(rec);
                                assert!(matches!(e.error, Error::QueueFull { .. }), "{:?}", e.error);
                                std::thread::yield_now();
                            }
                        }
                        drop(ah);
                    }
                })
            })
            .collect();
        let done = Arc::new(AtomicBool::new(false));
        let device = {
            let (record, completed, done, cq) =
                (Arc::clone(&record), Arc::clone(&completed), Arc::clone(&done), Arc::clone(&cq));
            std::thread::spawn(move || {
                let mut next = 0usize;
                while !done.load(SeqCst) || next < record.lock().unwrap().len() {
                    let batch: Vec<(u64, usize)> = record.lock().unwrap()[next..].to_vec();
                    // Before the completions land: none of their handles may be gone.
                    for &(seq, raw) in &batch {
                        assert!(!destroyed(raw), "handle of request {seq} destroyed before its completion");
                    }
                    for &(seq, _) in batch.iter().rev() {
                        completed.lock().unwrap().push(seq);
                        fake.complete(send_wc(0xd07, seq, sys::IBV_WC_SUCCESS));
                    }
                    next += batch.len();
                    let _ = cq.poll_and_route();
                    std::thread::yield_now();
                }
                let _ = cq.poll_and_route();
            })
        };
        for p in posters {
            p.join().unwrap();
        }
        done.store(true, SeqCst);
        device.join().unwrap();
        let _ = cq.poll_and_route();
        // Every request completed and was polled: every handle is gone.
        for &(seq, raw) in record.lock().unwrap().iter() {
            assert!(destroyed(raw), "handle of request {seq} never destroyed");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Shared receive queues.
// ---------------------------------------------------------------------------------------------

/// A receive into memory of another PD than the SRQ's, or with more entries than the SRQ's
/// `max_sge`, is refused before `ibv_post_srq_recv` with the request handed back; a receive
/// into the SRQ's PD's memory reaches the provider.
#[test]
fn srq_receives_of_another_pd_or_too_many_entries_are_refused_before_the_provider() {
    let (w, srq) = srq_world(8);
    let handle = Srq { shared: Arc::clone(&srq) };
    let other = other_pd(w);
    let foreign = LocalBufMut::from_parts(0x1000, 64, 9, OdpTag::default(), other.id());
    let e = handle.post_recv_owned(Recv::new(foreign)).expect_err("another PD");
    invalid(&e.error, "ibv_post_srq_recv", "another protection domain");
    assert!(e.wr.is_some(), "handed back");
    let e = handle.post_recv_owned(Recv::new((w.local_mut(0x1000, 8), w.local_mut(0x2000, 8)))).expect_err("2 > 1");
    assert!(matches!(e.error, Error::TooManySges { .. } | Error::InvalidArgument { .. }), "{:?}", e.error);
    assert!(e.wr.is_some());
    let mixed = (w.local_mut(0x1000, 8), LocalBufMut::from_parts(0x3000, 8, 9, OdpTag::default(), other.id()));
    let e = handle.post_recv_owned(Recv::new(mixed)).expect_err("entries of two PDs");
    assert!(matches!(e.error, Error::InvalidArgument { .. }), "{:?}", e.error);
    assert_eq!(srq_posts(&srq).len(), 0, "the provider saw a refused receive");
    let t = handle.post_recv_owned(Recv::new(w.local_mut(0x1000, 64))).expect("the SRQ's own PD");
    assert_eq!(srq_posts(&srq).len(), 1);
    drop(t);
}

/// A QP that takes its receives from an SRQ refuses receives of its own on every path (scope,
/// owned, receive lane), with `InvalidArgument` of `ibv_post_recv` naming the SRQ and the
/// request handed back; the provider's `post_recv` is never called.
#[test]
fn a_qp_of_an_srq_refuses_receives_of_its_own_on_every_path() {
    let (w, srq) = srq_world(8);
    let (cq, _fake) = w.cq();
    let (mut qp, shared) = ud_qp(w, 0xd08, 8, &cq, Some(Arc::clone(&srq)));
    let e = qp.post_recv_owned(Recv::new(w.local_mut(0x1000, 64))).expect_err("owned");
    invalid(&e.error, "ibv_post_recv", "shared receive queue");
    assert!(e.wr.is_some());
    scope(|s| {
        let e = s.post_recv(&qp, Recv::new(w.local_mut(0x1000, 64))).expect_err("scope");
        invalid(&e.error, "ibv_post_recv", "shared receive queue");
        assert!(e.wr.is_some());
    })
    .expect("nothing posted");
    scope(|s| match s.recv_lane(&mut qp) {
        Err(e) => invalid(&e, "receive lane", "shared receive queue"),
        Ok(_) => panic!("a receive lane on a QP of an SRQ"),
    })
    .expect("nothing posted");
    assert!(recvs(&shared).is_empty(), "the provider saw a receive");
    assert_eq!(srq_posts(&srq).len(), 0);
}

/// An ODP receive on an SRQ needs `IBV_ODP_SUPPORT_SRQ_RECV` verified for every attached QP's
/// transport: a capability for RECV alone is refused (even with no QP attached), one for
/// another transport than the attached QP's is refused, a placement off a page start on a
/// page-start device is refused; each before the provider and handed back.
#[test]
fn odp_srq_receives_are_checked_for_srq_recv_transport_and_placement_before_the_provider() {
    let (w, srq) = srq_world(8);
    let handle = Srq { shared: Arc::clone(&srq) };
    let page = crate::mr::page_size() as u64;
    let recv_only = OdpTag::verified(sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_RECV, false);
    let e = handle.post_recv_owned(Recv::new(odp_sink(w, page, 64, recv_only))).expect_err("RECV, not SRQ_RECV");
    invalid(&e.error, "ibv_post_srq_recv", "IBV_ODP_SUPPORT_SRQ_RECV");
    assert!(e.wr.is_some());
    let misplaced = OdpTag::verified(sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_SRQ_RECV, true);
    let e = handle.post_recv_owned(Recv::new(odp_sink(w, page + 8, 64, misplaced))).expect_err("mid-page");
    invalid(&e.error, "ibv_post_srq_recv", "page boundary");
    assert!(e.wr.is_some());
    // An RC QP attaches (posting_qp counts RC); an ODP receive verified for UD is refused.
    let (cq, _fake) = w.cq();
    let _rc = w.posting_qp(0xd09, 4, &cq, Some(Arc::clone(&srq)));
    let ud = OdpTag::verified(sys::IBV_QPT_UD, sys::IBV_ODP_SUPPORT_SRQ_RECV, false);
    let e = handle.post_recv_owned(Recv::new(odp_sink(w, page, 64, ud))).expect_err("UD-verified, RC attached");
    invalid(&e.error, "ibv_post_srq_recv", "IBV_ODP_SUPPORT_SRQ_RECV");
    assert!(e.wr.is_some());
    // A list mixing an RC- and a UD-verified entry holds for neither.
    let rc = OdpTag::verified(sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_SRQ_RECV, false);
    let e = handle
        .post_recv_owned(Recv::new((odp_sink(w, page, 64, rc), odp_sink(w, 2 * page, 64, ud))))
        .expect_err("mixed transports (or too many entries)");
    assert!(e.wr.is_some());
    assert_eq!(srq_posts(&srq).len(), 0, "the provider saw a refused receive");
    // RC-verified with RC attached: posted; then a UD QP may not attach.
    let t = handle.post_recv_owned(Recv::new(odp_sink(w, page, 64, rc))).expect("RC-verified, RC attached");
    assert_eq!(srq_posts(&srq).len(), 1);
    invalid(&srq.attach_transport(sys::IBV_QPT_UD, "UD").expect_err("UD attach"), "ibv_create_qp", "On-Demand");
    drop(t);
}

/// Threads race ODP receives verified for RC onto an SRQ against attaches of UD QPs: at no
/// point are both an RC-verified receive posted (the provider called) and a UD QP attached.
#[test]
fn odp_srq_receives_racing_attaches_of_another_transport_never_both_succeed() {
    bounded(60, || {
        for round in 0..200 {
            let (w, srq) = srq_world(4);
            let handle = Srq { shared: Arc::clone(&srq) };
            let rc = OdpTag::verified(sys::IBV_QPT_RC, sys::IBV_ODP_SUPPORT_SRQ_RECV, false);
            let poster = std::thread::spawn(move || {
                let r = handle.post_recv_owned(Recv::new(odp_sink(w, 0x10000, 64, rc)));
                r.map(std::mem::forget).is_ok()
            });
            let attached = srq.attach_transport(sys::IBV_QPT_UD, "UD").is_ok();
            let posted = poster.join().unwrap();
            assert!(posted != attached, "round {round}: posted {posted}, attached {attached}");
            assert_eq!(srq_posts(&srq).len(), usize::from(posted));
        }
    });
}

// ---------------------------------------------------------------------------------------------
// On-Demand Paging on UD queue pairs.
// ---------------------------------------------------------------------------------------------

/// ODP memory on a UD QP: a send from memory verified for RC, or for UD without SEND, is
/// refused; a receive into memory verified for UD without RECV is refused; a misplaced entry
/// on a page-start device is refused; a list mixing transports is refused; entries through
/// the implicit lkey above its 128 MiB are refused. Each before the provider, handed back, on
/// the scope, owned and lane paths. The verified ones are posted.
#[test]
fn odp_memory_on_a_ud_qp_is_checked_for_transport_operation_and_placement_before_the_provider() {
    let w = World::new();
    let (cq, _fake) = w.cq();
    let (mut qp, shared) = ud_qp(w, 0xd0a, 8, &cq, None);
    let (ah, _) = watched_ah(&w.pd);
    let page = crate::mr::page_size() as u64;
    let send = sys::IBV_ODP_SUPPORT_SEND;
    let recv = sys::IBV_ODP_SUPPORT_RECV;
    let rc_send = OdpTag::verified(sys::IBV_QPT_RC, send | recv, false);
    let ud_recv = OdpTag::verified(sys::IBV_QPT_UD, recv, false);
    let ud_send = OdpTag::verified(sys::IBV_QPT_UD, send, false);
    let ud_send_ps = OdpTag::verified(sys::IBV_QPT_UD, send | recv, true);
    let implicit = OdpTag::verified(sys::IBV_QPT_UD, send, false).implicit();
    let max = crate::odp::IMPLICIT_MAX_OP as u32;
    let r = scope(|s| {
        for (what, buf) in
            [("RC-verified", odp_buf(w, page, 64, rc_send)), ("UD without SEND", odp_buf(w, page, 64, ud_recv))]
        {
            let e = s.post_send(&qp, WrSend::new(buf).to(&ah, 0x12, 0x1111)).expect_err(what);
            invalid(&e.error, "ibv_post_send", "not verified");
            assert!(e.wr.is_some(), "{what}: handed back");
        }
        let e =
            s.post_send(&qp, WrSend::new(odp_buf(w, page + 8, 64, ud_send_ps)).to(&ah, 1, 1)).expect_err("mid-page");
        invalid(&e.error, "ibv_post_send", "page boundary");
        let mixed = (odp_buf(w, page, 64, ud_send), odp_buf(w, 2 * page, 64, rc_send));
        let e = s.post_send(&qp, WrSend::new(mixed).to(&ah, 1, 1)).expect_err("mixed transports");
        invalid(&e.error, "ibv_post_send", "not verified");
        let e = s
            .post_send(&qp, WrSend::new((odp_buf(w, page, max, implicit), odp_buf(w, page, 1, implicit))).to(&ah, 1, 1))
            .expect_err("implicit above its limit");
        invalid(&e.error, "ibv_post_send", "implicit");
        let e = s.post_recv(&qp, Recv::new(odp_sink(w, page, 64, ud_send))).expect_err("UD without RECV");
        invalid(&e.error, "ibv_post_recv", "not verified");
        assert!(e.wr.is_some());
        let e = s.post_recv(&qp, Recv::new(odp_sink(w, page, 64, rc_send))).expect_err("RC-verified receive");
        invalid(&e.error, "ibv_post_recv", "not verified");
        let e = s.post_recv(&qp, Recv::new(odp_sink(w, page + 8, 64, ud_send_ps))).expect_err("mid-page receive");
        invalid(&e.error, "ibv_post_recv", "page boundary");
    });
    r.expect("nothing posted");
    assert!(sends(&shared).is_empty() && recvs(&shared).is_empty(), "the provider saw a refused request");
    let r = scope(|s| {
        let (sl, rl) = s.lanes(&mut qp).expect("lanes");
        let e = sl.prepare(WrSend::new(odp_buf(w, page, 64, rc_send)).to(&ah, 1, 1)).expect_err("lane send");
        invalid(&e.error, "ibv_post_send", "not verified");
        let e = rl.prepare(Recv::new(odp_sink(w, page, 64, ud_send))).expect_err("lane receive");
        invalid(&e.error, "ibv_post_recv", "not verified");
    });
    r.expect("nothing posted");
    let e = qp.post_send_owned(WrSend::new(odp_buf(w, page, 64, rc_send)).to(&ah, 1, 1)).expect_err("owned send");
    invalid(&e.error, "ibv_post_send", "not verified");
    let e = qp.post_recv_owned(Recv::new(odp_sink(w, page, 64, ud_send))).expect_err("owned receive");
    invalid(&e.error, "ibv_post_recv", "not verified");
    assert!(sends(&shared).is_empty() && recvs(&shared).is_empty(), "the provider saw a refused request");
    // Verified: posted.
    let ts = qp.post_send_owned(WrSend::new(odp_buf(w, page, 64, ud_send)).to(&ah, 1, 1)).expect("verified send");
    let tr = qp.post_recv_owned(Recv::new(odp_sink(w, page, 64, ud_recv))).expect("verified receive");
    assert_eq!((sends(&shared).len(), recvs(&shared).len()), (1, 1));
    drop((ts, tr));
}
