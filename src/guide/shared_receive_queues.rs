//! Shared receive queues: one pool of receive buffers for many QPs.
//!
//! [`Pd::create_srq`](crate::pd::Pd::create_srq) (or
//! [`create_srq_sge`](crate::pd::Pd::create_srq_sge) for receives of several entries) makes an
//! [`Srq`](crate::srq::Srq); QPs created with [`QpConfig::srq`](crate::qp::QpConfig::srq) take
//! their receives from it instead of a receive queue of their own (their `max_recv_wr` and
//! `max_recv_sge` may then be 0). A receive is consumed by whichever QP gets a message first
//! and completes on that QP's receive CQ; the completion's
//! [`qp_num`](crate::wc::Completion::qp_num) says which.
//!
//! SRQ receives are owned only: [`Srq::post_recv_owned`](crate::srq::Srq::post_recv_owned)
//! takes a [`Chunk`](crate::mr::Chunk) (or a list of them) and returns an
//! [`OwnedToken`](crate::owned::OwnedToken). Resetting a QP does not take receives out of an
//! SRQ (only destroying the SRQ does), so a scope could not get borrowed buffers back at its
//! end; owned buffers stay with the SRQ until they complete or it is destroyed. For the same
//! reason a receive lane does not open on a QP with an SRQ.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn shared(ctx: &Context, pd: &Pd) -> typed_verbs::Result<()> {
//!     let srq = pd.create_srq(64)?;
//!     // The SRQ's depth is reserved on each CQ its receives complete on, once.
//!     let cq = ctx.create_cq(64 + 2 * 16)?;
//!     let caps = QpCaps { max_send_wr: 16, max_recv_wr: 0, max_recv_sge: 0, ..QpCaps::default() };
//!     let _a = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps).srq(&srq))?;
//!     let _b = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps).srq(&srq))?;
//!     // ... connect them (`connect`) ...
//!     let mut tokens = Vec::new();
//!     for chunk in pd.alloc_mr(64 * 4096, access::LOCAL_RW)?.into_chunks(4096)? {
//!         tokens.push(srq.post_recv_owned(wr::Recv::new(chunk))?);
//!     }
//!     srq.arm_limit(8)?; // IBV_EVENT_SRQ_LIMIT_REACHED once fewer than 8 are posted
//!     let mut reposted = Vec::new();
//!     for token in tokens {
//!         // SRQ receives complete in any order; each token waits for its own.
//!         let (c, chunk) = token.wait(Duration::from_secs(30))?;
//!         if c.is_success() {
//!             let _from_qp = c.qp_num();
//!             // ... consume, then post the chunk again ...
//!             reposted.push(srq.post_recv_owned(wr::Recv::new(chunk))?);
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! The limit event arrives through [`Context::next_async_event`](crate::device::Context::next_async_event)
//! as [`AsyncEvent::SrqLimitReached`](crate::event::AsyncEvent::SrqLimitReached), naming the
//! SRQ by [`Srq::handle_id`](crate::srq::Srq::handle_id); it is armed again with each
//! [`arm_limit`](crate::srq::Srq::arm_limit). A QP attached to an SRQ must be of its PD.
//! `examples/srq_pingpong.rs` speaks to rdma-core's `ibv_srq_pingpong`.
