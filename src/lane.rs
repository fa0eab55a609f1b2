//! Send lanes: the lock-free data path, close to the cost of hand-written C.
//!
//! A [`SendLane`] is the exclusive poster of one queue pair's send queue for the rest of a
//! [`scope`](crate::scope::scope) (it holds `&mut` of the [`Qp`], so nothing else can post
//! there meanwhile). A [`Prepared`] request is built and checked once, then posted as often as
//! needed: each post only sets the `wr_id` and the signaled flag and calls the provider, like a
//! C loop re-posting one `struct ibv_send_wr`. Unsignaled posts return nothing; a signaled
//! post returns a [`LaneToken`], and its completion also completes every earlier request of the
//! lane (send queue completions are ordered, ibv_post_send(3)). A [`PreparedList`] chains
//! prepared requests into one list that [`SendLane::post_list`] posts with one call into the
//! provider, signaled every CQ-moderation-th request and at its end (perftest's post list).
//!
//! Why this is as sound as [`Scope::post_send`]: the memory a prepared request names is
//! borrowed for the whole scope (`W: 'scope`) and is never owned by the request (only borrowed
//! views or inline payloads: [`Reusable`]), so dropping a prepared request, a token or the lane
//! frees nothing. The scope does not return before the device is done with every request of
//! the lane (or the QP was reset), exactly as for scope tokens. Book-keeping is two counters
//! (`queue::LaneBook`): posting takes no lock and allocates nothing; a wait polls the CQ under
//! its routing lock (as every poll does), and only completions with an error status are stored
//! (under a lock of their own).
//!
//! A [`RecvLane`] does the same for a receive queue ([`Scope::recv_lane`], or
//! [`Scope::lanes`] for both queues of one QP): a [`PreparedRecv`] is re-posted as often as
//! needed, each receive returns a [`RecvToken`], and the lane's wait polls one completion
//! at a time: it hands back the awaited one and keeps an earlier one of the lane, unlocked,
//! for the wait that asks for it. The received bytes are read through the prepared receive, only
//! once its last post has completed ([`PreparedRecv::received`]). [`RecvLane::ordered`] makes
//! it an [`OrderedRecvLane`], which posts without tokens and hands the completions out in
//! posting order ([`OrderedRecvLane::wait_next`]), as a C loop polls its receive CQ.
//!
//! Receives on the QP of a send lane opened alone go through the scope: [`Scope::post_recv_lane`].
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::time::Duration;

use typed_verbs_sys as sys;

use crate::cq::LANE_POLLED_AWAITED;
use crate::error::{Error, Result};
use crate::mr::{LocalBuf, LocalBufMut};
use crate::qp::{PostRecvFn, PostSendFn, Qp, QpShared, QueueRef};
use crate::queue::{Kept, LaneResult, RECV_BIT};
use crate::scope::{Idle, PostError, Scope, Waiting};
use crate::sgl::{Scatter, SgeStore};
use crate::transport::{CanPostRecv, CanPostSend, HasRecvQueue, Transport};
use crate::wc::{Completion, CompletionSource};
use crate::wr::{AddressedFor, RawSendWr, Recv, SendWr};

/// The exclusive poster of a QP's send queue within a scope. See the [module
/// documentation](self).
pub struct SendLane<'scope, T: Transport, S: CanPostSend> {
    qp: &'scope QpShared,
    /// `qp`'s `struct ibv_qp` and its provider's `post_send`, looked up once.
    raw_qp: NonNull<sys::ibv_qp>,
    post_fn: PostSendFn,
    /// The posts of numbers from here on take the slow path: the send queue may be full, or
    /// the request must be signaled.
    checkpoint: u64,
    /// Requests numbered below this fit in the send queue without looking at completions.
    limit: u64,
    depth: u64,
    /// The longest run of unsignaled requests.
    max_run: u64,
    _qp: PhantomData<fn() -> (T, S)>,
    /// Invariant in 'scope, like [`Scope`]: the lane (and what it prepares) cannot be taken for
    /// a shorter-lived one, so `W: 'scope` really means "borrowed until the scope ends".
    _scope: PhantomData<&'scope mut &'scope ()>,
}

// SAFETY: the raw pointers name the QP that `qp` borrows, which may be used from any thread
// (libibverbs is thread-safe); the lane itself is only used through `&mut self`.
unsafe impl<T: Transport, S: CanPostSend> Send for SendLane<'_, T, S> {}
// SAFETY: no method takes `&self` to post; the `&self` methods only read atomics.
unsafe impl<T: Transport, S: CanPostSend> Sync for SendLane<'_, T, S> {}

/// A work request built and checked once by [`SendLane::prepare`], to be posted any number of
/// times on that lane. Holds the request (and with it the borrow of its memory).
pub struct Prepared<'scope, W> {
    raw: Box<LaneWr>,
    /// The queue pair it was checked for.
    qp: &'scope QpShared,
    /// `send_flags` for a signaled and for an unsignaled post.
    flags_signaled: u32,
    flags_unsignaled: u32,
    /// What the work completion reports for this request on success.
    report: Report,
    wr: W,
    /// Invariant in 'scope (see [`SendLane`]).
    _scope: PhantomData<&'scope mut &'scope ()>,
}

// SAFETY: the raw request points into its own box and at memory `wr` borrows; sending or
// sharing it is sending or sharing `W`.
unsafe impl<W: Send> Send for Prepared<'_, W> {}
// SAFETY: as above; `&Prepared` gives no access to the raw request.
unsafe impl<W: Sync> Sync for Prepared<'_, W> {}

/// Requests built and checked once by [`SendLane::prepare_list`] and chained into one list,
/// to be posted with one `ibv_post_send` (perftest's post list, `-l`) any number of times on
/// that lane with [`SendLane::post_list`]. Holds the requests (and with them the borrows of
/// their memory).
pub struct PreparedList<'scope, W> {
    /// Each request's `next` names the following one's `struct ibv_send_wr` (they are boxed:
    /// the chain survives moves of the vector); the last one's is null.
    items: Vec<Prepared<'scope, W>>,
    /// Request j of the list (from 0) is signaled when (j + 1) is a multiple of this; the
    /// last one always is.
    signal_every: usize,
}

/// A signaled request of a [`SendLane`] whose completion has not been collected. Plain data:
/// dropping or forgetting it only means nobody looks at that completion.
#[must_use = "a token is how the completion is collected"]
pub struct LaneToken<'scope> {
    qp: &'scope QpShared,
    seq: u64,
    report: Report,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// A send-lane wait that ran out (or whose completion was dropped): the error, and the token
/// to wait on again.
#[derive(Debug)]
pub struct LaneWaitError<'scope> {
    /// The timeout, poll failure, foreign token, or the reason the completion is gone.
    pub error: Error,
    /// The token, still valid.
    pub token: LaneToken<'scope>,
}

impl From<LaneWaitError<'_>> for Error {
    fn from(e: LaneWaitError<'_>) -> Self {
        e.error
    }
}

/// The exclusive poster of a QP's receive queue within a scope. See the [module
/// documentation](self).
pub struct RecvLane<'scope, T: Transport> {
    qp: &'scope QpShared,
    /// `qp`'s `struct ibv_qp` and its provider's `post_recv`, looked up once.
    raw_qp: NonNull<sys::ibv_qp>,
    post_fn: PostRecvFn,
    /// Requests numbered below this fit in the receive queue without looking at completions.
    limit: u64,
    depth: u64,
    /// Completions of this lane's receives that its polls took for other receives than the
    /// awaited one (oldest first, at most `depth`): only this lane's waits can collect them.
    ready: std::collections::VecDeque<(u64, Completion)>,
    _qp: PhantomData<fn() -> T>,
    /// Invariant in 'scope (see [`SendLane`]).
    _scope: PhantomData<&'scope mut &'scope ()>,
}

impl<T: Transport> Drop for RecvLane<'_, T> {
    fn drop(&mut self) {
        // Scope and owned receives may be posted again, beside what the lane left outstanding.
        self.qp.rq.lane.set_open(false);
    }
}

