//! Attacks on the library's soundness, written as a hostile user would, in safe code only.
//! Each names the hole it checks for, and fails on a library without the check that closes
//! it.
//!
//! - Objects of another device context or protection domain meet a QP: refused before the
//!   provider sees them (two contexts of one device number their CQs, SRQs and keys alike, and
//!   the kernel resolves them in the caller's context).
//! - A scope token that owns its buffer (a `Chunk`) is dropped while its request is in flight:
//!   the buffer (and with the last chunk, the region) must outlive the request.
//! - A QP is destroyed while its completions are still in the CQ: they must never be taken
//!   for a later QP's.

use std::time::Duration;

use typed_verbs::prelude::*;

use crate::common::*;

const WAIT: Duration = Duration::from_secs(20);

/// Two contexts of one device, with the same objects created in the same order in both, so
/// that their handle numbers coincide.
struct TwoContexts {
    a: Rig,
    b: Rig,
}

fn two_contexts() -> TwoContexts {
    TwoContexts { a: rig(), b: rig() }
}

#[test]
fn a_cq_of_another_context_is_refused_at_qp_creation() {
    let TwoContexts { a, b } = two_contexts();
    let e = a.pd.create_qp::<RC>(&QpConfig::new(&b.cq)).expect_err("a CQ of another context");
    assert_invalid(&e, "ibv_create_qp", "send_cq belongs to another device context than the protection domain");
    // Send and receive CQ separately, too.
    let mut config = QpConfig::new(&a.cq);
    config.recv_cq = &b.cq;
    let e = a.pd.create_qp::<RC>(&config).expect_err("a receive CQ of another context");
    assert_invalid(&e, "ibv_create_qp", "recv_cq belongs to another device context than the protection domain");
    // The same CQ of the right context is accepted.
    a.pd.create_qp::<RC>(&QpConfig::new(&a.cq)).expect("a CQ of the PD's context");
}

#[test]
fn an_srq_of_another_context_or_pd_is_refused_at_qp_creation() {
    let TwoContexts { a, b } = two_contexts();
    let srq_a = a.pd.create_srq(16).unwrap();
    let srq_b = b.pd.create_srq(16).unwrap();
    let caps = QpCaps { max_recv_wr: 0, max_recv_sge: 0, ..QpCaps::default() };
    let e = a.pd.create_qp::<RC>(&QpConfig::new(&a.cq).caps(caps).srq(&srq_b)).expect_err("an SRQ of context b");
    assert_invalid(&e, "ibv_create_qp", "the shared receive queue belongs to another protection domain");
    let other_pd = a._ctx.alloc_pd().unwrap();
    let e = other_pd.create_qp::<RC>(&QpConfig::new(&a.cq).caps(caps).srq(&srq_a)).expect_err("an SRQ of another PD");
    assert_invalid(&e, "ibv_create_qp", "the shared receive queue belongs to another protection domain");
    a.pd.create_qp::<RC>(&QpConfig::new(&a.cq).caps(caps).srq(&srq_a)).expect("the PD's own SRQ");
}

#[test]
fn memory_of_another_context_or_pd_is_refused_before_the_provider() {
    let TwoContexts { a, b } = two_contexts();
    let pair = rc_pair(&a.pd, &a.cq, &a.cq, Access::NONE.remote_write(), QpCaps::default());
    let other_pd = a._ctx.alloc_pd().unwrap();
    let mut src_ctx = b.pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let mut src_pd = other_pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    let mut dst_ctx = b.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mut dst_pd = other_pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mut own = a.pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mut own_src = a.pd.alloc_mr(8, access::LOCAL_READ).unwrap();
    own_src.as_mut_slice().fill(7);
    for mr in [&mut dst_ctx, &mut dst_pd, &mut own] {
        mr.as_mut_slice().fill(0x5a);
    }
    src_ctx.as_mut_slice().fill(1);
    src_pd.as_mut_slice().fill(1);
    scope(|s| {
        for (what, src, dst) in [("context", &src_ctx, &mut dst_ctx), ("PD", &src_pd, &mut dst_pd)] {
            // A send source, a receive buffer: refused, and handed back (nothing was posted).
            let e = s.post_send(&pair.a, wr::Send::new(src.slice(..8).unwrap())).expect_err(what);
            assert_invalid(
                &e.error,
                "ibv_post_send",
                "the request's memory (or window) belongs to another protection domain",
            );
            assert!(e.wr.is_some(), "{what}: the request comes back");
            let e = s.post_recv(&pair.b, wr::Recv::new(dst.slice_mut(..8).unwrap())).expect_err(what);
            assert_invalid(&e.error, "ibv_post_recv", "the receive buffer belongs to another protection domain");
            assert!(e.wr.is_some(), "{what}: the request comes back");
        }
        // Nothing reached the device.
        assert_eq!(pair.a.outstanding(), (0, 0));
        assert_eq!(pair.b.outstanding(), (0, 0));
        // The region of the QP's own PD is accepted, and is the first receive b holds: a
        // message lands in it (a refused receive queued after all would have taken it).
        let t = s.post_recv(&pair.b, wr::Recv::new(own.slice_mut(..).unwrap())).unwrap();
        let sent = s.post_send(&pair.a, wr::Send::new(own_src.slice(..).unwrap())).unwrap();
        assert!(s.wait(sent, WAIT).unwrap().0.is_success());
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.byte_len()), (WcStatus::Success, 8), "{c:?}");
    })
    .unwrap();
    assert_eq!(own.as_slice()[..8], [7; 8], "the message landed in the own PD's receive");
    assert!(own.as_slice()[8..].iter().all(|&b| b == 0x5a));
    // The sentinel bytes of the refused receive buffers never changed.
    assert!(dst_ctx.as_slice().iter().all(|&b| b == 0x5a));
    assert!(dst_pd.as_slice().iter().all(|&b| b == 0x5a));
}

