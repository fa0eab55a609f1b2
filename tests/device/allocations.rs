//! No heap allocation per request on the data paths: scope tokens, owned tokens, send lanes,
//! receive lanes, post lists, scope receives, shared-receive-queue receives and awaited owned
//! requests that have to wait, or poll before they sleep. The test
//! binary's global allocator counts, per thread, every allocation; each test warms its path up
//! (the books' storage grows to its working size once), then counts the allocations of many
//! more requests on the same thread and asserts there were none.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use crate::common::*;
use typed_verbs::prelude::*;

/// The test binary's allocator: the system's, counting the allocations of each thread.
pub struct Counting;

thread_local! {
    /// Allocations (and reallocations) made by this thread so far.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down may still allocate; it is not counted then.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are this allocator's; counting touches only a thread-local `Cell`
// (const-initialised: it never allocates, so the allocator does not recurse).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc` is `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: `ptr` was allocated by this allocator, i.e. by `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// The allocations this thread makes while running `f`.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = ALLOCATIONS.with(Cell::get);
    let r = f();
    (ALLOCATIONS.with(Cell::get) - before, r)
}

const WARM_UP: usize = 64;
const COUNTED: usize = 512;
/// Every this many requests one is signaled (the others are unsignaled).
const SIGNAL_EVERY: usize = 8;

fn caps() -> QpCaps {
    QpCaps { max_send_wr: 32, max_recv_wr: 32, ..QpCaps::default() }
}

#[test]
fn the_allocator_counts() {
    // The check itself can fail: a boxed value is one allocation.
    let (n, b) = allocations_in(|| Box::new(7u64));
    assert_eq!((n, *b), (1, 7));
}

#[test]
fn scope_tokens_allocate_nothing_per_request() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), caps());
    let src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let dst = r.pd.alloc_mr(64, access::REMOTE_RW).unwrap();
    let (remote, local) = (dst.remote(..).unwrap(), src.slice(..).unwrap());
    let counted = scope(|s| {
        let mut unsignaled = Vec::with_capacity(SIGNAL_EVERY);
        let mut round = |n: usize| {
            for i in 0..n {
                let wr = wr::Write::new(local, remote);
                if (i + 1) % SIGNAL_EVERY == 0 {
                    let t = s.post_send(&p.a, wr).unwrap();
                    assert_eq!(s.wait(t, WAIT).unwrap().0.status(), WcStatus::Success);
                    for t in unsignaled.drain(..) {
                        assert_eq!(s.wait(t, WAIT).unwrap().0.status(), WcStatus::Success);
                    }
                } else {
                    unsignaled.push(s.post_send(&p.a, wr.unsignaled()).unwrap());
                }
            }
        };
        round(WARM_UP);
        allocations_in(|| round(COUNTED)).0
    })
    .unwrap();
    assert_eq!(counted, 0, "allocations in {COUNTED} scope-token requests");
}

#[test]
fn owned_tokens_allocate_nothing_per_request() {
    let r = rig();
    let p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), caps());
    let mut chunks = r.pd.alloc_mr(SIGNAL_EVERY * 64, access::LOCAL_READ).unwrap().into_chunks(64).unwrap();
    let dst = r.pd.alloc_mr(64, access::REMOTE_RW).unwrap();
    let remote = dst.remote(..).unwrap();
    let mut unsignaled = Vec::with_capacity(SIGNAL_EVERY);
    let mut round = |n: usize| {
        for i in 0..n {
            let wr = wr::Write::new(chunks.pop().expect("a chunk per request in flight"), remote);
            if (i + 1) % SIGNAL_EVERY == 0 {
                let t = p.a.post_send_owned(wr).unwrap();
                let (c, chunk) = t.wait(WAIT).unwrap();
                assert_eq!(c.status(), WcStatus::Success);
                chunks.push(chunk);
                for t in unsignaled.drain(..) {
                    let (c, chunk) = OwnedToken::wait(t, WAIT).unwrap();
                    assert_eq!(c.status(), WcStatus::Success);
                    chunks.push(chunk);
                }
            } else {
                unsignaled.push(p.a.post_send_owned(wr.unsignaled()).unwrap());
            }
        }
    };
    round(WARM_UP);
    let (counted, ()) = allocations_in(|| round(COUNTED));
    assert_eq!(counted, 0, "allocations in {COUNTED} owned-token requests");
}