// SAFETY: as for `SendLane`: the raw pointer names the QP that `qp` borrows, usable from any
// thread; the lane itself posts only through `&mut self`.
unsafe impl<T: Transport> Send for RecvLane<'_, T> {}
// SAFETY: no method takes `&self` to post; the `&self` methods only read atomics.
unsafe impl<T: Transport> Sync for RecvLane<'_, T> {}

/// A [`RecvLane`] that hands completions out in posting order, with no token per receive
/// ([`RecvLane::ordered`]): [`OrderedRecvLane::wait_next`] waits for the oldest receive it
/// has not handed out yet, as a C loop polls its receive CQ once per receive it posted. A
/// receive queue completes in posting order (ibv_post_recv(3)), so that receive is also the
/// next to complete.
pub struct OrderedRecvLane<'scope, T: Transport> {
    lane: RecvLane<'scope, T>,
    /// The oldest receive whose completion this lane has not handed out.
    next_out: u64,
}

/// The `struct ibv_send_wr` of a prepared request and its scatter/gather entries, boxed so that
/// `next` (in a list) stays valid when the [`Prepared`] moves; the entries are on the heap, so
/// `sg_list` stays valid too. Never touched again but through `wr`. (`repr(C)`: `wr` first, so
/// that the box's address is the request's.)
#[repr(C)]
struct LaneWr {
    wr: sys::ibv_send_wr,
    _sges: Vec<sys::ibv_sge>,
}

impl LaneWr {
    /// The request `raw` with its entries moved to the heap, `sg_list` pointing at them.
    fn new<S: SgeStore>(raw: &RawSendWr<S>) -> Box<Self> {
        let mut sges = raw.used_sges().to_vec();
        let mut wr = raw.wr;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = raw.num_sge;
        Box::new(LaneWr { wr, _sges: sges })
    }
}

/// The `struct ibv_recv_wr` of a prepared receive and its scatter/gather entries, as
/// [`LaneWr`].
#[repr(C)]
struct RawRecvWr {
    wr: sys::ibv_recv_wr,
    _sges: Vec<sys::ibv_sge>,
}

/// A receive built and checked once by [`RecvLane::prepare`], to be posted any number of times
/// on that lane. Holds the buffer (and with it the borrow of its memory).
pub struct PreparedRecv<'scope, L> {
    raw: Box<RawRecvWr>,
    /// The queue pair it was checked for.
    qp: &'scope QpShared,
    /// The number of its last post, if any.
    last: Option<u64>,
    buf: L,
    /// Invariant in 'scope (see [`SendLane`]).
    _scope: PhantomData<&'scope mut &'scope ()>,
}

// SAFETY: the raw request points into its own box and at the memory `buf` borrows; sending or
// sharing it is sending or sharing `L`.
unsafe impl<L: Send> Send for PreparedRecv<'_, L> {}
// SAFETY: as above; `&PreparedRecv` gives no access to the raw request.
unsafe impl<L: Sync> Sync for PreparedRecv<'_, L> {}

/// A receive of a [`RecvLane`] whose completion has not been collected. Plain data: dropping
/// or forgetting it only means nobody looks at that completion.
#[must_use = "a token is how the completion is collected"]
pub struct RecvToken<'scope> {
    qp: &'scope QpShared,
    seq: u64,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// A receive-lane wait that ran out (or whose completion was dropped): the error, and the
/// token.
#[derive(Debug)]
pub struct RecvWaitError<'scope> {
    /// The timeout, poll failure, or the reason the completion is gone.
    pub error: Error,
    /// The token, still valid.
    pub token: RecvToken<'scope>,
}

impl From<RecvWaitError<'_>> for Error {
    fn from(e: RecvWaitError<'_>) -> Self {
        e.error
    }
}

/// Memory that a prepared request may name: borrowed views and inline payloads, whose drop
/// frees nothing (an owned [`Chunk`](crate::mr::Chunk) would be freed while the device may
/// still use it). Sealed.
#[diagnostic::on_unimplemented(
    message = "a prepared request cannot hold `{Self}`: it is re-posted, so its memory must stay valid until the scope ends",
    label = "owned memory cannot be prepared",
    note = "prepare requests over borrowed views (`LocalBuf`, `LocalBufMut`) or inline payloads; post owned `Chunk`s with `post_send_owned` or `post_recv_owned`"
)]
pub trait Reusable: sealed::Sealed {}

mod sealed {
    sealed_trait!();
}

impl sealed::Sealed for LocalBuf<'_> {}
impl Reusable for LocalBuf<'_> {}
impl sealed::Sealed for LocalBufMut<'_> {}
impl Reusable for LocalBufMut<'_> {}
impl sealed::Sealed for () {}
impl Reusable for () {}
impl sealed::Sealed for crate::dmabuf::DeviceBuf<'_> {}
impl Reusable for crate::dmabuf::DeviceBuf<'_> {}
impl sealed::Sealed for crate::dmabuf::DeviceBufMut<'_> {}
impl Reusable for crate::dmabuf::DeviceBufMut<'_> {}
impl<L: Reusable, const N: usize> sealed::Sealed for [L; N] {}
/// A list of borrowed views.
impl<L: Reusable, const N: usize> Reusable for [L; N] {}
macro_rules! reusable_tuple {
    ($($t:ident),*) => {
        impl<$($t: Reusable),*> sealed::Sealed for ($($t,)*) {}
        /// A list of borrowed views.
        impl<$($t: Reusable),*> Reusable for ($($t,)*) {}
    };
}
reusable_tuple!(A, B);
reusable_tuple!(A, B, C);
reusable_tuple!(A, B, C, D);

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Opens a [`SendLane`] on `qp`'s send queue, exclusive for the rest of the scope. The scope
    /// waits at its end for every request of the lane, as for its own tokens.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] if the send queue still has outstanding requests posted
    ///   otherwise (owned tokens): collect them first;
    /// - [`Error::QpBroken`] if the QP refuses posts (forced to RESET by a drain, moved to ERR by
    ///   `Scope::flush`, or its CQ reported an error) and was not reset since. Only the
    ///   opening looks: a CQ error reported while the lane is open does not stop its posts (the
    ///   fast path reads no flag); they go to the provider as a C program's would.
    pub fn send_lane<T: Transport, S: CanPostSend>(
        &'scope self,
        qp: &'scope mut Qp<T, S>,
    ) -> Result<SendLane<'scope, T, S>> {
        self.open_send_lane(&qp.shared)
    }

    /// Opens a [`RecvLane`] on `qp`'s receive queue, exclusive for the rest of the scope. The
    /// scope waits at its end for every receive of the lane, as for its own tokens: receives
    /// that no message will complete make it flush the QP and return
    /// [`Error::QpBroken`] (consume them, or post no more than will be used).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] if the QP takes its receives from a shared receive queue, or
    ///   its receive queue still has outstanding requests posted otherwise (collect them first);
    /// - [`Error::QpBroken`] if the QP refuses posts (forced to RESET by a drain, moved to ERR by
    ///   `Scope::flush`, or its CQ reported an error) and was not reset since. Only the
    ///   opening looks: a CQ error reported while the lane is open does not stop its posts (the
    ///   fast path reads no flag); they go to the provider as a C program's would.
    pub fn recv_lane<T: HasRecvQueue, S: CanPostRecv>(
        &'scope self,
        qp: &'scope mut Qp<T, S>,
    ) -> Result<RecvLane<'scope, T>> {
        self.open_recv_lane(&qp.shared)
    }

    /// Opens both lanes of `qp`: a [`SendLane`] on its send queue and a [`RecvLane`] on its
    /// receive queue, each exclusive for the rest of the scope (a ping-pong posts both).
    ///
    /// # Errors
    /// As for [`Scope::send_lane`] and [`Scope::recv_lane`].
    pub fn lanes<T: HasRecvQueue, S: CanPostSend>(
        &'scope self,
        qp: &'scope mut Qp<T, S>,
    ) -> Result<(SendLane<'scope, T, S>, RecvLane<'scope, T>)> {
        let shared: &'scope QpShared = &qp.shared;
        // The receive lane first: it has the more checks, and a send lane once open cannot be
        // given back.
        let recv = self.open_recv_lane(shared)?;
        Ok((self.open_send_lane(shared)?, recv))
    }

    /// Opens the lane book of queue `q` of `shared` (a usable QP) for the lane `what`: nothing
    /// else may be outstanding on that queue. Registers the queue for the scope's drain.
    /// Returns the lane's first request number and the raw QP.
    fn open_book(
        &'scope self,
        shared: &'scope QpShared,
        q: QueueRef<'scope>,
        what: &'static str,
    ) -> Result<(u64, NonNull<sys::ibv_qp>)> {
        shared.check_usable()?;
        let tracked = q.tracked();
        let busy = tracked.outstanding();
        // The lane's book is opened (and cleared) only for a queue with nothing outstanding.
        let next = match (busy == 0).then(|| tracked.lane.open()).flatten() {
            Some(next) => next,
            None => {
                let queue = if matches!(q, QueueRef::Send(_)) { "send" } else { "receive" };
                return Err(Error::invalid(
                    what,
                    format!(
                        "the {queue} queue of QP {:#x} has {busy} outstanding requests; collect them before opening a lane",
                        shared.qp_num()
                    ),
                ));
            }
        };
        self.touch(q);
        let raw_qp = NonNull::new(shared.as_ptr()).ok_or_else(|| Error::invalid(what, "no QP"))?;
        Ok((next, raw_qp))
    }

    fn open_recv_lane<T: HasRecvQueue>(&'scope self, shared: &'scope QpShared) -> Result<RecvLane<'scope, T>> {
        if shared.srq.is_some() {
            shared.check_usable()?;
            return Err(Error::invalid(
                "receive lane",
                format!("QP {:#x} takes its receives from a shared receive queue", shared.qp_num()),
            ));
        }
        let (next, raw_qp) = self.open_book(shared, QueueRef::Recv(shared), "receive lane")?;
        // The depth the library counts (the CQ's room is reserved for it), not what the provider
        // may have granted on top.
        let depth = u64::from(shared.rq.depth().max(1));
        shared.rq.lane.set_open(true);
        let post_fn = shared.post_recv_fn;
        let ready = std::collections::VecDeque::new();
        Ok(RecvLane {
            qp: shared,
            raw_qp,
            post_fn,
            limit: next + depth,
            depth,
            ready,
            _qp: PhantomData,
            _scope: PhantomData,
        })
    }

    fn open_send_lane<T: Transport, S: CanPostSend>(
        &'scope self,
        shared: &'scope QpShared,
    ) -> Result<SendLane<'scope, T, S>> {
        let (next, raw_qp) = self.open_book(shared, QueueRef::Send(shared), "send lane")?;
        // The depth the library counts (the CQ's room is reserved for it).
        let depth = u64::from(shared.sq.depth().max(1));
        // A run of unsignaled requests and the signaled one after it fit in the queue: none
        // on a queue one request deep, where every request is signaled.
        let max_run = depth / 2;
        let post_fn = shared.post_send_fn;
        Ok(SendLane {
            qp: shared,
            raw_qp,
            post_fn,
            checkpoint: next + max_run.min(depth),
            limit: next + depth,
            depth,
            max_run,
            _qp: PhantomData,
            _scope: PhantomData,
        })
    }
}

