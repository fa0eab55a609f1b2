//! Owned buffers: work requests that own their memory, for long-lived pipelines.
//!
//! [`Qp::post_send_owned`] and [`Qp::post_recv_owned`] take requests whose memory is owned
//! ([`Chunk`](crate::mr::Chunk)s, inline bytes, `'static` views) and return an
//! [`OwnedToken`], which owns the buffers and a reference to the QP instead of borrowing them.
//! The token hands the buffers back with the completion, on success, on error and on flush
//! alike ([`OwnedToken::wait`]). Because nothing is borrowed, the QP can change state while
//! requests are outstanding: receives can be posted in INIT and collected in RTS, as the C
//! pingpong examples do.
//!
//! Leak safety follows ownership, not borrows (tokio-uring's model):
//! - a forgotten token (`mem::forget`) leaks its buffers; the memory is never freed;
//! - a token dropped while its request is outstanding hands its buffers to the QP, which keeps
//!   them until the request completes (they are released by a later poll) or until the device
//!   is done with the QP (reset or destroy);
//! - the QP itself is destroyed only when the `Qp` and every token are gone. One exception
//!   keeps it longer: a type 2 window whose dropped bind token is parked with the very QP the
//!   binding holds keeps that QP (and its CQs) alive until a poll of its send CQ releases the
//!   window; if nothing polls that CQ again, the QP is leaked rather than destroyed under the
//!   window. Wait for a bind's token (or poll the CQ, e.g. [`Cq::progress`](crate::cq::Cq::progress))
//!   before dropping the QP's last handles.
//!
//! # Awaiting a token
//!
//! An [`OwnedToken`] is also a future ([`IntoFuture`]: `token.await`, or [`completion`]) that
//! resolves to what [`OwnedToken::wait`] returns. The request's CQ must report to a completion
//! channel ([`Context::create_cq_with_channel`](crate::device::Context::create_cq_with_channel));
//! otherwise a future that has to wait resolves at once to [`Error::NoCompletionChannel`] with
//! the token. A future first polls the CQ once: a request already complete resolves without
//! arming anything. A CQ may ask for more polls first ([`Cq::set_await_polls`](crate::cq::Cq::set_await_polls),
//! 0 by default): the future then wakes itself and returns `Pending` that many more times,
//! polling again at each, before it waits; a completion that lands meanwhile is taken without
//! the event's path. A future that has to wait registers its waker with its request, arms the CQ
//! (`ibv_req_notify_cq`) and polls it once more; the completion event is served by
//! [`CompChannel::dispatch`](crate::channel::CompChannel::dispatch), which polls the CQ and
//! wakes exactly the futures whose requests completed. With the `tokio` feature, inside a tokio
//! runtime, a task of the runtime calls it when the channel's descriptor is readable; any other
//! executor registers the descriptor with its reactor and calls it (see `dispatch`).
//!
//! The wakers are called at the end of the poll of the CQ that routed the completion (any
//! poll: `dispatch`, a future's, [`Cq::progress`](crate::cq::Cq::progress)), once it has
//! released that CQ's routing lock: a waker may schedule its task (as tokio's, smol's and
//! async-std's do) or run it inline, even a task that polls other futures waiting on the same
//! CQ. Such an inline task must not block its thread until one of the library's wakes arrives
//! (a nested executor's `block_on` waiting for its futures, for example): the wakes the
//! library makes on a thread that is running a waker are delivered when that waker returns.
//!
//! Dropping the future at any point is sound: what it still holds is the token, whose drop
//! parks the buffers with the queue until the device is done with them (above). Only owned
//! requests can be awaited ([`AsyncCompletion`]): a scope [`Token`](crate::scope::Token)
//! borrows its buffers, and a future can be forgotten.
#![allow(unsafe_code)]

use std::fmt;
use std::future::{Future, IntoFuture};
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use crate::ah::Ah;
use crate::cq::CqShared;
use crate::error::Error;
use crate::qp::{Qp, QueueArc, QueueRef, Refused};
use crate::queue::{DeferWakes, Take};
use crate::scope::{post_raw, Completes, Idle, PostError, Waiting};
use crate::sgl::Scatter;
use crate::transport::{CanPostRecv, CanPostSend, HasRecvQueue, QpState, Transport};
use crate::wc::Completion;
use crate::wr::{AddressedFor, Recv, SendWr};