/// A connected RC pair, a send source, and a receive buffer that is the only chunk of its
/// region: dropping the chunk would deregister and free the region under a posted receive.
struct ChunkRig {
    r: Rig,
    pair: RcPair,
    src: Mr<access::LocalRead>,
    chunk: Chunk<access::LocalRw>,
}

fn chunk_rig() -> ChunkRig {
    let r = rig();
    let pair = rc_pair(&r.pd, &r.cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(256, access::LOCAL_READ).unwrap();
    src.as_mut_slice().fill(0xab);
    let chunk = r.pd.alloc_mr(256, access::LOCAL_RW).unwrap().into_chunks(256).unwrap().remove(0);
    ChunkRig { r, pair, src, chunk }
}

#[test]
fn an_owned_chunk_survives_its_dropped_scope_token() {
    let ChunkRig { r, pair, src, chunk } = chunk_rig();
    scope(|s| {
        let t = s.post_recv(&pair.b, wr::Recv::new(chunk)).unwrap();
        drop(t);
        assert_eq!(pair.b.parked_buffers(), 1, "the dropped token's chunk is kept with the queue");
        // Only now does a message arrive for the receive.
        let sent = s.post_send(&pair.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        let (c, _) = s.wait(sent, WAIT).unwrap();
        assert!(c.is_success(), "the receive buffer was still registered: {c:?}");
    })
    .unwrap();
    // The receive completed, so a poll released the chunk (the scope's drain polled it).
    let _ = r.cq.progress();
    assert_eq!(pair.b.parked_buffers(), 0);
}

#[test]
fn an_owned_chunk_survives_a_timed_out_wait_dropped_by_question_mark() {
    let ChunkRig { r: _r, pair, src, chunk } = chunk_rig();
    let outcome = scope(|s| -> typed_verbs::Result<()> {
        let inner = || -> typed_verbs::Result<()> {
            let t = s.post_recv(&pair.b, wr::Recv::new(chunk)).unwrap();
            // Nothing was sent yet: the wait runs out, and `?` drops the error and its token.
            s.wait(t, Duration::from_millis(1))?;
            Ok(())
        };
        let e = inner().expect_err("no message was sent");
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
        let sent = s.post_send(&pair.a, wr::Send::new(src.slice(..).unwrap())).unwrap();
        let (c, _) = s.wait(sent, WAIT).unwrap();
        assert!(c.is_success(), "the receive buffer was still registered: {c:?}");
        Ok(())
    });
    outcome.expect("scope").expect("closure");
}

#[test]
fn a_new_qp_never_inherits_a_destroyed_qps_completions() {
    // QP numbers are reused (cyclically on rxe) and a destroyed QP's completions stay in its
    // CQ. Registering a new QP on the CQ takes them off first, so none can be routed to a QP
    // that reuses the number.
    let r = rig();
    let ch = r._ctx.create_comp_channel().unwrap();
    let stale_cq = r._ctx.create_cq_with_channel(256, &ch).unwrap();
    let pair = rc_pair(&r.pd, &stale_cq, &r.cq, Access::NONE, QpCaps::default());
    let mut src = r.pd.alloc_mr(64, access::LOCAL_READ).unwrap().into_chunks(64).unwrap().remove(0);
    src.as_mut_slice().fill(1);
    let dst = r.pd.alloc_mr(64, access::LOCAL_RW).unwrap().into_chunks(64).unwrap().remove(0);
    let recv = pair.b.post_recv_owned(wr::Recv::new(dst)).unwrap();
    stale_cq.req_notify(false).unwrap();
    let sent = pair.a.post_send_owned(wr::Send::new(src)).unwrap();
    // The send's completion is in `stale_cq` (the channel says so without taking it off).
    let ev = ch.wait(WAIT).expect("the send's completion event");
    assert!(ev.is_for(&stale_cq));
    let (c, _) = recv.wait(WAIT).unwrap();
    assert!(c.is_success(), "{c:?}");
    drop(sent); // its buffer is parked with the QP until the QP is destroyed
    let RcPair { a, b } = pair;
    drop(a); // destroyed with its completion still in `stale_cq`
             // A new QP on that CQ: its registration takes the stale completion off.
    let fresh = r.pd.create_qp::<RC>(&QpConfig::new(&stale_cq)).unwrap();
    assert_eq!(stale_cq.progress().unwrap(), 0, "a destroyed QP's completion was left in the CQ");
    drop((fresh, b));
}