/// The refusal of a prepared SEND_WITH_INV of `rkey` to a peer on the sender's own device.
#[cold]
fn reposted_invalidation(rkey: u32) -> Error {
    Error::invalid(
        "ibv_post_send (SEND_WITH_INV)",
        format!(
            "a SEND_WITH_INV of rkey {rkey:#x} to a peer on the sender's own device is not prepared: it may only \
             name a live binding of this process's windows, a prepared request is posted again, and a second \
             invalidation of a window crashes rxe's kernel (post it with Scope::post_send)"
        ),
    )
}

impl<'scope, T: Transport, S: CanPostSend> SendLane<'scope, T, S> {
    /// Builds `wr` for this lane's QP with every check of [`Scope::post_send`] (opcode and
    /// flags at compile time; lengths, alignment, inline size and ODP at run time), once.
    ///
    /// # Errors
    /// Returns the request with a [`PostError`] if a check fails.
    pub fn prepare<W>(&self, wr: W) -> std::result::Result<Prepared<'scope, W>, PostError<W>>
    where
        W: SendWr<T> + AddressedFor<T> + 'scope,
        W::Buffers: Reusable,
    {
        // A prepared request is posted again and again: a SEND_WITH_INV to a peer on the QP's
        // own device may only name a live binding of the process's windows, which it would
        // invalidate again at its second post (`mw::claim_remote_invalidation`). Checked
        // before the build, which would claim it.
        if W::SEND_INV && self.qp.peer_on_device() {
            return Err(PostError { error: reposted_invalidation(wr.invalidated_rkey()), wr: Some(wr) });
        }
        let built = match crate::scope::build_checked::<T, W>(self.qp, &wr) {
            Ok(raw) => raw,
            Err(error) => return Err(PostError { error, wr: Some(wr) }),
        };
        let report = success_report(&built);
        let mut raw = LaneWr::new(&built);
        raw.wr.next = std::ptr::null_mut();
        let flags_signaled = raw.wr.send_flags | sys::IBV_SEND_SIGNALED;
        let flags_unsignaled = raw.wr.send_flags & !sys::IBV_SEND_SIGNALED;
        // Between posts the request holds the unsignaled flags: an unsignaled post sets nothing.
        raw.wr.send_flags = flags_unsignaled;
        Ok(Prepared { raw, qp: self.qp, flags_signaled, flags_unsignaled, report, wr, _scope: PhantomData })
    }