/// A posted work request that owns its buffers (see the [module documentation](self)).
#[must_use = "the token is how the buffers come back; dropping it parks them until the request completes"]
pub struct OwnedToken<B: Send + 'static> {
    q: QueueArc,
    seq: u64,
    /// The buffers and the address handle; taken exactly once, by `finish` or by `drop`.
    held: ManuallyDrop<(B, Option<Ah>)>,
}

impl<B: Send + 'static> fmt::Debug for OwnedToken<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedToken").field("request", &self.q.as_ref().describe(self.seq)).finish()
    }
}

/// A wait on an [`OwnedToken`] that ran out: the error, and the token to wait on again.
#[derive(Debug)]
pub struct OwnedWaitError<B: Send + 'static> {
    /// The timeout (or poll failure).
    pub error: Error,
    /// The token, still valid.
    pub token: OwnedToken<B>,
}

impl<B: Send + 'static> From<OwnedWaitError<B>> for Error {
    fn from(e: OwnedWaitError<B>) -> Self {
        e.error
    }
}

impl<B: Send + 'static> OwnedToken<B> {
    /// True once the request's completion has been routed to this token (by any poll, e.g.
    /// [`Cq::progress`](crate::cq::Cq::progress) or another token's wait). Does not poll.
    pub fn is_complete(&self) -> bool {
        !self.q.as_ref().tracked().is_pending(self.seq)
    }
}

impl<B: Completes + Send + 'static> OwnedToken<B> {
    /// `ibv_poll_cq` once: the completion and the buffers, if the request has completed.
    ///
    /// # Errors
    /// `Err(self)` while the request is outstanding (or if polling failed).
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    pub fn try_complete(self) -> std::result::Result<(Completion, B::Output), Self> {
        let q = self.q.as_ref();
        if let Take::Done(c) = q.tracked().try_take(self.seq) {
            return Ok(self.finish(c));
        }
        let mut mine = None;
        let _ = q.poll_for(self.seq, &mut mine);
        if let Some(c) = mine {
            return Ok(self.finish(c));
        }
        match q.tracked().try_take(self.seq) {
            Take::Done(c) => Ok(self.finish(c)),
            _ => Err(self),
        }
    }

    /// `ibv_poll_cq`, bounded: waits at most `timeout` for the completion, polling the QP's CQ, and
    /// hands back the completion (whatever its status) with the buffers.
    ///
    /// # Errors
    /// [`OwnedWaitError`] with [`Error::Timeout`] (or a poll failure) and the token.
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    #[inline(always)]
    pub fn wait(self, timeout: Duration) -> std::result::Result<(Completion, B::Output), OwnedWaitError<B>> {
        // A request a later completion covered comes back inline; a completion polled
        // meanwhile and the polling loop are out of line.
        if let Some(c) = self.q.as_ref().tracked().implied(self.seq) {
            return Ok(self.finish(c));
        }
        self.poll_until_done(timeout)
    }

    /// The book first, as in `Scope::wait`: a routed completion is handed over without a poll
    /// (which could run another future's panicking waker and unwind through this wait). After
    /// each poll the book is read again before a failed poll's error is returned.
    #[inline(never)]
    fn poll_until_done(self, timeout: Duration) -> std::result::Result<(Completion, B::Output), OwnedWaitError<B>> {
        if let Take::Done(c) = self.q.as_ref().tracked().try_take_locked(self.seq) {
            return Ok(self.finish(c));
        }
        // The clock is read only once a poll came back empty (`Idle`).
        let mut idle = Idle::new(Waiting::Yield, timeout);
        let mut mine = None;
        loop {
            let q = self.q.as_ref();
            let polled = q.poll_for(self.seq, &mut mine);
            if let Some(c) = mine {
                return Ok(self.finish(c));
            }
            // Before the deadline is looked at, as in `Scope::wait`.
            if let Take::Done(c) = q.tracked().try_take(self.seq) {
                return Ok(self.finish(c));
            }
            match polled {
                Ok(n) if idle.after_poll(n) => {
                    let what = format!("the completion of owned {}", q.describe(self.seq));
                    return Err(OwnedWaitError { error: Error::Timeout { what, after: timeout }, token: self });
                }
                Ok(_) => {}
                Err(error) => return Err(OwnedWaitError { error, token: self }),
            }
        }
    }

    #[inline(always)]
    fn finish(self, c: Completion) -> (Completion, B::Output) {
        // The token's `drop`, which would park the buffers, must not run: it is consumed
        // into a `ManuallyDrop`, and its fields are moved out of it once each.
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `held` is taken only here and in `drop`, which never runs for `this`; `this`
        // is not used again.
        let (buffers, _ah) = unsafe { ManuallyDrop::take(&mut this.held) };
        // SAFETY: `q` is read once and `this` is never dropped, so the queue's `Arc` is
        // released exactly once (by `_q`).
        let _q = unsafe { std::ptr::read(&this.q) };
        (c, buffers.complete(&c, crate::scope::INTERNAL))
    }
}