#[test]
fn send_and_receive_lanes_and_post_lists_allocate_nothing_per_request() {
    let r = rig();
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE.remote_write(), caps());
    let src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let mut dst = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let remote_mr = r.pd.alloc_mr(64, access::REMOTE_RW).unwrap();
    let (remote, local) = (remote_mr.remote(..).unwrap(), src.slice(..).unwrap());
    let counted = scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut recv = s.recv_lane(&mut p.b).unwrap();
        let mut send = lane.prepare(wr::Send::new(local)).unwrap();
        let mut write = lane.prepare(wr::Write::new(local, remote)).unwrap();
        let mut list = lane.prepare_list((0..4).map(|_| wr::Write::new(local, remote)).collect(), 4).unwrap();
        let mut rwr = recv.prepare(wr::Recv::new(dst.slice_mut(..).unwrap())).unwrap();
        let mut round = |n: usize| {
            for i in 0..n {
                // A SEND into a posted receive, a run of unsignaled WRITEs, a post list.
                let rt = recv.post(&mut rwr).unwrap();
                let t = lane.post(&mut send).unwrap();
                assert_eq!(lane.wait(t, WAIT).unwrap().status(), WcStatus::Success);
                assert_eq!(recv.wait(rt, WAIT).unwrap().byte_len(), 64);
                if i % 2 == 0 {
                    for _ in 0..SIGNAL_EVERY - 1 {
                        lane.post_unsignaled(&mut write).unwrap();
                    }
                    let t = lane.post(&mut write).unwrap();
                    assert_eq!(lane.wait_spin(t, WAIT).unwrap().status(), WcStatus::Success);
                } else {
                    let t = lane.post_list(&mut list).unwrap();
                    assert_eq!(lane.wait(t, WAIT).unwrap().status(), WcStatus::Success);
                }
            }
        };
        round(WARM_UP / 4);
        allocations_in(|| round(COUNTED / 4)).0
    })
    .unwrap();
    assert_eq!(counted, 0, "allocations in {} lane requests", COUNTED / 4 * 7);
}

#[test]
fn scope_receives_and_srq_receives_allocate_nothing_per_request() {
    let r = rig();
    let srq = r.pd.create_srq(32).unwrap();
    let config = QpConfig::new(&r.cq).caps(caps());
    let mut p = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, caps());
    let src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let mut dst = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let local = src.slice(..).unwrap();
    // Receives through the scope on b.
    let counted = scope(|s| {
        let mut lane = s.send_lane(&mut p.a).unwrap();
        let mut send = lane.prepare(wr::Send::new(local)).unwrap();
        let mut buf = Some(dst.slice_mut(..).unwrap());
        let mut round = |n: usize| {
            for _ in 0..n {
                let rt = s.post_recv(&p.b, wr::Recv::new(buf.take().expect("the buffer is back"))).unwrap();
                let t = lane.post(&mut send).unwrap();
                assert_eq!(lane.wait(t, WAIT).unwrap().status(), WcStatus::Success);
                let (c, back) = s.wait(rt, WAIT).unwrap();
                assert_eq!(c.byte_len(), 64);
                buf = Some(back);
            }
        };
        round(WARM_UP);
        allocations_in(|| round(COUNTED)).0
    })
    .unwrap();
    assert_eq!(counted, 0, "allocations in {COUNTED} scope receives");
    // Receives of a shared receive queue, owned chunks, on a QP attached to it.
    let sq = r.pd.create_qp::<RC>(&config).unwrap();
    let rq = r.pd.create_qp::<RC>(&QpConfig::new(&r.cq).caps(caps()).srq(&srq)).unwrap();
    let (es, er) = (sq.endpoint(PORT, gid_index(), 0x10).unwrap(), rq.endpoint(PORT, gid_index(), 0x20).unwrap());
    let (sq, _rq) = (connect_rc(sq, Access::NONE, &es, &er), connect_rc(rq, Access::NONE, &er, &es));
    let mut chunk = Some(r.pd.alloc_mr(64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap().remove(0));
    let mut out = Some(r.pd.alloc_mr(64, access::LOCAL_READ).unwrap().into_chunks(64).unwrap().remove(0));
    let mut round = |n: usize| {
        for _ in 0..n {
            let rt = srq.post_recv_owned(wr::Recv::new(chunk.take().expect("the chunk is back"))).unwrap();
            let st = sq.post_send_owned(wr::Send::new(out.take().expect("the chunk is back"))).unwrap();
            // The receive's wait first: it polls the SRQ's CQs (`SrqShared::poll`) until its
            // message lands, routing the send's completion on the way.
            let (c, back) = rt.wait(WAIT).unwrap();
            assert_eq!(c.byte_len(), 64);
            chunk = Some(back);
            let (c, sent) = st.wait(WAIT).unwrap();
            assert_eq!(c.status(), WcStatus::Success);
            out = Some(sent);
        }
    };
    round(WARM_UP);
    let (counted, ()) = allocations_in(|| round(COUNTED));
    assert_eq!(counted, 0, "allocations in {COUNTED} shared receive queue receives");
}

