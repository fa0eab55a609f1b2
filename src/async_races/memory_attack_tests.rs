//! Attacks on memory the caller owns (src/caller.rs: a buffer moved into a region with
//! `Pd::register`) and on the owned tokens that carry it (src/owned.rs), over the fake device.
//!
//! The caller's buffer is registered as `Pd::register` registers it (the same boxing and single
//! request for its memory, `Registered::fake`), under a fake registration whose deregistration
//! succeeds (`FAKE_VERBS`) or fails (`FAILING_DEREG`). What each test looks at: the buffer is
//! dropped only after the region's deregistration succeeded and no request of the device can
//! still reach it, whatever the program does with the region, its chunks and their tokens
//! (drops, `mem::forget`, `mem::swap`, panicking drops); it is handed back with the memory it
//! was registered with; and the queue's books are consistent afterwards.

use super::*;
use crate::access::LocalRw;
use crate::caller::{Registered, StableBuffer};
use crate::device::Verbs;
use crate::mr::Mr;
use crate::test_util::Rng;
use crate::Error;

// ---------------------------------------------------------------------------------------------
// Fakes: a caller's buffer that records what happens to it, fake registrations, a context
// whose deregistrations fail.
// ---------------------------------------------------------------------------------------------

/// What happened to a [`Tracked`] buffer.
#[derive(Default)]
struct Record {
    /// `stable_bytes` calls.
    asked: AtomicUsize,
    /// Drops.
    drops: AtomicUsize,
    /// Drops before the test said the device was done with the memory.
    early: AtomicUsize,
    /// The test's word: the device no longer reaches the memory.
    device_done: AtomicBool,
}

impl Record {
    fn asked(&self) -> usize {
        self.asked.load(SeqCst)
    }
    fn drops(&self) -> usize {
        self.drops.load(SeqCst)
    }
    fn early(&self) -> usize {
        self.early.load(SeqCst)
    }
    fn device_done(&self) {
        self.device_done.store(true, SeqCst);
    }
}

/// A caller's buffer (a `Vec<u8>` inside) that records its drops and the requests for its
/// memory; `id` tells two apart; its drop panics after recording if `panics`.
struct Tracked {
    id: u32,
    bytes: Vec<u8>,
    panics: bool,
    record: Arc<Record>,
}

impl Tracked {
    fn new(id: u32, len: usize) -> (Tracked, Arc<Record>) {
        let record = Arc::new(Record::default());
        (Tracked { id, bytes: vec![0; len], panics: false, record: Arc::clone(&record) }, record)
    }
}

impl std::fmt::Debug for Tracked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracked").field("id", &self.id).field("len", &self.bytes.len()).finish()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.record.device_done.load(SeqCst) {
            self.record.early.fetch_add(1, SeqCst);
        }
        self.record.drops.fetch_add(1, SeqCst);
        if self.panics {
            panic!("the caller's buffer panics in its drop");
        }
    }
}

// SAFETY: the memory is the inner `Vec`'s heap allocation: it moves with neither the value nor
// this method (`as_mut_slice`), is initialised, owned by the value alone (never handed out but
// here) and released only by the value's drop.
unsafe impl StableBuffer for Tracked {
    fn stable_bytes(&mut self) -> &mut [u8] {
        self.record.asked.fetch_add(1, SeqCst);
        self.bytes.as_mut_slice()
    }
}

/// `buf` registered in `pd` as `Pd::register` registers it, for local writes.
fn register(w: &'static World, pd: &Arc<PdInner>, buf: Tracked) -> Registered<LocalRw, Tracked> {
    Registered::fake(pd, w.raw_mr(pd), buf).expect("registered")
}

unsafe extern "C" fn busy_dereg_mr(_: *mut sys::ibv_mr) -> std::ffi::c_int {
    libc::EBUSY
}

/// The fake device's verbs, but a region's deregistration fails (a window still bound, say).
static FAILING_DEREG: Verbs = Verbs { dereg_mr: busy_dereg_mr, ..FAKE_VERBS };

/// A PD over `w`'s C objects whose context's deregistrations fail (both leaked).
fn failing_dereg_pd(w: &'static World) -> Arc<PdInner> {
    w.pd_with_verbs("fake-busy-mr", &FAILING_DEREG)
}

/// The `wr_id` of the last receive the provider took from `qp`.
fn last_recv(qp: &QpShared) -> u64 {
    *recvs(qp).last().expect("a receive was taken")
}

// ---------------------------------------------------------------------------------------------
// Registration, hand-back, swaps
// ---------------------------------------------------------------------------------------------