impl<B: Send + 'static> OwnedToken<B> {
    pub(crate) fn new(q: QueueArc, seq: u64, buffers: B, ah: Option<Ah>) -> Self {
        OwnedToken { q, seq, held: ManuallyDrop::new((buffers, ah)) }
    }
}

impl<B: Send + 'static> Drop for OwnedToken<B> {
    /// Runs only for a token that was not finished (`finish` consumes it into a
    /// `ManuallyDrop`).
    fn drop(&mut self) {
        self.give_up();
    }
}

impl<B: Send + 'static> OwnedToken<B> {
    /// A token dropped before its completion was taken: its buffers go to the queue's release
    /// rule.
    #[cold]
    #[inline(never)]
    fn give_up(&mut self) {
        // SAFETY: called only by `drop`, which runs once and never for a finished token, so
        // `held` was not taken; it is not used again.
        let held = unsafe { ManuallyDrop::take(&mut self.held) };
        let q = self.q.as_ref().tracked();
        // The result first: nobody will collect it (a result kept for the request is dropped,
        // one still to come is not kept), before the release below, which may drop the
        // buffers at once and run a drop of the program's that panics.
        q.abandon(self.seq);
        // The device may still use the buffers: the queue's one release rule keeps them until
        // it is done.
        q.release(self.seq, Box::new(held));
    }
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// `ibv_post_send` of a request that owns its memory (`W::Buffers: 'static`: chunks,
    /// inline bytes, `'static` views). The QP must be in RTS; the opcode must be valid for its
    /// transport (compile-time). The token hands the buffers back with the completion.
    ///
    /// # Errors
    /// Returns the request with a [`PostError`], as
    /// [`Scope::post_send`](crate::scope::Scope::post_send).
    ///
    /// See ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    #[inline(always)]
    pub fn post_send_owned<W>(&self, wr: W) -> std::result::Result<OwnedToken<W::Buffers>, PostError<W>>
    where
        S: CanPostSend,
        W: SendWr<T> + AddressedFor<T>,
        W::Buffers: Send + 'static,
    {
        // SAFETY: the memory the device reads or writes after the call is `W::Buffers`' (the
        // request's scatter/gather entries): owned (`'static` holds no borrow), it moves into
        // the token, which never frees it while the request is outstanding: on drop it hands it
        // to the QP until the request completes or the QP is reset/destroyed; a leaked token
        // leaks it. What else a request may borrow is read during the call only: inline data,
        // and a TSO header ("Pointer address of inline header", ibv_post_send(3)), which the
        // provider copies into the work queue entry; the address handle is cloned into the
        // token.
        let seq = match unsafe { post_raw(self, &wr, 0) } {
            Ok(seq) => seq,
            Err(Refused { error, kept: None }) => return Err(PostError { error, wr: Some(wr) }),
            Err(Refused { error, kept: Some(seq) }) => {
                // Possibly queued: kept with the queue, under the same rule as a dropped token.
                let held = (wr.address_handle().cloned(), wr.into_buffers(crate::scope::INTERNAL));
                // No token will take its completion (given up first: the release may drop the
                // buffers at once, and a drop of the program's may panic).
                self.shared.sq.abandon(seq);
                self.shared.sq.release(seq, Box::new(held));
                return Err(PostError { error, wr: None });
            }
        };
        let keep = wr.address_handle().cloned();
        Ok(OwnedToken::new(
            QueueArc::Send(Arc::clone(&self.shared)),
            seq,
            wr.into_buffers(crate::scope::INTERNAL),
            keep,
        ))
    }

    /// `ibv_post_recv` of a receive into owned memory (a [`Chunk`](crate::mr::Chunk) of a
    /// region with LOCAL_WRITE). The QP must be in INIT, RTR or RTS; the token survives later
    /// state transitions.
    ///
    /// # Errors
    /// Returns the request with a [`PostError`]: [`Error::InvalidArgument`] for a buffer of
    /// another PD or a QP whose receives come from an SRQ; [`Error::TooManySges`];
    /// [`Error::InvalidArgument`] for ODP memory whose capability did not verify receives on
    /// the QP's transport;
    /// [`Error::QueueFull`], [`Error::QpBroken`]; [`Error::Verb`] with `ibv_post_recv`.
    ///
    /// See ibv_post_recv(3).
    #[doc(alias = "ibv_post_recv")]
    #[inline(always)]
    pub fn post_recv_owned<L>(&self, wr: Recv<L>) -> std::result::Result<OwnedToken<L>, PostError<Recv<L>>>
    where
        S: CanPostRecv,
        T: HasRecvQueue,
        L: Scatter + Send + 'static,
    {
        let mut sges = match self.shared.recv_sges::<T, L>(&wr.buf) {
            Ok(sges) => sges,
            Err(error) => return Err(PostError { error, wr: Some(wr) }),
        };
        let mut raw = sges.recv_wr();
        // SAFETY: as in `post_send_owned`: the buffer is owned and moves into the token.
        let seq = match unsafe { self.shared.post_recv(&mut raw, 0) } {
            Ok(seq) => seq,
            Err(Refused { error, kept: None }) => return Err(PostError { error, wr: Some(wr) }),
            Err(Refused { error, kept: Some(seq) }) => {
                // No token will take its completion (given up first: the release may drop the
                // buffers at once, and a drop of the program's may panic).
                self.shared.rq.abandon(seq);
                self.shared.rq.release(seq, Box::new(wr.buf));
                return Err(PostError { error, wr: None });
            }
        };
        Ok(OwnedToken::new(QueueArc::Recv(Arc::clone(&self.shared)), seq, wr.buf, None))
    }
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// Buffers of owned tokens that were dropped while their request was outstanding, kept by
    /// the QP until the device is done with them (a diagnostic).
    pub fn parked_buffers(&self) -> usize {
        self.shared.sq.parked() + self.shared.rq.parked()
    }
}

