//! Teardown: what dropping does, and when to do it by hand.
//!
//! Every object holds a reference to its parents (a QP to its PD and CQs, a region to its PD,
//! a PD or CQ to its context), so objects can be dropped in any order: the C objects are
//! destroyed children first, when the last reference goes. `Drop` never panics and never
//! frees memory the device may still use:
//!
//! | object | dropping it | if the destroy verb fails |
//! |---|---|---|
//! | [`Qp`](crate::qp::Qp) | `ibv_destroy_qp`, once the `Qp` and its owned tokens are gone (and a type 2 window whose dropped bind token it parks is released by a poll of its send CQ: until then the window holds the QP); buffers parked for dropped owned tokens are freed after it | they are leaked |
//! | [`Mr`](crate::mr::Mr) | `ibv_dereg_mr`, then frees the memory it owns (or drops the caller's buffer) | the memory is leaked; over memory the region does not own (`register_borrowed`, `with_registered`, `register_raw`) the process aborts |
//! | [`Srq`](crate::srq::Srq) | `ibv_destroy_srq`, then frees its parked receives | they are leaked |
//! | [`BoundMw`](crate::mw::BoundMw), [`Mw`](crate::mw::Mw) | `ibv_dealloc_mw` (revokes a bound window) | |
//! | [`Connection`](crate::cm::Connection) | destroys the CM identifier (which disconnects), moves the QP to ERR (owned requests still outstanding on it come back flushed) and drops it | a failed move to ERR drops the QP as it is |
//! | an [`OwnedToken`](crate::owned::OwnedToken) | its buffers stay with the queue until the request completes, the QP is reset or destroyed | |
//!
//! The borrow checker orders the rest: a region cannot be dropped while a view of it is
//! posted or a window is bound to it, nor a QP while a scope or lane borrows it.
//!
//! # By hand
//!
//! - [`Mr::deregister`](crate::mr::Mr::deregister) reports a failed `ibv_dereg_mr` instead of
//!   leaking silently and hands the region back;
//!   [`Registered::deregister`](crate::caller::Registered::deregister) and
//!   [`BorrowedMr::deregister`](crate::caller::BorrowedMr::deregister) give the caller's buffer
//!   back.
//! - [`Connection::disconnect`](crate::cm::Connection::disconnect) calls `rdma_disconnect`,
//!   moves the QP to ERR (its outstanding requests complete flushed) and hands it back; the
//!   peer sees it with [`Connection::wait_disconnected`](crate::cm::Connection::wait_disconnected).
//! - A scope ends only when every request it posted completed. Receives that no message will
//!   fill would keep it waiting until its drain timeout and break the QP
//!   ([`Error::QpBroken`](crate::Error::QpBroken)); [`Scope::flush`](crate::scope::Scope::flush)
//!   moves the QP to ERR and collects the flushed receives instead. Reset the QP to use it
//!   again: until then it refuses posts.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn last_message(qp: Qp<RC, RTS>, inbox: &mut Mr<access::LocalRw>) -> typed_verbs::Result<Qp<RC, RESET>> {
//!     let t = Duration::from_secs(5);
//!     let (a, b) = inbox.slice_mut(..)?.split_at(2048)?;
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let first = s.post_recv(&qp, wr::Recv::new(a))?;
//!         let _spare = s.post_recv(&qp, wr::Recv::new(b))?; // may never be filled
//!         s.wait(first, t)?.0.ok()?;
//!         s.flush(&qp, t)?; // ERR: the spare receive completes with WR_FLUSH_ERR
//!         Ok(())
//!     })??;
//!     Ok(qp.reset()?) // from ERR (behind the type's back) to RESET
//! }
//! ```
//!
//! - [`Qp::to_error`](crate::qp::Qp::to_error) flushes a QP outside a scope (owned tokens then
//!   come back with `WR_FLUSH_ERR`), and [`Qp::reset`](crate::qp::Qp::reset) returns it to
//!   RESET from any state, after which the device no longer touches its buffers.