    /// `ibv_post_send` of `wr`, signaled: the returned token collects its completion, which
    /// also completes every earlier request of the lane.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] if `wr` was prepared for another QP;
    /// - [`Error::QueueFull`] when the send queue is full of outstanding requests;
    /// - [`Error::Verb`] with `ibv_post_send` and its errno. The request counts as posted with
    ///   no completion promised (rxe queues a request before its doorbell fails): unless a
    ///   later signaled request covers it, the scope's drain flushes and resets the QP.
    ///
    /// See ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    #[inline(always)]
    pub fn post<W>(&mut self, wr: &mut Prepared<'scope, W>) -> Result<LaneToken<'scope>> {
        let mut seq = self.qp.sq.lane.next();
        if seq >= self.limit {
            seq = self.check(wr.qp)?;
        }
        if !std::ptr::eq(wr.qp, self.qp) {
            return Err(foreign("send lane", self.qp));
        }
        // Between posts the request holds its unsignaled flags (`prepare`): one bit set for
        // this post, and cleared after it (one instruction each, on the request in memory).
        wr.raw.wr.send_flags |= sys::IBV_SEND_SIGNALED;
        let posted = self.post_now(&mut wr.raw, seq);
        wr.raw.wr.send_flags &= !sys::IBV_SEND_SIGNALED;
        posted?;
        Ok(self.signaled_posted(seq, wr))
    }

    /// The provider accepted signaled request `seq`, built as `wr`: it covers the lane's
    /// requests before it, a new run of unsignaled requests starts after it, and its token.
    /// The checkpoint stays where it is: the next forced signal only moved later, so it is
    /// still below it (and below the limit, which did not move), and the wait for the token
    /// moves it on (`freed_upto`); an unsignaled post that reaches it first moves it on in its
    /// slow path, from the book.
    #[inline(always)]
    fn signaled_posted<W>(&mut self, seq: u64, wr: &Prepared<'scope, W>) -> LaneToken<'scope> {
        self.qp.sq.lane.covered(seq);
        LaneToken { qp: self.qp, seq, report: wr.report, _scope: PhantomData }
    }

    /// `ibv_post_send` of `wr` without `IBV_SEND_SIGNALED`: it has no completion of its own
    /// and is complete once a later signaled request of the lane is. (A run of unsignaled
    /// requests is at most half the send queue's depth: the request after it is signaled
    /// whatever the caller asked, so that the queue cannot fill with requests that nothing
    /// completes.)
    ///
    /// # Errors
    /// As for [`SendLane::post`].
    ///
    /// See ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    #[inline(always)]
    pub fn post_unsignaled<W>(&mut self, wr: &mut Prepared<'scope, W>) -> Result<()> {
        // Two branches rather than one `||`: each is a compare and a jump.
        let seq = self.qp.sq.lane.next();
        if seq >= self.checkpoint {
            return self.post_unsignaled_slow(wr);
        }
        if !std::ptr::eq(wr.qp, self.qp) {
            return Err(foreign("send lane", self.qp));
        }
        self.post_now(&mut wr.raw, seq)
    }

    #[cold]
    #[inline(never)]
    fn post_unsignaled_slow<W>(&mut self, wr: &mut Prepared<'scope, W>) -> Result<()> {
        let seq = self.check(wr.qp)?;
        let force_at = self.force_at();
        if seq >= force_at {
            return self.post(wr).map(drop);
        }
        self.checkpoint = force_at.min(self.limit);
        self.post_now(&mut wr.raw, seq)
    }

    /// Builds the requests of `wrs` for this lane's QP with the checks of
    /// [`SendLane::prepare`], once, and chains them into one list in that order. Posted with
    /// [`SendLane::post_list`], request j (from 0) is signaled when j + 1 is a multiple of
    /// `signal_every`, and the last one always is (perftest's post list with CQ moderation:
    /// `-l LEN -Q signal_every`).
    ///
    /// # Errors
    /// Returns the requests with a [`PostError`]: [`Error::InvalidArgument`] if the list is
    /// empty, longer than the send queue is deep, or `signal_every` is 0 or longer than the
    /// lane's longest unsignaled run (half the queue's depth, at least 1); or the error of the first
    /// request whose check fails.
    pub fn prepare_list<W>(
        &self,
        wrs: Vec<W>,
        signal_every: usize,
    ) -> std::result::Result<PreparedList<'scope, W>, PostError<Vec<W>>>
    where
        W: SendWr<T> + AddressedFor<T> + 'scope,
        W::Buffers: Reusable,
    {
        let (len, depth, max_run) = (wrs.len() as u64, self.depth, self.max_run);
        let reason = if wrs.is_empty() {
            Some("an empty post list".to_string())
        } else if len > depth {
            Some(format!("a post list of {len} requests on a send queue of {depth}"))
        } else if signal_every == 0 || signal_every as u64 > max_run.max(1) {
            Some(format!(
                "signal_every {signal_every}: it must be 1 to {} (half the send queue's depth, at least 1)",
                max_run.max(1)
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(PostError { error: Error::invalid("SendLane::prepare_list", reason), wr: Some(wrs) });
        }
        let mut items: Vec<Prepared<'scope, W>> = Vec::with_capacity(wrs.len());
        let mut rest = wrs.into_iter();
        while let Some(wr) = rest.next() {
            match self.prepare(wr) {
                Ok(p) => items.push(p),
                Err(PostError { error, wr }) => {
                    // `prepare` posts nothing: the request is always handed back.
                    let wr = items.into_iter().map(|p| p.wr).chain(wr).chain(rest).collect();
                    return Err(PostError { error, wr: Some(wr) });
                }
            }
        }
        // The chain (`next`) is built by each post, after its last write to the requests.
        Ok(PreparedList { items, signal_every })
    }

    /// `ibv_post_send` of `list`'s requests as one list (one call into the provider), signaled
    /// as [`SendLane::prepare_list`] says; if the lane's run of unsignaled requests would grow
    /// too long before the list's first signaled one, the list's first request is signaled
    /// too. The returned token collects the completion of the list's last request, which also
    /// completes every earlier request of the lane.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] if `list` was prepared for another QP;
    /// - [`Error::QueueFull`] when the send queue has no room for the whole list (nothing is
    ///   posted);
    /// - [`Error::Verb`] with `ibv_post_send` and its errno, naming how many of the list's
    ///   requests the provider took before the one it refused (those are posted, and
    ///   complete as the lane's other requests do; all of them count as posted if the
    ///   provider does not say which one it refused).
    ///
    /// See ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    pub fn post_list<W>(&mut self, list: &mut PreparedList<'scope, W>) -> Result<LaneToken<'scope>> {
        let n = list.items.len() as u64;
        let seq = self.check_room(list.items[0].qp, n)?;
        // The unsignaled requests of the list before its first signaled one lengthen the
        // lane's current run: signal the first request if they would reach `force_at`.
        let every = list.signal_every;
        let lead = (every as u64).min(n) - 1;
        let force_first = lead > 0 && seq + lead > self.force_at();
        for j in 0..list.items.len() {
            let signaled = list.signals(j, force_first);
            let item = &mut list.items[j];
            item.raw.wr.send_flags = if signaled { item.flags_signaled } else { item.flags_unsignaled };
            item.raw.wr.wr_id = seq + j as u64;
        }
        // Recorded before the post, as for one request.
        self.qp.sq.lane.posting(seq + n - 1);
        // The chain, built last and from the end: each request's pointer is taken after the
        // last write to it through its box and the box is not written again before the call
        // (a write through the box would invalidate a pointer taken from it before, under
        // Rust's aliasing rules; `scope::post_send_list` offsets one base pointer instead).
        let mut head: *mut sys::ibv_send_wr = std::ptr::null_mut();
        for item in list.items.iter_mut().rev() {
            item.raw.wr.next = head;
            head = &mut item.raw.wr;
        }
        let mut bad = std::ptr::null_mut::<sys::ibv_send_wr>();
        // SAFETY: `raw_qp` is the live QP (borrowed for 'scope) and `post_fn` its provider's
        // ibv_post_send. `head` starts the chain built just above: each request was built
        // by `prepare` for this QP, its `sg_list` points into its own box and its `next` at
        // the next box's request (null for the last), and the memory they name is borrowed
        // for at least 'scope (never owned: `Reusable`); the scope does not return before
        // these requests completed or the QP was reset (the drain covers the lane's queue).
        // `bad` is a valid out-pointer, only written on failure.
        let ret = unsafe { (self.post_fn)(self.raw_qp.as_ptr(), head, &mut bad) };
        for item in &mut list.items {
            item.raw.wr.send_flags = item.flags_unsignaled;
        }
        if ret != 0 {
            return Err(self.list_refused(list, seq, force_first, bad, ret));
        }
        // The list's last request is signaled: it covers the list.
        Ok(self.signaled_posted(seq + n - 1, &list.items[list.items.len() - 1]))
    }

    /// The provider refused `list` at `bad` (posted from number `seq`, its first request
    /// signaled if `first_signaled`): the requests before it are posted; records them, and
    /// the last signaled one among them, which covers them.
    #[cold]
    fn list_refused<W>(
        &mut self,
        list: &PreparedList<'scope, W>,
        seq: u64,
        first_signaled: bool,
        bad: *mut sys::ibv_send_wr,
        ret: i32,
    ) -> Error {
        // A provider that does not say where it stopped (`bad` null or foreign): every request
        // counts as posted, and none as covered (rxe queues the requests before its doorbell
        // fails, so they may sit in the ring, and no completion is promised for them), so that
        // their memory stays reserved until a later signaled request, a flush or a reset
        // settles them (the safe side, as `Scope::post_send_list`).
        let n = list.items.len();
        let named = list.items.iter().position(|item| std::ptr::eq(&item.raw.wr, bad));
        let taken = named.unwrap_or(n);
        let book = &self.qp.sq.lane;
        book.unpost(seq + taken as u64);
        // Only a prefix the provider named was surely accepted, and only then is a signaled
        // request among it known to get a completion.
        let covered = named.and_then(|_| (0..taken).rev().find(|&j| list.signals(j, first_signaled)));
        if let Some(j) = covered {
            book.covered(seq + j as u64);
        }
        self.checkpoint = self.force_at().min(self.limit);
        let what = format!(
            "QP {:#x}, lane list of {n} from request {seq}: the provider took {taken} before refusing one",
            self.qp.qp_num()
        );
        Error::from_ret(crate::Verb::PostSend, what, ret)
    }

    /// The checks of the slow path: the request is this lane's, and the queue has room.
    /// Returns the number of the next request.
    #[cold]
    fn check(&mut self, qp: &QpShared) -> Result<u64> {
        self.check_room(qp, 1)
    }

    /// The checks of a post of `n` requests: they are this lane's, and the queue has room for
    /// all of them. Returns the number of the first.
    fn check_room(&mut self, qp: &QpShared, n: u64) -> Result<u64> {
        if !std::ptr::eq(qp, self.qp) {
            return Err(foreign("send lane", self.qp));
        }
        let next = self.qp.sq.lane.next();
        if next + n > self.limit {
            let outstanding = self.qp.sq.lane.outstanding().min(self.depth);
            self.limit = next - outstanding + self.depth;
            self.checkpoint = self.force_at().min(self.limit);
            if next + n > self.limit {
                return Err(Error::QueueFull { queue: "send", qp_num: self.qp.qp_num(), depth: self.depth as u32 });
            }
        }
        Ok(next)
    }

    /// Signaled request `seq` completed: it and every request before it have left the send
    /// queue (completions come in posting order), so numbers up to `seq + depth` fit, as
    /// [`SendLane::check_room`] would find, and the next forced signal is at `seq + 1 +
    /// max_run` or later (the run of unsignaled requests after `seq`): the checkpoint, at most
    /// both. Unsignaled posts then reach the slow path only to be signaled, not to look at the
    /// book. (A wait for an earlier request than the last lowers both: the next post takes
    /// the slow path, which looks at the book and moves the checkpoint on.)
    #[inline(always)]
    fn freed_upto(&mut self, seq: u64) {
        self.limit = seq + 1 + self.depth;
        self.checkpoint = seq + 1 + self.max_run;
    }

    /// The number of the next request that is signaled whatever the caller asked: a run of
    /// unsignaled requests is at most half the queue, so that the send queue never
    /// fills with requests that nothing completes. (The run starts after the last signaled
    /// request, or where the lane opened.)
    #[inline(always)]
    fn force_at(&self) -> u64 {
        self.qp.sq.lane.covered_upto() + self.max_run
    }

    /// Posts `wr` (flags set by the caller) as request `seq`, the book's next number.
    #[inline(always)]
    fn post_now(&mut self, raw: &mut LaneWr, seq: u64) -> Result<()> {
        // Recorded before the post: a poller on another thread may see the completion at once.
        self.qp.sq.lane.posting(seq);
        let wr = &mut raw.wr;
        wr.wr_id = seq;
        let mut bad = std::mem::MaybeUninit::<*mut sys::ibv_send_wr>::uninit();
        // SAFETY: `raw_qp` is the live QP (borrowed for 'scope) and `post_fn` its provider's
        // ibv_post_send. `wr` is one request built by `prepare` for this QP: `sg_list` points
        // into the same box, `next` is null, and the memory it names is borrowed for at least
        // 'scope (`W: 'scope`; never owned: `Reusable`); the scope does not return before this
        // request completed or the QP was reset (its drain covers the lane's queue, which
        // `send_lane` registered). `bad` is a valid out-pointer, only written on failure.
        let ret = unsafe { (self.post_fn)(self.raw_qp.as_ptr(), wr, bad.as_mut_ptr()) };
        if ret != 0 {
            return Err(self.refused(seq, ret));
        }
        Ok(())
    }

    /// The provider refused request `seq`. It stays recorded as posted and uncovered: a
    /// provider may have queued it before failing (rxe's doorbell), and nothing promises a
    /// completion for it, so the scope's drain flushes and resets the QP unless a later
    /// signaled request covers it. (`bad_wr` is not read, so the post stores nothing for it:
    /// providers need not write it, and a later signaled request covers a send that was not
    /// queued as well.)
    #[cold]
    fn refused(&self, seq: u64, ret: i32) -> Error {
        let what =
            format!("QP {:#x}, lane request {seq} (possibly queued: kept until a flush or reset)", self.qp.qp_num());
        Error::from_ret(crate::Verb::PostSend, what, ret)
    }

    /// `ibv_poll_cq`, bounded: waits at most `timeout` for the completion of `token`'s request,
    /// polling the send CQ. A successful completion is reported from the request (status, opcode,
    /// byte length: all that a send queue's successful `ibv_wc` says); an error, flush or forced
    /// reset with the completion the device (or the drain) produced. A failed request's completion
    /// polled by another thread (or by a wait for a later request) is kept for its token, as is a
    /// success after a failure: collect tokens before the send queue's depth of later requests
    /// complete after an error, or the oldest kept completion is dropped (never the first
    /// failure's).
    ///
    /// Yields the thread after every empty poll; [`SendLane::wait_spin`] busy-polls instead.
    ///
    /// # Errors
    /// [`LaneWaitError`] with [`Error::Timeout`] (or a poll failure, or
    /// [`Error::InvalidArgument`] for a token of another lane or a completion that was
    /// dropped) and the token, still valid.
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    #[inline]
    pub fn wait(
        &mut self,
        token: LaneToken<'scope>,
        timeout: Duration,
    ) -> std::result::Result<Completion, LaneWaitError<'scope>> {
        self.wait_with(token, timeout, Waiting::Yield)
    }

    /// `ibv_poll_cq`, as [`SendLane::wait`] busy-polling: the thread never yields while it waits,
    /// and reads the clock only every [`SPIN_CLOCK_EVERY`](crate::scope::SPIN_CLOCK_EVERY) empty
    /// polls. Still bounded by `timeout`.
    ///
    /// # Errors
    /// As for [`SendLane::wait`].
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    #[inline]
    pub fn wait_spin(
        &mut self,
        token: LaneToken<'scope>,
        timeout: Duration,
    ) -> std::result::Result<Completion, LaneWaitError<'scope>> {
        self.wait_with(token, timeout, Waiting::Spin)
    }

    #[inline(always)]
    fn wait_with(
        &mut self,
        token: LaneToken<'scope>,
        timeout: Duration,
        how: Waiting,
    ) -> std::result::Result<Completion, LaneWaitError<'scope>> {
        // The common case, inline: the request completed successfully, known already or after
        // one poll. Everything else (not there yet, failed, foreign token) takes `wait_slow`.
        if std::ptr::eq(token.qp, self.qp) {
            // One poll first, whether or not the book already has the request complete (then
            // the poll takes a later completion, or none): the request usually is not yet.
            let n = self.qp.send_cq.poll_for_lane(self.qp, token.seq);
            // Its own successful completion says the request succeeded without the book
            // (whatever the book says of earlier ones, which an RC, UC or UD send queue would
            // have flushed it after); otherwise the book says.
            if n == LANE_POLLED_AWAITED || self.qp.sq.lane.succeeded(token.seq) {
                self.freed_upto(token.seq);
                return Ok(success(&token));
            }
            // (A failed poll: `wait_slow` reads the book, then polls again and reports it.)
        }
        let LaneToken { qp, seq, report, _scope } = token;
        self.wait_slow(qp, seq, report, timeout, how)
    }