/// The future of an awaited [`OwnedToken`] (`token.await`, [`completion`]): resolves to the
/// completion and the buffers, as [`OwnedToken::wait`], or to an error with the token (no
/// completion channel on the request's CQ, a failed poll or arming). See the
/// [module documentation](self#awaiting-a-token) for how it is woken.
///
/// Dropping it at any point, polled or not, drops the token: its buffers are parked with the
/// queue until the device is done with them.
#[must_use = "futures do nothing unless awaited; dropping it parks the buffers until the request completes"]
pub struct OwnedCompletion<B: Send + 'static> {
    /// `None` once resolved. Dropped by `Drop::drop` (see there), not by the drop glue.
    token: ManuallyDrop<Option<OwnedToken<B>>>,
    /// The CQs this future counts itself a waiter of. Dropped by `Drop::drop`, as `token`.
    waiting: ManuallyDrop<WaitingOn>,
    /// The request's completion, taken by this future's own poll of the CQ: kept here, not on
    /// the stack, so that a panic out of that poll (another future's waker, run when it ends)
    /// does not lose it (the book counts it taken); the next poll hands it over.
    taken: Option<Completion>,
    /// Polls left before the future arms and sleeps ([`Cq::set_await_polls`], read at its first
    /// miss); [`NOT_READ`] until then.
    ///
    /// [`Cq::set_await_polls`]: crate::cq::Cq::set_await_polls
    polls_left: u32,
}