/// The buffer is asked for its memory once, at registration; the region names exactly that
/// memory; `deregister` hands the same value back (same memory, what was written through the
/// region in it) without dropping it.
#[test]
fn a_registered_buffer_is_asked_once_and_comes_back_as_it_was_registered() {
    let w = World::new();
    let (buf, rec) = Tracked::new(7, 4096);
    let at = buf.bytes.as_ptr() as u64;
    let mut reg = register(w, &w.pd, buf);
    assert_eq!((reg.addr(), reg.len()), (at, 4096), "the region is the buffer's memory");
    reg.write_volatile_from(100, b"written through the region").expect("in range");
    let _ = reg.slice(..).expect("a view");
    let _ = reg.slice_mut(4000..).expect("a view");
    assert_eq!(rec.asked(), 1, "asked once, at registration");
    rec.device_done();
    let back = reg.deregister().map_err(|(e, _)| e).expect("deregistered");
    assert_eq!((back.id, back.bytes.as_ptr() as u64, back.bytes.len()), (7, at, 4096));
    assert_eq!(&back.bytes[100..126], b"written through the region");
    assert_eq!((rec.asked(), rec.drops()), (1, 0), "handed back, not dropped");
    drop(back);
    assert_eq!((rec.drops(), rec.early()), (1, 0));
}

/// An empty buffer is refused and dropped; nothing is registered.
#[test]
fn an_empty_registered_buffer_is_refused_and_dropped() {
    let w = World::new();
    let (buf, rec) = Tracked::new(1, 0);
    rec.device_done();
    match Registered::<LocalRw, Tracked>::fake(&w.pd, w.raw_mr(&w.pd), buf) {
        Err(e) => invalid(&e, "ibv_reg_mr", "at least one byte"),
        Ok(_) => panic!("an empty buffer was registered"),
    }
    assert_eq!((rec.asked(), rec.drops()), (1, 1));
}

/// Two regions of one buffer type swapped through `DerefMut`: each hands back the buffer its
/// `Mr` carries (the other's), with that buffer's memory. One swapped with a region of the
/// library's memory refuses to deregister (the buffer stays, registered, in the other value)
/// and the buffer is dropped once, by the region that carries it, after its deregistration.
#[test]
fn swapped_registered_regions_hand_back_the_buffer_their_region_carries() {
    let w = World::new();
    let (a, ra) = Tracked::new(1, 256);
    let (b, rb) = Tracked::new(2, 512);
    let (at_a, at_b) = (a.bytes.as_ptr() as u64, b.bytes.as_ptr() as u64);
    let mut reg_a = register(w, &w.pd, a);
    let mut reg_b = register(w, &w.pd, b);
    std::mem::swap(&mut *reg_a, &mut *reg_b);
    assert_eq!((reg_a.addr(), reg_a.len(), reg_b.addr(), reg_b.len()), (at_b, 512, at_a, 256));
    ra.device_done();
    rb.device_done();
    let from_a = reg_a.deregister().map_err(|(e, _)| e).expect("deregistered");
    assert_eq!((from_a.id, from_a.bytes.as_ptr() as u64), (2, at_b), "the buffer travels with its Mr");
    let from_b = reg_b.deregister().map_err(|(e, _)| e).expect("deregistered");
    assert_eq!((from_b.id, from_b.bytes.as_ptr() as u64), (1, at_a));
    drop((from_a, from_b));
    assert_eq!((ra.drops(), rb.drops(), ra.early(), rb.early()), (1, 1, 0, 0));

    let (c, rc) = Tracked::new(3, 128);
    let mut reg_c = register(w, &w.pd, c);
    let mut heap: Mr<LocalRw> = Mr::fake(&w.pd, w.raw_mr(&w.pd), 64);
    std::mem::swap(&mut *reg_c, &mut heap);
    let (e, reg_c) = reg_c.deregister().expect_err("it holds no Tracked now");
    invalid(&e, "ibv_dereg_mr", "no longer owns");
    assert_eq!(reg_c.len(), 64, "handed back intact, still registered");
    drop(reg_c);
    assert_eq!(rc.drops(), 0, "the buffer is in the other region");
    rc.device_done();
    drop(heap);
    assert_eq!((rc.asked(), rc.drops(), rc.early()), (1, 1, 0));
}