    /// The rest of [`SendLane::wait`]. Takes the token's fields one by one (in registers):
    /// the inline part then need not build the token in memory.
    #[inline(never)]
    fn wait_slow(
        &mut self,
        qp: &'scope QpShared,
        seq: u64,
        report: Report,
        timeout: Duration,
        how: Waiting,
    ) -> std::result::Result<Completion, LaneWaitError<'scope>> {
        let token = LaneToken { qp, seq, report, _scope: PhantomData };
        if !std::ptr::eq(token.qp, self.qp) {
            return Err(LaneWaitError { error: foreign("send lane", self.qp), token });
        }
        let mut idle = Idle::new(how, timeout);
        loop {
            match self.qp.sq.lane.result(token.seq, self.qp.qp_num()) {
                LaneResult::Success => return Ok(success(&token)),
                LaneResult::Failed(c) => return Ok(c),
                LaneResult::Lost => {
                    return Err(LaneWaitError { error: lost_send(self.qp, token.seq, self.depth), token })
                }
                LaneResult::Pending => {}
            }
            match self.qp.send_cq.poll_for_lane(self.qp, token.seq).min(1) {
                n if n < 0 => return Err(LaneWaitError { error: self.qp.send_cq.poll_failed(n), token }),
                // A busy poll may have completed the request (recorded, not handed over).
                n if idle.after_poll(n as usize) && (n == 0 || !self.qp.sq.lane.is_done(token.seq)) => {
                    let what = format!("the completion of lane request {} on QP {:#x}", token.seq, self.qp.qp_num());
                    return Err(LaneWaitError { error: Error::Timeout { what, after: timeout }, token });
                }
                _ => {}
            }
        }
    }

    /// The QP's shared state (for [`Scope::post_recv_lane`]).
    pub(crate) fn shared(&self) -> &'scope QpShared {
        self.qp
    }

    /// Requests of the lane posted and not known complete.
    pub fn outstanding(&self) -> u64 {
        self.qp.sq.lane.outstanding()
    }
}