/// [`OwnedCompletion::polls_left`] before the future first missed its completion.
const NOT_READ: u32 = u32::MAX;

/// The CQs a future counts itself a waiter of: none until it first has to wait; one for a
/// QP's send or receive queue (no allocation); those of the QPs attached to a shared receive
/// queue.
#[derive(Default)]
enum WaitingOn {
    #[default]
    Nothing,
    One(Arc<CqShared>),
    Several(Vec<Arc<CqShared>>),
}

impl WaitingOn {
    fn is_empty(&self) -> bool {
        matches!(self, WaitingOn::Nothing)
    }

    fn as_slice(&self) -> &[Arc<CqShared>] {
        match self {
            WaitingOn::Nothing => &[],
            WaitingOn::One(cq) => std::slice::from_ref(cq),
            WaitingOn::Several(cqs) => cqs,
        }
    }

    fn add(&mut self, cq: Arc<CqShared>) {
        *self = match std::mem::take(self) {
            WaitingOn::Nothing => WaitingOn::One(cq),
            WaitingOn::One(first) => WaitingOn::Several(vec![first, cq]),
            WaitingOn::Several(mut cqs) => {
                cqs.push(cq);
                WaitingOn::Several(cqs)
            }
        };
    }

    /// Each CQ, by value (`self` is left empty).
    fn drain(&mut self, mut f: impl FnMut(Arc<CqShared>)) {
        match std::mem::take(self) {
            WaitingOn::Nothing => {}
            WaitingOn::One(cq) => f(cq),
            WaitingOn::Several(cqs) => cqs.into_iter().for_each(f),
        }
    }
}

// Nothing of it is pinned (the buffers are moved out by value only once it resolves).
impl<B: Send + 'static> Unpin for OwnedCompletion<B> {}

impl<B: Send + 'static> fmt::Debug for OwnedCompletion<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedCompletion")
            .field("token", &*self.token)
            .field("waiting", &!self.waiting.is_empty())
            .finish()
    }
}

impl<B: Completes + Send + 'static> IntoFuture for OwnedToken<B> {
    type Output = std::result::Result<(Completion, B::Output), OwnedWaitError<B>>;
    type IntoFuture = OwnedCompletion<B>;

    /// The token as a future (see [`OwnedCompletion`]).
    fn into_future(self) -> OwnedCompletion<B> {
        OwnedCompletion {
            token: ManuallyDrop::new(Some(self)),
            waiting: ManuallyDrop::new(WaitingOn::Nothing),
            taken: None,
            polls_left: NOT_READ,
        }
    }
}

/// What can be awaited for a completion: an [`OwnedToken`] (its request owns its buffers).
///
/// Sealed. Scope tokens are not: they borrow their buffers for the scope, and a future can be
/// forgotten (`mem::forget`) or dropped at any await point, so nothing could make the borrow
/// outlive the device's use of the memory (DESIGN.md §6, "Async completions").
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be awaited: only a request that owns its buffers can be a future",
    label = "not an owned work request",
    note = "a future can be forgotten or dropped at any await point, so a request whose buffers are borrowed (a scope `Token`, `LocalBuf` views) cannot be awaited: the borrow could end while the device still uses the memory",
    note = "post owned buffers (`Mr::into_chunks` chunks, inline bytes, `'static` views) with `Qp::post_send_owned`, `Qp::post_recv_owned` or `Srq::post_recv_owned`, and await the `OwnedToken`; collect a scope `Token` with `Scope::wait`"
)]
pub trait AsyncCompletion: sealed::Sealed {
    /// The future: [`OwnedCompletion`].
    type Future: Future;
    /// The request's completion as a future.
    fn into_completion(self) -> Self::Future;
}

mod sealed {
    sealed_trait!();
    impl<B: Send + 'static> Sealed for super::OwnedToken<B> {}
}

impl<B: Completes + Send + 'static> AsyncCompletion for OwnedToken<B> {
    type Future = OwnedCompletion<B>;
    fn into_completion(self) -> OwnedCompletion<B> {
        self.into_future()
    }
}