/// A region whose deregistration fails (a window bound, say) comes back from `deregister` with
/// its buffer, and on drop leaks it rather than dropping it under the device: through
/// `Registered`, through `into_mr`, and through the last chunk of `into_chunks`.
#[test]
fn a_registered_buffer_is_never_dropped_when_its_deregistration_fails() {
    let w = World::new();
    let pd = failing_dereg_pd(w);
    let (buf, rec) = Tracked::new(1, 4096);
    let reg = register(w, &pd, buf);
    let (e, reg) = reg.deregister().expect_err("the device refuses");
    assert!(matches!(e, Error::Verb { .. }), "{e:?}");
    assert_eq!(reg.len(), 4096, "handed back intact");
    drop(reg);
    let (buf, rec2) = Tracked::new(2, 4096);
    let (e, mr) = register(w, &pd, buf).into_mr().deregister().expect_err("refused");
    assert!(matches!(e, Error::Verb { .. }), "{e:?}");
    drop(mr);
    let (buf, rec3) = Tracked::new(3, 4096);
    let chunks = register(w, &pd, buf).into_mr().into_chunks(1000).expect("chunks");
    assert_eq!(chunks.len(), 5);
    drop(chunks);
    assert_eq!((rec.drops(), rec2.drops(), rec3.drops()), (0, 0, 0), "leaked, never dropped");
}

// ---------------------------------------------------------------------------------------------
// Owned tokens over a caller's buffer
// ---------------------------------------------------------------------------------------------

/// The region of a caller's buffer cut into chunks, one posted as an owned receive whose token
/// is dropped, the other chunks dropped: the buffer (the region's, deregistered with its last
/// chunk) is kept with the queue until the receive's completion is polled, then dropped once.
#[test]
fn a_dropped_owned_receive_keeps_the_callers_buffer_until_its_completion() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xc01, 8, &cq);
        let (buf, rec) = Tracked::new(1, 4096);
        let mut chunks = register(w, &w.pd, buf).into_mr().into_chunks(1024).expect("chunks");
        let first = chunks.remove(0);
        let token = qp.post_recv_owned(Recv::new(first)).expect("posted");
        drop(chunks);
        drop(token);
        assert_eq!((shared.rq.outstanding(), shared.rq.parked()), (1, 1));
        cq.take_all().expect("poll");
        assert_eq!(rec.drops(), 0, "the receive may still write the buffer");
        rec.device_done();
        fake.complete(wc_of(0xc01, last_recv(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        cq.take_all().expect("poll");
        assert_eq!((shared.rq.outstanding(), shared.rq.parked()), (0, 0));
        assert_eq!((rec.drops(), rec.early(), rec.asked()), (1, 0, 1));
    });
}

/// An owned receive's token forgotten (`mem::forget`): its chunk, and with it the caller's
/// buffer, is leaked, whatever completes or resets afterwards.
#[test]
fn a_forgotten_owned_receive_leaks_the_callers_buffer() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xc02, 8, &cq);
        let (buf, rec) = Tracked::new(1, 4096);
        let mut chunks = register(w, &w.pd, buf).into_mr().into_chunks(2048).expect("chunks");
        let token = qp.post_recv_owned(Recv::new(chunks.remove(0))).expect("posted");
        std::mem::forget(token);
        drop(chunks);
        fake.complete(wc_of(0xc02, last_recv(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        cq.take_all().expect("poll");
        assert!(qp.reset().is_ok(), "the fake device resets");
        assert_eq!(rec.drops(), 0, "leaked with the token");
    });
}

/// The QP's last handle dropped while an owned receive into a caller's buffer is outstanding:
/// the token keeps the QP (it is not destroyed) until the completion hands the chunk back; the
/// buffer goes with the chunk, after.
#[test]
fn an_owned_receive_keeps_its_qp_and_hands_the_callers_buffer_back_with_its_completion() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let shared = w.posting_qp(0xc03, 8, &cq, None);
        let alive = Arc::downgrade(&shared);
        let qp: Qp<RC, RTS> = Qp::from_fake(shared);
        let (buf, rec) = Tracked::new(1, 4096);
        let mut chunks = register(w, &w.pd, buf).into_mr().into_chunks(4096).expect("one chunk");
        let token = qp.post_recv_owned(Recv::new(chunks.remove(0))).expect("posted");
        let wr_id = last_recv(&alive.upgrade().unwrap());
        drop(qp);
        assert!(alive.upgrade().is_some(), "the token keeps the QP");
        fake.complete(wc_of(0xc03, wr_id, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        let (c, chunk) = token.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("completed");
        assert!(c.is_success());
        assert!(alive.upgrade().is_none(), "the QP went with the token's completion");
        assert_eq!(rec.drops(), 0, "the chunk is the program's again");
        rec.device_done();
        drop(chunk);
        assert_eq!((rec.drops(), rec.early()), (1, 0));
    });
}