/// Awaited owned requests (`token.await` in a current-thread tokio runtime, the CQs on a
/// completion channel) that have to wait: each round awaits a receive before its message is
/// sent (`join!` polls it first, so it registers its waker and arms the CQ), then the SEND.
/// The test runs on a thread of its own, bounded: a hang fails it.
#[cfg(feature = "tokio")]
#[test]
fn awaited_owned_requests_that_wait_allocate_nothing_per_request() {
    let (counted, waited, rounds, tasks) = awaited_rounds(0);
    assert_eq!(rounds, WARM_UP + COUNTED);
    assert_eq!(waited, rounds, "every receive had to wait at its first poll");
    assert_eq!(tasks, 1, "the channel's driver task: the receives slept until their events");
    assert_eq!(counted, 0, "allocations in {COUNTED} awaited receives and sends");
}

/// The same with polls before sleeping (`Cq::set_await_polls`): each receive misses at its
/// first poll and polls again, waking its own task, until its message lands.
#[cfg(feature = "tokio")]
#[test]
fn awaited_owned_requests_that_poll_before_sleeping_allocate_nothing_per_request() {
    let (counted, waited, rounds, tasks) = awaited_rounds(1_000_000);
    assert_eq!(rounds, WARM_UP + COUNTED);
    assert_eq!(waited, rounds, "every receive missed at its first poll");
    assert_eq!(tasks, 0, "no driver task: every receive was taken by a poll, none slept");
    assert_eq!(counted, 0, "allocations in {COUNTED} awaited receives and sends");
}

/// Runs `WARM_UP`, then `COUNTED` rounds (counted) of an awaited receive and SEND with both
/// CQs' `Cq::set_await_polls(polls)`: (allocations counted, receives that were pending at their
/// first poll, rounds, the runtime's live tasks after them: the channel's driver task, once a
/// future slept).
#[cfg(feature = "tokio")]
fn awaited_rounds(polls: u32) -> (u64, usize, usize, usize) {
    use std::future::Future;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let r = crate::async_owned::async_rig();
        r.cq_a.set_await_polls(polls);
        r.cq_b.set_await_polls(polls);
        let mut recv_buf = Some(crate::async_owned::chunks(&r.pd, 1, 64).remove(0));
        let mut send_buf = Some(crate::async_owned::message(&r.pd, &[7u8; 64]));
        let (mut waited, mut rounds) = (0usize, 0usize);
        let mut round = |n: usize| {
            rt.block_on(async {
                for _ in 0..n {
                    let rt = r.pair.b.post_recv_owned(wr::Recv::new(recv_buf.take().expect("back"))).unwrap();
                    let mut recv = std::future::IntoFuture::into_future(rt);
                    // The receive's first poll, before the SEND exists: it has to wait.
                    let first = std::future::poll_fn(|cx| {
                        std::task::Poll::Ready(std::pin::Pin::new(&mut recv).poll(cx).is_pending())
                    })
                    .await;
                    waited += usize::from(first);
                    let st = r.pair.a.post_send_owned(wr::Send::new(send_buf.take().expect("back"))).unwrap();
                    let (sent, received) = tokio::join!(st, recv);
                    let (c, chunk) = sent.map_err(|e| e.error).unwrap();
                    assert_eq!(c.status(), WcStatus::Success);
                    send_buf = Some(chunk);
                    let (c, chunk) = received.map_err(|e| e.error).unwrap();
                    assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 64));
                    assert_eq!(chunk.as_slice(), &[7u8; 64][..]);
                    recv_buf = Some(chunk);
                    rounds += 1;
                }
            })
        };
        round(WARM_UP);
        let (counted, ()) = allocations_in(|| round(COUNTED));
        let _ = tx.send((counted, waited, rounds, rt.metrics().num_alive_tasks()));
    });
    rx.recv_timeout(WAIT * 4).expect("the awaited rounds finish")
}