/// The completion of `token` as a future (`token.await` does the same for an
/// [`OwnedToken`]), with a bound that says, at compile time, why a request with borrowed
/// buffers cannot be awaited ([`AsyncCompletion`]).
pub fn completion<T: AsyncCompletion>(token: T) -> T::Future {
    token.into_completion()
}

impl<B: Completes + Send + 'static> Future for OwnedCompletion<B> {
    type Output = std::result::Result<(Completion, B::Output), OwnedWaitError<B>>;

    /// Takes the completion if it was routed (the book says without its lock whether it may be);
    /// otherwise (the first time, and as many more times as its CQ's [`Cq::set_await_polls`]
    /// says, waking its own task in between) polls the CQ and takes it if it was there (or if
    /// the poll routed it); otherwise registers the waker with the request, arms the
    /// request's CQ(s) and polls them (at most 4 batches of 16 completions each: if
    /// more are there, the task is woken again rather than looping).
    ///
    /// [`Cq::set_await_polls`]: crate::cq::Cq::set_await_polls
    ///
    /// # Panics
    /// When polled again after it resolved (as futures may). (Inside a tokio runtime built
    /// without I/O, where the channel's descriptor cannot be registered with a reactor, it
    /// resolves to an error with the token instead.)
    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // The common case, inline: an unsignaled request a later completion covered. Not when
        // this future's own poll took the completion and then unwound: the book counts it
        // taken, so the request looks covered, and only `taken` holds its real status.
        let Some(token) = this.token.as_ref() else {
            return this.poll_slow(cx, None);
        };
        let (q, seq) = (token.q.as_ref(), token.seq);
        if this.taken.is_some() {
            return this.poll_slow(cx, None);
        }
        if let Some(c) = q.tracked().implied(seq) {
            return Poll::Ready(Ok(this.finish(c)));
        }
        // A result another poll routed to the book already is handed over without a poll (a
        // poll may run other futures' wakers, and one that panics would unwind through this
        // future and drop its token): the rest reads the book first. The book says without
        // its lock whether that can be the case (`TrackedQueue::may_hold`).
        if !this.waiting.is_empty() || q.may_hold(seq) {
            return this.poll_slow(cx, None);
        }
        // Before it first waits, inline as well: one poll takes a completion at the head of
        // the CQ (into `taken`, so that a panic out of the poll's wakes does not lose it).
        let polled = q.poll_for(seq, &mut this.taken);
        if let Some(c) = this.taken.take() {
            return Poll::Ready(Ok(this.finish(c)));
        }
        this.poll_slow(cx, Some(polled))
    }
}

