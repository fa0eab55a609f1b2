//! Completions, errors, recovery and events.
//!
//! # Completions
//!
//! A wait hands back the request's [`Completion`](crate::wc::Completion) (the `struct ibv_wc`,
//! decoded by its accessors) whatever its status: a failed request's buffers come back too.
//! [`Completion::ok`](crate::wc::Completion::ok) turns an error status into
//! [`Error::Completion`](crate::Error::Completion) for `?`;
//! [`status`](crate::wc::Completion::status) is a [`WcStatus`](crate::wc::WcStatus) to match
//! on. [`Completion::source`](crate::wc::Completion::source) says where it came from: the
//! request's own completion, implied by a later signaled one (an unsignaled request), or a
//! reset the library forced ([`CompletionSource`](crate::wc::CompletionSource)).
//!
//! Every completion polled from a CQ, by any wait or by
//! [`Cq::progress`](crate::cq::Cq::progress), is routed by QP number and `wr_id` to its own
//! request's book-keeping, so a token always gets its own request's completion, whichever
//! thread or token polled it. An event loop that wants to see completions as they come uses
//! [`Cq::poll_into`](crate::cq::Cq::poll_into): it copies them out and still routes each to
//! its token.
//!
//! # Errors
//!
//! One error type, [`Error`](crate::Error). A failed verb is
//! [`Error::Verb`](crate::Error::Verb), naming the C function and carrying its errno with
//! context (device, QP number, transition); the library's own checks have their own variants
//! (`InvalidArgument`, `Unsupported`, `InlineTooLarge`, `TooManySges`, `QueueFull`, `Timeout`,
//! `QpBroken`, and the connection manager's `Cm` and `Rejected`). Operations that consume
//! something hand it back with the error:
//!
//! | failure | type | what comes back |
//! |---|---|---|
//! | a post | [`PostError<W>`](crate::scope::PostError) | `wr`: the request with its buffers, when it was certainly not queued |
//! | a post list | [`PostListError`](crate::scope::PostListError) | tokens of the posted prefix, the rest of the requests |
//! | a wait that timed out | [`WaitError`](crate::scope::WaitError), [`OwnedWaitError`](crate::owned::OwnedWaitError), [`LaneWaitError`](crate::lane::LaneWaitError), [`RecvWaitError`](crate::lane::RecvWaitError) | the token, to wait on again |
//! | a transition | [`TransitionError`](crate::qp::TransitionError) | the QP, in its old state |
//!
//! Each converts into [`Error`](crate::Error) with `?` (dropping what it carried: a dropped
//! token or request is handled as in [`posting`](super::posting)).
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::scope::WaitError;
//! use typed_verbs::wr;
//!
//! fn patient(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>) -> typed_verbs::Result<()> {
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let mut token = s.post_send(qp, wr::Send::new(src.slice(..64)?))?;
//!         let (c, _src) = loop {
//!             match s.wait(token, Duration::from_millis(100)) {
//!                 Ok(done) => break done,
//!                 Err(WaitError { error: Error::Timeout { .. }, token: again }) => token = again, // do other work, then wait again
//!                 Err(e) => return Err(e.into()),
//!             }
//!         };
//!         if c.status() == WcStatus::RnrRetryExcErr {
//!             // The peer had no receive posted for longer than `rnr_retry` allowed.
//!         }
//!         c.ok()?; // Error::Completion for any status but success
//!         Ok(())
//!     })?
//! }
//! ```
//!
//! # Recovering a QP
//!
//! An RC error completion (retries exceeded, a remote access error, ...) moves the QP to ERR,
//! and its other outstanding requests complete with `WR_FLUSH_ERR`; their buffers come back
//! as usual. The QP's type still says RTS: [`Qp::query_state`](crate::qp::Qp::query_state)
//! shows the real state. [`Qp::reset`](crate::qp::Qp::reset) (from any state) returns it to
//! RESET, where the device no longer touches any of its buffers, to connect it again:
//!
//! ```no_run
//! use typed_verbs::prelude::*;
//! use typed_verbs::qp::ObservedState;
//!
//! fn recover(qp: Qp<RC, RTS>, link: Link, peer: &Endpoint) -> typed_verbs::Result<Qp<RC, RTS>> {
//!     if qp.query_state()? != ObservedState::Err {
//!         return Ok(qp);
//!     }
//!     let qp = qp.reset()?;
//!     let me = qp.local_endpoint(link)?; // a new PSN: the peer needs it, and resets its QP too
//!     qp.connect(link, Access::NONE.remote_write(), &me, peer)
//! }
//! ```
//!
//! [`Error::QpBroken`](crate::Error::QpBroken) is the library's own break: a scope whose
//! requests did not complete within its drain timeout (a dead peer with unlimited retries, an
//! unsignaled request that nothing completes) moved the QP to ERR, then RESET if the flushes
//! did not come, so that returning frees nothing the device still uses. The QP then refuses
//! posts until [`Qp::reset`](crate::qp::Qp::reset).
//!
//! # Events
//!
//! Instead of polling: a [`CompChannel`](crate::channel::CompChannel)
//! ([`Context::create_comp_channel`](crate::device::Context::create_comp_channel)), CQs created
//! on it ([`Context::create_cq_with_channel`](crate::device::Context::create_cq_with_channel)),
//! armed with [`Cq::req_notify`](crate::cq::Cq::req_notify);
//! [`CompChannel::wait`](crate::channel::CompChannel::wait) (or `wait_async` with the `tokio`
//! feature) returns which CQ fired and acknowledges the event. The event is a hint: re-arm,
//! then collect the completions by waiting on the tokens or with
//! [`Cq::progress`](crate::cq::Cq::progress).
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//!
//! fn sleep_until_work(ctx: &Context) -> typed_verbs::Result<()> {
//!     let channel = ctx.create_comp_channel()?;
//!     let cq = ctx.create_cq_with_channel(256, &channel)?;
//!     // ... create QPs on `cq`, post ...
//!     cq.req_notify(false)?;
//!     let event = channel.wait(Duration::from_secs(10))?;
//!     assert!(event.is_for(&cq));
//!     cq.req_notify(false)?; // re-arm before polling, so nothing is missed
//!     cq.progress()?;
//!     Ok(())
//! }
//! ```
//!
//! Asynchronous events of the device (port up and down, a QP's fatal error, an SRQ's limit)
//! come from [`Context::next_async_event`](crate::device::Context::next_async_event), typed as
//! [`AsyncEvent`](crate::event::AsyncEvent) and acknowledged at once. Soft-RoCE (as observed
//! on Linux 6.12) reports no async event for remote access errors, short receive buffers or a
//! dead peer: those arrive as completions.