impl<'scope, T: Transport> RecvLane<'scope, T> {
    /// Builds `wr` for this lane's QP with the checks of [`Scope::post_recv`] (the region's
    /// LOCAL_WRITE at compile time, ODP support for receives on this transport at run time),
    /// once.
    ///
    /// # Errors
    /// Returns the request with a [`PostError`] if a check fails.
    pub fn prepare<L>(&self, wr: Recv<L>) -> std::result::Result<PreparedRecv<'scope, L>, PostError<Recv<L>>>
    where
        L: Scatter + Reusable + 'scope,
    {
        let sges = match self.qp.recv_sges::<T, L>(&wr.buf) {
            Ok(sges) => sges,
            Err(error) => return Err(PostError { error, wr: Some(wr) }),
        };
        let mut entries = sges.used().to_vec();
        let raw_wr = sys::ibv_recv_wr { sg_list: entries.as_mut_ptr(), num_sge: sges.num_sge, ..Default::default() };
        let raw = Box::new(RawRecvWr { wr: raw_wr, _sges: entries });
        Ok(PreparedRecv { raw, qp: self.qp, last: None, buf: wr.buf, _scope: PhantomData })
    }

    /// `ibv_post_recv` of `wr`: the returned token collects its completion. Posting a prepared
    /// receive again before its completion lets the device write its buffer twice (the program
    /// reads it only through [`PreparedRecv::received`], once the last post completed).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] if `wr` was prepared for another QP;
    /// - [`Error::QueueFull`] when the receive queue is full of outstanding requests;
    /// - [`Error::Verb`] with `ibv_post_recv` and its errno. A receive the provider names in
    ///   `bad_wr` was not queued, and `wr` is as before the call; one it does not name may have
    ///   been, and counts as posted (its buffer is handed out once it completes or the QP is
    ///   reset).
    ///
    /// See ibv_post_recv(3).
    #[doc(alias = "ibv_post_recv")]
    #[inline(always)]
    pub fn post<L>(&mut self, wr: &mut PreparedRecv<'scope, L>) -> Result<RecvToken<'scope>> {
        let book = &self.qp.rq.lane;
        let mut seq = book.next();
        if seq >= self.limit {
            seq = self.check()?;
        }
        if !std::ptr::eq(wr.qp, self.qp) {
            return Err(foreign("receive lane", self.qp));
        }
        // Recorded before the post: a poller on another thread may see the completion at once.
        book.posting(seq);
        wr.raw.wr.wr_id = seq | RECV_BIT;
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: `raw_qp` is the live QP (borrowed for 'scope) and `post_fn` its provider's
        // ibv_post_recv. The request was built by `prepare` for this QP: `sg_list` points into
        // the same box, `next` is null, and the buffer is borrowed for at least 'scope
        // (`L: 'scope`; never owned: `Reusable`). The scope does not return before this
        // request completed or the QP was reset (its drain covers the lane's queue, which the
        // lane registered when it opened). `bad` is a valid out-pointer, written on failure.
        let ret = unsafe { (self.post_fn)(self.raw_qp.as_ptr(), &mut wr.raw.wr, &mut bad) };
        if ret != 0 {
            return Err(self.refused(wr, seq, std::ptr::eq(bad, &wr.raw.wr), ret));
        }
        wr.last = Some(seq);
        Ok(RecvToken { qp: self.qp, seq, _scope: PhantomData })
    }

    /// The provider refused receive `seq`, `wr`'s post. Named in `bad_wr` (`named`): not
    /// queued, not posted, and `wr` stays as it was (its last post, if any, is still the one
    /// that counts). Otherwise possibly queued (see `SendLane::refused`): it stays posted, and
    /// the buffer is not handed out by `received` before the receive completes or the QP is
    /// reset.
    #[cold]
    fn refused<L>(&self, wr: &mut PreparedRecv<'scope, L>, seq: u64, named: bool, ret: i32) -> Error {
        let what = if named {
            self.qp.rq.lane.unpost(seq);
            format!("QP {:#x}, lane receive {seq} (not queued)", self.qp.qp_num())
        } else {
            self.qp.rq.lane.refused_unnamed(seq);
            wr.last = Some(seq);
            format!("QP {:#x}, lane receive {seq} (possibly queued: kept until a flush or reset)", self.qp.qp_num())
        };
        Error::from_ret(crate::Verb::PostRecv, what, ret)
    }

    /// The queue has room for request number `next`: returns it, or [`Error::QueueFull`].
    #[inline(always)]
    fn check(&mut self) -> Result<u64> {
        let book = &self.qp.rq.lane;
        let next = book.next();
        self.limit = next - book.outstanding().min(self.depth) + self.depth;
        if next >= self.limit {
            return Err(self.full());
        }
        Ok(next)
    }

    /// Receive `seq` completed and its completion was handed out: it and every receive before
    /// it have left the queue (a receive queue completes in order), so numbers up to
    /// `seq + depth` fit, as [`RecvLane::check`] would find. A lane that keeps its queue full
    /// (a ping-pong's) then posts without looking at the book. (A wait for an earlier receive
    /// than the last one lowers the limit: the next post looks at the book, as before.)
    #[inline(always)]
    fn freed_upto(&mut self, seq: u64) {
        self.limit = seq + 1 + self.depth;
    }

    #[cold]
    #[inline(never)]
    fn full(&self) -> Error {
        Error::QueueFull { queue: "receive", qp_num: self.qp.qp_num(), depth: self.depth as u32 }
    }

    /// `ibv_poll_cq`, bounded: waits at most `timeout` for the completion of `token`'s receive,
    /// polling the receive CQ, and hands it back whatever its status (a flush, or a forced reset's
    /// synthetic flush, included). A completion polled by another thread, or while waiting for a
    /// later receive, is kept for its token: collect tokens before the receive queue's depth of
    /// later receives complete, or the oldest kept completion is dropped.
    ///
    /// Yields the thread after every empty poll; [`RecvLane::wait_spin`] busy-polls instead.
    ///
    /// # Errors
    /// [`RecvWaitError`] with the token (still valid) and [`Error::Timeout`], a poll failure,
    /// or [`Error::InvalidArgument`] for a token of another lane or a completion that was
    /// dropped.
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    #[inline]
    pub fn wait(
        &mut self,
        token: RecvToken<'scope>,
        timeout: Duration,
    ) -> std::result::Result<Completion, RecvWaitError<'scope>> {
        self.wait_with(token, timeout, Waiting::Yield)
    }

    /// `ibv_poll_cq`, as [`RecvLane::wait`] busy-polling: the thread never yields while it waits,
    /// and reads the clock only every [`SPIN_CLOCK_EVERY`](crate::scope::SPIN_CLOCK_EVERY) empty
    /// polls. Still bounded by `timeout`.
    ///
    /// # Errors
    /// As for [`RecvLane::wait`].
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    #[inline]
    pub fn wait_spin(
        &mut self,
        token: RecvToken<'scope>,
        timeout: Duration,
    ) -> std::result::Result<Completion, RecvWaitError<'scope>> {
        self.wait_with(token, timeout, Waiting::Spin)
    }