/// A caller's buffer whose drop panics, released by the poll that completes the receive of its
/// last chunk's dropped token: the panic comes out of the poll, the buffer was dropped once
/// (after the completion), the books hold nothing, and the QP takes and completes receives
/// again.
#[test]
fn a_callers_buffer_whose_drop_panics_in_a_poll_leaves_the_queue_consistent() {
    bounded(20, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xc04, 8, &cq);
        let (mut buf, rec) = Tracked::new(1, 4096);
        buf.panics = true;
        let mut chunks = register(w, &w.pd, buf).into_mr().into_chunks(4096).expect("one chunk");
        drop(qp.post_recv_owned(Recv::new(chunks.remove(0))).expect("posted"));
        assert_eq!(shared.rq.parked(), 1);
        rec.device_done();
        fake.complete(wc_of(0xc04, last_recv(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        let polled = quiet(|| cq.take_all());
        assert!(polled.is_err(), "the buffer's panic comes out of the poll");
        assert_eq!((rec.drops(), rec.early()), (1, 0));
        assert_eq!((shared.rq.outstanding(), shared.rq.parked(), fake.left()), (0, 0, 0));
        let (again, rec2) = Tracked::new(2, 64);
        let mut chunks = register(w, &w.pd, again).into_mr().into_chunks(64).expect("one chunk");
        let token = qp.post_recv_owned(Recv::new(chunks.remove(0))).expect("posted again");
        fake.complete(wc_of(0xc04, last_recv(&shared), sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
        let (c, chunk) = token.wait(Duration::from_secs(5)).map_err(|e| e.error).expect("completed");
        assert!(c.is_success());
        rec2.device_done();
        drop(chunk);
        assert_eq!(rec2.drops(), 1);
    });
}

// ---------------------------------------------------------------------------------------------
// A random model: chunks of callers' buffers posted, refused, dropped, forgotten and collected
// ---------------------------------------------------------------------------------------------

/// An owned request over a chunk whose token the program still holds.
type Held = OwnedToken<crate::mr::Chunk<LocalRw>>;

/// Rounds of: a caller's buffer registered and cut into chunks; each chunk posted as an owned
/// send (signaled or not) or receive, some refused (named: handed back; unnamed: kept with the
/// queue), their tokens dropped, forgotten or kept; the device executing the queues in order
/// (a completion for each receive and each signaled send) between polls and collections; the
/// QP reset at the end of the round. The buffer is never dropped before the device executed
/// every request naming it (or the QP was reset), and it is dropped exactly once by the end of
/// the round unless a token holding one of its chunks was forgotten.
#[test]
fn callers_buffers_behind_owned_requests_are_dropped_only_once_the_device_is_done() {
    bounded(60, || {
        let w = World::new();
        let (cq, fake) = w.cq();
        let (qp, shared) = w.rc_qp(0xc10, 16, &cq);
        let mut qp = Some(qp);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..200u32 {
            let live = qp.take().expect("the round's QP");
            let (buf, rec) = Tracked::new(round, 8 * 64);
            let chunks = register(w, &w.pd, buf).into_mr().into_chunks(64).expect("8 chunks");
            let (sent_before, recv_before) = (sends(&shared).len(), recvs(&shared).len());
            let mut held: Vec<Held> = Vec::new();
            let mut forgotten = false;
            for chunk in chunks {
                let refusal = match rng.below(6) {
                    0 => Some(Answer::RefuseAt(0)),
                    1 => Some(Answer::RefuseNull),
                    _ => None,
                };
                if let Some(a) = refusal {
                    answer_next(&shared, a);
                }
                let posted = match rng.below(3) {
                    0 => live.post_recv_owned(Recv::new(chunk)).map_err(|e| e.wr.is_some()),
                    1 => live.post_send_owned(crate::wr::Send::new(chunk)).map_err(|e| e.wr.is_some()),
                    _ => live.post_send_owned(crate::wr::Send::new(chunk).unsignaled()).map_err(|e| e.wr.is_some()),
                };
                match (posted, refusal) {
                    (Ok(token), None) => match rng.below(4) {
                        0 => drop(token),
                        1 => {
                            forgotten = true;
                            std::mem::forget(token);
                        }
                        _ => held.push(token),
                    },
                    (Err(handed_back), Some(a)) => {
                        assert_eq!(handed_back, a == Answer::RefuseAt(0), "named: handed back; unnamed: kept")
                    }
                    (got, a) => panic!("{:?} for {a:?}", got.map(|_| ())),
                }
            }
            // The device's side: what the provider took this round, executed in queue order.
            let mut to_send: VecDeque<(u64, bool)> = sends(&shared)[sent_before..].iter().copied().collect();
            let mut to_recv: VecDeque<u64> = recvs(&shared)[recv_before..].iter().copied().collect();
            while !to_send.is_empty() || !to_recv.is_empty() {
                let send_side = to_recv.is_empty() || (!to_send.is_empty() && rng.below(2) == 0);
                if send_side {
                    let (wr_id, signaled) = to_send.pop_front().unwrap();
                    if signaled {
                        fake.complete(wc_of(0xc10, wr_id, sys::IBV_WC_SUCCESS, sys::IBV_WC_SEND));
                    }
                } else {
                    let wr_id = to_recv.pop_front().unwrap();
                    fake.complete(wc_of(0xc10, wr_id, sys::IBV_WC_SUCCESS, sys::IBV_WC_RECV));
                }
                if to_send.is_empty() && to_recv.is_empty() {
                    rec.device_done();
                }
                match rng.below(4) {
                    0 => cq.take_all().expect("poll"),
                    1 if !held.is_empty() => {
                        let i = rng.below(held.len() as u64) as usize;
                        match held.swap_remove(i).try_complete() {
                            Ok((_, chunk)) => drop(chunk),
                            Err(token) => held.push(token),
                        }
                    }
                    2 if !held.is_empty() => drop(held.swap_remove(0)),
                    _ => {}
                }
                assert_eq!(rec.early(), 0, "round {round}: the buffer was dropped under the device");
            }
            rec.device_done();
            let reset = live.reset().map_err(|e| e.error).expect("the fake device resets");
            drop(reset);
            for token in held.drain(..) {
                let (_, chunk) = token.wait(Duration::from_secs(1)).map_err(|e| e.error).expect("flushed by the reset");
                drop(chunk);
            }
            assert_eq!((shared.sq.outstanding(), shared.rq.outstanding()), (0, 0), "round {round}");
            assert_eq!((shared.sq.parked(), shared.rq.parked()), (0, 0), "round {round}");
            let want = usize::from(!forgotten);
            assert_eq!((rec.drops(), rec.early(), rec.asked()), (want, 0, 1), "round {round}");
            qp = Some(Qp::from_fake(Arc::clone(&shared)));
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Windows: a type 2 window whose bind failed after it may have run
// ---------------------------------------------------------------------------------------------

/// A type 2 bind that completed with a flush error may have run (rxe executes local operations
/// such as BIND_MW without waiting for the requests ahead of them, and its flush then reports
/// them failed): the window may still be bound on the device, and is never bound again (IBTA
/// o10-37.2.30: a bound type 2 window is invalidated before it is bound again). It is
/// deallocated by the bind's result and a new window handed back
/// (`own_change_attack_tests::a_type2_window_whose_bind_was_flushed_is_deallocated_and_replaced`);
/// a window marked as maybe bound (kept when no new window could be allocated) is refused
/// before the provider, and handed back. A bind the device refused (`IBV_WC_MW_BIND_ERR`)
/// bound nothing: its window is bound again.
#[test]
fn a_type2_window_whose_bind_was_flushed_is_not_bound_again() {
    use super::mw_attack_tests::{bind, pd, qp, region};
    use crate::access::window;
    use crate::mw::Type2;
    use crate::wr::BindMw;
    let w = World::new();
    let (cq, fake) = w.cq();
    let (qp, shared) = qp(w, 0x9c01, &cq);
    let mr = region(w, 4096);
    let flushed = pd(w).alloc_mw::<Type2>().expect("type 2");
    let old = flushed.as_ptr();
    let refused = pd(w).alloc_mw::<Type2>().expect("type 2");
    let r = scope(|s| {
        let mut mw = bind(s, &qp, &shared, fake, flushed, &mr, sys::IBV_WC_WR_FLUSH_ERR).expect_err("failed");
        assert_ne!(mw.as_ptr(), old, "not the window that may be bound");
        mw.mark_maybe_bound_for_test();
        let taken = sends(&shared).len();
        let e = s.post_send(&qp, BindMw::new(mw, &mr, 0, 64, window::WRITE)).map(drop).expect_err("may be bound");
        invalid(&e.error, "ibv_post_send (BIND_MW)", "o10-37.2.30");
        assert_eq!(sends(&shared).len(), taken, "the provider never saw it");
        drop(e.wr.expect("handed back").into_window());
        let mw = bind(s, &qp, &shared, fake, refused, &mr, sys::IBV_WC_MW_BIND_ERR).expect_err("refused");
        bind(s, &qp, &shared, fake, mw, &mr, sys::IBV_WC_SUCCESS).expect("bound again")
    });
    drop(r.expect("scope"));
}