impl<B: Completes + Send + 'static> OwnedCompletion<B> {
    /// The rest of [`OwnedCompletion::poll`], out of line; `first`: what the poll of the CQ
    /// that `poll` made before it waits returned, when it made one and found nothing (it made
    /// one only when the book could not hold the result yet). Without it, the book is read
    /// first.
    #[inline(never)]
    fn poll_slow(
        &mut self,
        cx: &mut TaskContext<'_>,
        first: Option<Result<usize, Error>>,
    ) -> Poll<<Self as Future>::Output> {
        let this = self;
        let Some(token) = this.token.as_ref() else {
            panic!("OwnedCompletion polled after it resolved");
        };
        let (q, seq) = (token.q.as_ref(), token.seq);
        if let Some(c) = this.taken.take() {
            return Poll::Ready(Ok(this.finish(c)));
        }
        if first.is_none() {
            if let Take::Done(c) = q.tracked().try_take_locked(seq) {
                return Poll::Ready(Ok(this.finish(c)));
            }
        }
        if this.waiting.is_empty() {
            // Before it first waits: a completion already in the CQ is taken with one poll, as
            // `try_complete` takes it, with no waker, arming or event; one the poll routed to
            // the book (a later one of a send queue, which covers it) is found right after it,
            // before a failed poll's error.
            let polled = match first {
                Some(polled) => polled,
                None => q.poll_for(seq, &mut this.taken),
            };
            if let Some(c) = this.taken.take() {
                return Poll::Ready(Ok(this.finish(c)));
            }
            if let Take::Done(c) = q.tracked().try_take(seq) {
                return Poll::Ready(Ok(this.finish(c)));
            }
            if let Err(error) = polled {
                return Poll::Ready(Err(this.fail(error)));
            }
            // The CQs are looked up at the first miss (a CQ without a channel is an error at
            // once, polls or not) and again when the polls are over.
            if this.polls_left == NOT_READ || this.polls_left == 0 {
                let cqs = match wait_cqs(q, seq) {
                    Ok(cqs) => cqs,
                    Err(error) => return Poll::Ready(Err(this.fail(error))),
                };
                if this.polls_left == NOT_READ {
                    this.polls_left = await_polls(&cqs);
                }
                if this.polls_left == 0 {
                    wait_on(&mut this.waiting, cqs);
                }
            }
            // Polled again later rather than armed (`Cq::set_await_polls`): nothing is
            // registered meanwhile, so this future stays as it was before its first poll.
            if this.waiting.is_empty() {
                this.polls_left -= 1;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        q.tracked().register_waker(seq, cx.waker());
        if let QueueRef::Srq(s) = q {
            // A QP attached to the SRQ after this future started waiting completes receives on
            // its own CQ: waited on too. Read after the registration: an attach that added its
            // CQ before this read is seen here, and one after it wakes the waker registered
            // above (`wake_all` reads the count the registration stored before this read
            // locked the SRQ's list of CQs, which the attach locks too).
            // (No allocation unless there is one.)
            let new = s.cqs_not_in(this.waiting.as_slice());
            if !new.is_empty() {
                if new.iter().any(|cq| cq.channel.is_none()) {
                    let what = q.describe(seq);
                    return Poll::Ready(Err(this.fail(Error::NoCompletionChannel { what })));
                }
                wait_on(&mut this.waiting, WaitingOn::Several(new));
            }
        }
        // The futures the serving completes are woken once the rest of the CQ was handed on
        // (`left_in`): a waker that panics then cannot leave completions in the CQ that no
        // event will announce and no dispatch will take.
        let wakes = DeferWakes::new();
        // `more` whatever the result: a CQ served before another's serving failed may have
        // completions left, which fire no event and which this future, resolving with the
        // error, will not take.
        let mut more = false;
        let served = this.waiting.as_slice().iter().try_for_each(|cq| {
            #[cfg(feature = "tokio")]
            if let Some(ch) = &cq.channel {
                ch.ensure_driver()?;
            }
            more |= cq.serve(crate::channel::SERVE_BATCHES)?.1;
            Ok(())
        });
        if more {
            // Bounded work per poll: the rest of the CQ goes to the channel's next dispatch.
            // This future may not poll again (it resolves now, or is dropped before its next
            // poll), and the rest, landed before the arming took effect, fires no event: it may
            // be another future's, which saw the CQ armed and waits for one.
            for cq in this.waiting.as_slice() {
                if let Some(ch) = &cq.channel {
                    ch.left_in(cq);
                }
            }
        }
        // Before anything is taken for this future's result: a waker's panic leaves it intact.
        drop(wakes);
        // The book before the serving's error: a serving that routed this future's completion
        // and then failed (a later poll, another CQ of an SRQ) hands the completion over.
        if let Take::Done(c) = q.tracked().try_take(seq) {
            return Poll::Ready(Ok(this.finish(c)));
        }
        if let Err(error) = served {
            return Poll::Ready(Err(this.fail(error)));
        }
        if more {
            // And this future's own completion may be in it: polled again at once.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

/// Counts a future a waiter of `cqs` (and of their channels), adding them to its `waiting`.
fn wait_on(waiting: &mut WaitingOn, mut cqs: WaitingOn) {
    cqs.drain(|cq| {
        // SeqCst: see `ChannelShared::event_for`.
        cq.waiters.fetch_add(1, Ordering::SeqCst);
        if let Some(ch) = &cq.channel {
            ch.add_waiter();
        }
        waiting.add(cq);
    });
}

/// The polls a future waiting on `cqs` makes before it sleeps: their largest
/// [`Cq::set_await_polls`] (one CQ's, but for a shared receive queue).
///
/// [`Cq::set_await_polls`]: crate::cq::Cq::set_await_polls
fn await_polls(cqs: &WaitingOn) -> u32 {
    let most = cqs.as_slice().iter().map(|cq| cq.await_polls.load(Ordering::Relaxed)).max().unwrap_or(0);
    // Below `NOT_READ`, which would read the setting again at every poll.
    most.min(NOT_READ - 1)
}

/// The CQs request `seq` of `q` completes on, each reporting to a completion channel.
fn wait_cqs(q: QueueRef<'_>, seq: u64) -> Result<WaitingOn, Error> {
    let cqs = match q {
        QueueRef::Send(s) => WaitingOn::One(Arc::clone(&s.send_cq)),
        QueueRef::Recv(s) => WaitingOn::One(Arc::clone(&s.recv_cq)),
        QueueRef::Srq(s) => WaitingOn::Several(s.cqs()),
    };
    if cqs.as_slice().is_empty() {
        return Err(Error::NoCompletionChannel {
            what: format!("{} (no QP takes receives from the SRQ yet, so it completes on no CQ)", q.describe(seq)),
        });
    }
    if cqs.as_slice().iter().any(|cq| cq.channel.is_none()) {
        return Err(Error::NoCompletionChannel { what: q.describe(seq) });
    }
    Ok(cqs)
}

impl<B: Completes + Send + 'static> OwnedCompletion<B> {
    #[inline(always)]
    fn finish(&mut self, c: Completion) -> (Completion, B::Output) {
        if !self.waiting.is_empty() {
            // The registered waker is dropped there (program code): the completion waits in
            // `taken` meanwhile, so that a panic of that drop does not lose it (the book counts
            // it taken; polled again, the future hands it over).
            self.taken = Some(c);
            self.stop_waiting();
            self.taken = None;
        }
        match self.token.take() {
            Some(token) => token.finish(c),
            None => unreachable!("finish is called with the token present"),
        }
    }
}

impl<B: Send + 'static> OwnedCompletion<B> {
    fn fail(&mut self, error: Error) -> OwnedWaitError<B> {
        self.unregister();
        match self.token.take() {
            Some(token) => OwnedWaitError { error, token },
            None => unreachable!("fail is called with the token present"),
        }
    }

    /// No longer waiting: forgets the waker and the waiter counts (nothing to do for a future
    /// that never waited).
    #[inline(always)]
    fn unregister(&mut self) {
        if !self.waiting.is_empty() {
            self.stop_waiting();
        }
    }

    #[cold]
    #[inline(never)]
    fn stop_waiting(&mut self) {
        Self::stop_waiting_for(self.token.as_ref(), &mut self.waiting);
    }

    /// Forgets the counts of `waiting` (left empty), then `token`'s waker: the waker's drop
    /// comes last, so that a waker whose drop panics leaves no count and no CQ behind.
    fn stop_waiting_for(token: Option<&OwnedToken<B>>, waiting: &mut WaitingOn) {
        waiting.drain(|cq| {
            cq.waiters.fetch_sub(1, Ordering::AcqRel);
            if let Some(ch) = &cq.channel {
                ch.remove_waiter();
            }
        });
        if let Some(token) = token {
            token.q.as_ref().tracked().forget_waker(token.seq);
        }
    }
}

impl<B: Send + 'static> Drop for OwnedCompletion<B> {
    /// Stops waiting and drops the token (if the future had not resolved), whose drop parks the
    /// buffers with the queue until the device is done with them. A future that resolved
    /// without waiting holds nothing to drop: two tests, inline.
    #[inline(always)]
    fn drop(&mut self) {
        if self.token.is_some() || !self.waiting.is_empty() {
            self.drop_slow();
        }
    }
}

impl<B: Send + 'static> OwnedCompletion<B> {
    #[cold]
    #[inline(never)]
    fn drop_slow(&mut self) {
        // Leaves `waiting` empty and `token` `None`: nothing that needs a drop. The token is
        // moved out first, so that it is dropped (its buffers parked) even if forgetting the
        // waker unwinds (a waker whose drop panics).
        let token = self.token.take();
        if !self.waiting.is_empty() {
            Self::stop_waiting_for(token.as_ref(), &mut self.waiting);
        }
        drop(token);
    }
}

static_assertions::assert_impl_all!(OwnedCompletion<crate::mr::Chunk<crate::access::LocalRw>>: Send, Sync, Unpin);