    #[inline(always)]
    fn wait_with(
        &mut self,
        token: RecvToken<'scope>,
        timeout: Duration,
        how: Waiting,
    ) -> std::result::Result<Completion, RecvWaitError<'scope>> {
        // The common cases inline (`take_now`); everything else (not there yet, kept by
        // another poller, failed poll, foreign token) takes `wait_slow`.
        if std::ptr::eq(token.qp, self.qp) {
            if let Some(c) = self.take_now(token.seq) {
                return Ok(c);
            }
        }
        self.wait_slow(token, timeout, how)
    }

    /// The completion of this lane's receive `seq` in the common cases: the lane's poll finds
    /// it now, or an earlier poll of the lane took it (the oldest it took).
    #[inline(always)]
    fn take_now(&mut self, seq: u64) -> Option<Completion> {
        if !self.qp.rq.lane.is_done(seq) {
            // Not complete, so not among the ones taken. A failed poll leaves `mine` empty:
            // the slow path polls again and reports it.
            let mut mine = None;
            self.qp.recv_cq.poll_for_recv_lane(self.qp, seq, &mut self.ready, self.depth as usize, &mut mine);
            if mine.is_some() {
                self.freed_upto(seq);
            }
            mine
        } else if let Some(&(first, c)) = self.ready.front().filter(|&&(first, _)| first == seq) {
            self.ready.pop_front();
            self.freed_upto(first);
            Some(c)
        } else {
            None
        }
    }

    /// The rest of [`RecvLane::wait`].
    #[inline(never)]
    fn wait_slow(
        &mut self,
        token: RecvToken<'scope>,
        timeout: Duration,
        how: Waiting,
    ) -> std::result::Result<Completion, RecvWaitError<'scope>> {
        if !std::ptr::eq(token.qp, self.qp) {
            return Err(RecvWaitError { error: foreign("receive lane", self.qp), token });
        }
        let (qp, book) = (self.qp, &self.qp.rq.lane);
        let mut idle = Idle::new(how, timeout);
        // Only this lane's own polls add to its FIFO: it is searched first, then only after a
        // poll that took another completion (a spinning wait's empty polls stay short).
        let mut look = true;
        loop {
            if look {
                if let Some(i) = self.ready.iter().position(|&(seq, _)| seq == token.seq) {
                    if let Some((_, c)) = self.ready.remove(i) {
                        return Ok(c);
                    }
                }
            }
            match book.take_kept(token.seq, qp.qp_num()) {
                Kept::Pending => {}
                Kept::Done(c) => return Ok(c),
                Kept::Lost => return Err(RecvWaitError { error: lost(qp, token.seq, self.depth), token }),
            }
            let mut mine = None;
            let n = qp.recv_cq.poll_for_recv_lane(qp, token.seq, &mut self.ready, self.depth as usize, &mut mine);
            if let Some(c) = mine {
                return Ok(c);
            }
            look = n > 0;
            match n {
                n if n < 0 => return Err(RecvWaitError { error: qp.recv_cq.poll_failed(n), token }),
                n if idle.after_poll(n as usize) => {
                    let what = format!("the completion of lane receive {} on QP {:#x}", token.seq, qp.qp_num());
                    return Err(RecvWaitError { error: Error::Timeout { what, after: timeout }, token });
                }
                _ => {}
            }
        }
    }

    /// Receives of the lane posted and not known complete.
    pub fn outstanding(&self) -> u64 {
        self.qp.rq.lane.outstanding()
    }

    /// This lane, handing completions out in posting order with no token per receive
    /// ([`OrderedRecvLane`]). Its first [`OrderedRecvLane::wait_next`] waits for the next
    /// receive posted: receives posted before through [`RecvLane::post`] are not handed out
    /// (their tokens can no longer be waited for; their completions are polled and set
    /// aside), so convert the lane before posting.
    pub fn ordered(mut self) -> OrderedRecvLane<'scope, T> {
        // The completions set aside for tokens that can no longer be waited for.
        self.ready.clear();
        let next_out = self.qp.rq.lane.next();
        OrderedRecvLane { lane: self, next_out }
    }
}

impl<'scope, T: Transport> OrderedRecvLane<'scope, T> {
    /// Builds `wr` for this lane's QP, as [`RecvLane::prepare`].
    ///
    /// # Errors
    /// As for [`RecvLane::prepare`].
    pub fn prepare<L>(&self, wr: Recv<L>) -> std::result::Result<PreparedRecv<'scope, L>, PostError<Recv<L>>>
    where
        L: Scatter + Reusable + 'scope,
    {
        self.lane.prepare(wr)
    }

    /// `ibv_post_recv` of `wr`, as [`RecvLane::post`], with no token: its completion is
    /// handed out by the [`OrderedRecvLane::wait_next`] that comes to it.
    ///
    /// # Errors
    /// As for [`RecvLane::post`]. A receive the provider refused without naming it in
    /// `bad_wr` counts as posted and is waited for in its turn: if the provider did not queue
    /// it after all, the waits for it time out until a later receive completes, and then
    /// report it gone ([`Error::InvalidArgument`]) and move past it (or, if none comes, the
    /// scope's drain resets the QP).
    ///
    /// See ibv_post_recv(3).
    #[doc(alias = "ibv_post_recv")]
    #[inline(always)]
    pub fn post<L>(&mut self, wr: &mut PreparedRecv<'scope, L>) -> Result<()> {
        self.lane.post(wr).map(|_| ())
    }

    /// `ibv_poll_cq`, bounded: waits at most `timeout` for the completion of the oldest receive of
    /// this lane not handed out yet (a flush, or a forced reset's synthetic flush, included),
    /// polling the receive CQ, and hands it out: the next call waits for the receive after it.
    ///
    /// Yields the thread after every empty poll; [`OrderedRecvLane::wait_next_spin`]
    /// busy-polls instead.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] when every receive posted through this ordered lane has
    ///   been handed out (nothing to wait for), or when the completion is gone (dropped, more
    ///   having been kept after it than the queue is deep; or never coming, the receive
    ///   refused without a name and not queued, a later one complete): the next call waits
    ///   for the receive after it;
    /// - [`Error::Timeout`], or the poll's failure: the next call waits for the same receive.
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    #[inline]
    pub fn wait_next(&mut self, timeout: Duration) -> Result<Completion> {
        self.wait_next_with(timeout, Waiting::Yield)
    }

    /// `ibv_poll_cq`, as [`OrderedRecvLane::wait_next`], busy-polling like [`RecvLane::wait_spin`].
    ///
    /// # Errors
    /// As for [`OrderedRecvLane::wait_next`].
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    #[inline]
    pub fn wait_next_spin(&mut self, timeout: Duration) -> Result<Completion> {
        self.wait_next_with(timeout, Waiting::Spin)
    }

    #[inline(always)]
    fn wait_next_with(&mut self, timeout: Duration, how: Waiting) -> Result<Completion> {
        // The token wait's common cases, inline, for receive `next_out`, the oldest this lane
        // has not handed out. (A number not posted yet is never complete and never polled:
        // `take_now` finds nothing, and the slow path reports it.)
        let seq = self.next_out;
        if let Some(c) = self.lane.take_now(seq) {
            self.next_out = seq + 1;
            return Ok(c);
        }
        self.wait_next_slow(timeout, how)
    }

    /// The rest of [`OrderedRecvLane::wait_next`].
    #[inline(never)]
    fn wait_next_slow(&mut self, timeout: Duration, how: Waiting) -> Result<Completion> {
        let (seq, qp) = (self.next_out, self.lane.qp);
        if seq >= qp.rq.lane.next() {
            return Err(nothing_to_wait_for(qp));
        }
        // The same wait as a token's: the receive is this lane's own and was posted.
        match self.lane.wait_slow(RecvToken { qp, seq, _scope: PhantomData }, timeout, how) {
            Ok(c) => {
                self.next_out = seq + 1;
                Ok(c)
            }
            Err(RecvWaitError { error, .. }) => {
                // Not a foreign token (the lane's own QP): a completion that is gone (dropped,
                // or never coming for a receive that was not queued), which never comes back; a
                // timeout or a failed poll leaves the receive to wait for again.
                if matches!(error, Error::InvalidArgument { .. }) {
                    self.next_out = seq + 1;
                }
                Err(error)
            }
        }
    }

    /// Receives of the lane posted and not known complete.
    pub fn outstanding(&self) -> u64 {
        self.lane.outstanding()
    }
}

#[cold]
#[inline(never)]
fn nothing_to_wait_for(qp: &QpShared) -> Error {
    Error::invalid(
        "OrderedRecvLane::wait_next",
        format!("every receive posted through the ordered lane of QP {:#x} has been handed out", qp.qp_num()),
    )
}

