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
/// it. The second QP must be refused, or the first QP's request stay outstanding.
#[test]
fn a_provider_repeating_a_live_qp_number_does_not_complete_the_other_qps_requests() {
    let w = World::new();
    let (cq, fake) = w.cq();
    let a = w.qp(0x7a0, 4, &cq, None);
    let raw = w.raw_qp(0x7a0);
    let b = match QpShared::try_fake_with_posts(raw, 0x7a0, 4, &cq, Arc::clone(&w.pd), None, fake_send, fake_recv) {
        // Refused: nothing of the first QP can be touched by the second one's completions.
        Err(_) => return,
        Ok(b) => b,
    };
    std::mem::forget(Arc::clone(&b));
    let (sa, ta, a_done, a_early) = watched_send(&a);
    let (sb, tb, b_done, _) = watched_send(&b);
    assert_eq!((sa, sb), (0, 0));
    // The device completes the second QP's request (its QP number, its `wr_id`).
    b_done.store(true, SeqCst);
    fake.complete(send_wc(0x7a0, sb, sys::IBV_WC_SUCCESS));
    let _ = cq.take_all();
    assert!(
        a.sq.is_pending(sa),
        "the completion of the second QP's request completed the first QP's request, whose buffer the device \
         still uses"
    );
    match ta.try_complete() {
        Ok(_) => panic!("the first QP's buffer was handed back while the device uses it"),
        Err(t) => {
            drop(t);
            assert_eq!(a_early.load(SeqCst), 0, "dropped early");
        }
    }
    a_done.store(true, SeqCst);
    drop(tb);
}