impl<L> PreparedRecv<'_, L> {
    /// The buffer, to read what was received: `None` while the last post of this receive is
    /// outstanding (the device may still write it). After the completion of that post has
    /// been polled (by any wait), or before the first post.
    pub fn received(&self) -> Option<&L> {
        match self.last {
            Some(seq) if !self.qp.rq.lane.is_done(seq) => None,
            _ => Some(&self.buf),
        }
    }

    /// The receive, with the borrow of its buffer (the borrow itself lasts until the scope
    /// ends), once the device is done with the buffer: after the completion of its last post
    /// has been polled (by any wait), or before its first post. Handing it out earlier would
    /// let the buffer be read, or posted again, while the device may still write it.
    ///
    /// # Errors
    /// Returns the prepared receive unchanged while its last post is outstanding.
    pub fn into_inner(self) -> std::result::Result<Recv<L>, Self> {
        match self.last {
            Some(seq) if !self.qp.rq.lane.is_done(seq) => Err(self),
            _ => Ok(Recv { buf: self.buf }),
        }
    }
}

impl<L: std::fmt::Debug> std::fmt::Debug for PreparedRecv<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRecv").field("qp_num", &self.qp.qp_num()).field("buf", &self.buf).finish()
    }
}

impl std::fmt::Debug for RecvToken<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvToken").field("qp_num", &self.qp.qp_num()).field("request", &self.seq).finish()
    }
}

impl<T: Transport> std::fmt::Debug for RecvLane<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvLane").field("qp_num", &self.qp.qp_num()).field("next", &self.qp.rq.lane.next()).finish()
    }
}

impl<T: Transport> std::fmt::Debug for OrderedRecvLane<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderedRecvLane")
            .field("qp_num", &self.lane.qp.qp_num())
            .field("next", &self.lane.qp.rq.lane.next())
            .field("next_out", &self.next_out)
            .finish()
    }
}

/// The completion of send lane request `seq` was pushed out of its book (`LaneResult::Lost`).
#[cold]
fn lost_send(qp: &QpShared, seq: u64, depth: u64) -> Error {
    Error::invalid(
        "send lane",
        format!(
            "the completion of lane request {seq} on QP {:#x} is gone: it failed, or succeeded after a failure, and was dropped (more completions were kept after it than the send queue is deep, {depth}: a lane that goes on posting after an error has every later request flushed)",
            qp.qp_num()
        ),
    )
}

#[cold]
fn lost(qp: &QpShared, seq: u64, depth: u64) -> Error {
    Error::invalid(
        "receive lane",
        format!(
            "the completion of lane receive {seq} on QP {:#x} is gone: it was dropped (more completions were kept after it than the receive queue is deep, {depth}), or the receive was never queued (a post the provider refused without naming it in bad_wr) and a later receive completed",
            qp.qp_num()
        ),
    )
}

impl std::fmt::Debug for LaneToken<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneToken").field("qp_num", &self.qp.qp_num()).field("request", &self.seq).finish()
    }
}

impl<W> Prepared<'_, W> {
    /// The request, with the borrow of its memory (the borrow itself lasts until the scope
    /// ends), once the device is done with that memory: when no request of its lane is
    /// outstanding (each one's completion, or that of a later signaled request, polled by any
    /// wait; the lane does not number the posts of one prepared request, so it waits for all).
    /// Handing it out earlier would let memory the device may still write (an RDMA READ or
    /// atomic destination) be read or posted again.
    ///
    /// # Errors
    /// Returns the prepared request unchanged while requests of its lane are outstanding.
    pub fn into_inner(self) -> std::result::Result<W, Self> {
        if self.qp.sq.lane.outstanding() > 0 {
            return Err(self);
        }
        Ok(self.wr)
    }
}

impl<W> PreparedList<'_, W> {
    /// Whether a post of the list signals its request `j` (from 0): every `signal_every`-th,
    /// the last, and with `first_signaled` the first.
    fn signals(&self, j: usize, first_signaled: bool) -> bool {
        (j + 1) % self.signal_every == 0 || j + 1 == self.items.len() || (j == 0 && first_signaled)
    }

    /// The number of requests in the list.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Always false: a list has at least one request.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The requests, with the borrows of their memory (which last until the scope ends), once
    /// no request of the lane is outstanding, as [`Prepared::into_inner`].
    ///
    /// # Errors
    /// Returns the list unchanged while requests of its lane are outstanding.
    pub fn into_inner(self) -> std::result::Result<Vec<W>, Self> {
        if self.items[0].qp.sq.lane.outstanding() > 0 {
            return Err(self);
        }
        Ok(self.items.into_iter().map(|p| p.wr).collect())
    }
}

impl<W: std::fmt::Debug> std::fmt::Debug for PreparedList<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let wrs: Vec<&W> = self.items.iter().map(|p| &p.wr).collect();
        f.debug_struct("PreparedList")
            .field("qp_num", &self.items[0].qp.qp_num())
            .field("signal_every", &self.signal_every)
            .field("wrs", &wrs)
            .finish()
    }
}

impl<W: std::fmt::Debug> std::fmt::Debug for Prepared<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("qp_num", &self.qp.qp_num()).field("wr", &self.wr).finish()
    }
}

impl<T: Transport, S: CanPostSend> std::fmt::Debug for SendLane<'_, T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendLane").field("qp_num", &self.qp.qp_num()).field("next", &self.qp.sq.lane.next()).finish()
    }
}

/// The successful completion of `token`'s request.
#[inline(always)]
fn success(token: &LaneToken<'_>) -> Completion {
    let mut c = Completion::implied(token.qp.qp_num(), token.report.opcode);
    c.byte_len = token.report.byte_len;
    c.source = CompletionSource::Own;
    c
}

#[cold]
fn foreign(lane: &'static str, qp: &QpShared) -> Error {
    Error::invalid(lane, format!("the request or token belongs to another lane than QP {:#x}'s", qp.qp_num()))
}

/// What a successful completion of `raw` reports: its opcode, and the byte length for the
/// operations whose send-queue completion carries one (RDMA READ: the bytes read; atomics: 8).
fn success_report<S: SgeStore>(raw: &RawSendWr<S>) -> Report {
    let len = raw.used_sges().iter().fold(0u32, |n, s| n.wrapping_add(s.length));
    let (opcode, byte_len) = match raw.wr.opcode {
        sys::IBV_WR_RDMA_WRITE | sys::IBV_WR_RDMA_WRITE_WITH_IMM => (sys::IBV_WC_RDMA_WRITE, 0),
        sys::IBV_WR_RDMA_READ => (sys::IBV_WC_RDMA_READ, len),
        sys::IBV_WR_ATOMIC_CMP_AND_SWP => (sys::IBV_WC_COMP_SWAP, 8),
        sys::IBV_WR_ATOMIC_FETCH_AND_ADD => (sys::IBV_WC_FETCH_ADD, 8),
        sys::IBV_WR_TSO => (sys::IBV_WC_TSO, 0),
        _ => (sys::IBV_WC_SEND, 0),
    };
    Report { opcode, byte_len }
}

/// What a successful completion of a lane's request reports (`IBV_WC_*` opcode, byte length).
/// Aligned as one 8-byte word, so that a token carries it in one move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
struct Report {
    opcode: u32,
    byte_len: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::{LocalBuf, LocalBufMut, OdpTag, RemoteSlice};
    use crate::pd::PdId;
    use crate::wr::{self, SendRequest};

    /// What a prepared request reports on success: an RDMA READ scattered over a list reports
    /// the bytes of all its entries (the empty ones add nothing), a SEND gathered from a list
    /// none.
    #[test]
    fn a_prepared_list_reports_the_bytes_of_its_entries() {
        let pd = PdId::dummy();
        let sink = |addr, len| LocalBufMut::from_parts(addr, len, 4, OdpTag::default(), pd);
        let remote = RemoteSlice::<crate::access::RemoteAll>::new(0x9000, 64, 2);
        let mut raw = RawSendWr::new();
        wr::Read::new((sink(0x1000, 8), sink(0x2000, 0), sink(0x3000, 9)), remote).build(&mut raw).expect("17 fit 64");
        assert_eq!(success_report(&raw), Report { opcode: sys::IBV_WC_RDMA_READ, byte_len: 17 });
        let view = LocalBuf::from_parts(0x1000, 100, 3, OdpTag::default(), pd);
        let mut raw = RawSendWr::new();
        wr::Send::new([view; 3]).build(&mut raw).expect("valid");
        assert_eq!(success_report(&raw), Report { opcode: sys::IBV_WC_SEND, byte_len: 0 });
    }
}
