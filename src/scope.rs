//! Scoped posting: borrowed buffers that cannot be reused before their completion, soundly
//! even if a token is leaked.
//!
//! [`scope`] works like [`std::thread::scope`]: work requests posted through the [`Scope`]
//! may use memory borrowed from *outside* the scope closure, and `scope` does not return
//! (nor unwind) before the device is done with every one of them. Posting moves the request's
//! memory views into a [`Token`]; [`Scope::wait`] hands them back together with the
//! [`Completion`]. A token that is forgotten (`mem::forget`) or dropped only means nobody
//! collects that completion: the borrow of the memory still lasts until `scope` returns, and
//! `scope` waits for the device first.
//!
//! Draining at the end of the scope: every request still outstanding is awaited (polling its
//! CQ) for at most the drain timeout. If that runs out, or if one of the scope's requests is
//! an unsignaled one that no completion will ever cover, the QP is moved to ERR (flushing
//! everything), and if even the flush does not arrive, to RESET, after which the device no
//! longer touches any buffer. The scope then reports [`Error::QpBroken`].
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use typed_verbs_sys as sys;

use crate::access::{AccessSet, VirtuallyAddressed, WindowOn, WindowRights};
use crate::ah::Ah;
use crate::error::{Error, Result};
use crate::mr::{Chunk, LocalBuf, LocalBufMut, LocalSource, Mr, WindowRegion};
use crate::mw::{
    BindCompleted, BindInFlight, BoundByVerb, BoundMw, InvalidationWatch, Mw, MwType, PendingBind, PendingRebind,
    PendingUnbind, RegionBorrow, UnboundByVerb,
};
use crate::qp::{Qp, QpShared, QueueRef, Refused};
use crate::queue::{Take, TrackedQueue};
use crate::sgl::Scatter;
use crate::transport::{
    AdvertisesWindows, CanPostRecv, CanPostSend, HasRecvQueue, QpState, SupportsBindMw, SupportsFence, Transport,
};
use crate::wc::Completion;
use crate::wr::{
    check_window_range, AddressedFor, InlineSend, InlineWr, PostedOn, RawSendWr, Recv, SendRequest, SendWr,
};

/// How long the end of a scope waits for outstanding work requests by default.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the drain waits for flush completions after moving a QP to ERR.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a forced flush waits when all that is left is an unsignaled send tail: the flush
/// of a request the device had not executed comes at once; one it had executed never comes.
const TAIL_GRACE: Duration = Duration::from_millis(200);

#[derive(Clone, Copy)]
struct Posted<'scope> {
    q: QueueRef<'scope>,
    seq: u64,
}

/// Scope ids: each request records the scope that posted it (0 for owned tokens), so that the
/// end of a scope finds its requests in the queues it touched without a per-request record.
static NEXT_SCOPE_ID: AtomicU64 = AtomicU64::new(1);

/// The posting side of a [`scope`]. See the [module documentation](self).
pub struct Scope<'scope, 'env: 'scope> {
    id: u64,
    /// The work queues this scope posted to (few; deduplicated).
    touched: Mutex<Vec<QueueRef<'scope>>>,
    /// The queue of the last post, to skip the `touched` lock on repeated posts to one queue.
    last_touched: AtomicPtr<TrackedQueue>,
    /// Address handles of inline UD sends (not borrowed for the scope), kept until its end.
    keep: Mutex<Vec<Ah>>,
    drain_timeout: Duration,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// A posted work request whose completion has not been collected yet. Holds the memory views
/// of the request; [`Scope::wait`] hands them back with the completion.
///
/// Tied to its scope: it cannot be used in another scope, nor outlive its own.
///
/// Dropping a token (directly, by `?` on a failed wait, or by unwinding) gives up the
/// completion, never the memory: borrowed views stay borrowed until the scope ends, and what
/// the token owns (a [`Chunk`], a window being bound) is kept with the queue until the device
/// is done with it ([`Completes::into_parked`]).
#[must_use = "a token is how the buffers come back; dropping it leaves them borrowed until the scope ends"]
pub struct Token<'scope, B: Completes> {
    guard: TokenGuard<'scope>,
    /// Taken once: by the wait that consumes the token ([`Token::finish`], which never drops
    /// it), or by `drop`.
    buffers: ManuallyDrop<B>,
}

/// The book-keeping half of a token; dropping it (a token given up) abandons the completion.
struct TokenGuard<'scope> {
    posted: Posted<'scope>,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

impl<B: Completes> std::fmt::Debug for Token<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token").field("request", &self.guard.posted.q.describe(self.guard.posted.seq)).finish()
    }
}

/// What a posted type 1 bind leaves to its caller: its sequence number, the window's rkey
/// before and after, and the window's start address.
struct BindPosted {
    seq: u64,
    old_rkey: u32,
    new_rkey: u32,
    addr: u64,
}

/// A work request that could not be posted: the error, and the request with its buffers.
#[derive(Debug)]
pub struct PostError<W> {
    /// What went wrong.
    pub error: Error,
    /// The request, unchanged, when it was certainly not posted (the library's own checks
    /// refused it, or the provider named it as not posted). `None` when the provider refused it
    /// without saying so: rdma-core 44's rxe provider queues a request before its doorbell
    /// fails, so it may sit in the send queue, and the library keeps its memory (borrowed views
    /// stay borrowed for the scope, owned memory and windows are kept with the queue) until a
    /// completion, a flush or a reset of the QP settles it. The QP is then usually broken: the
    /// scope's drain resets it and reports [`Error::QpBroken`].
    pub wr: Option<W>,
}

impl<W> std::fmt::Display for PostError<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl<W: std::fmt::Debug> std::error::Error for PostError<W> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<W> From<PostError<W>> for Error {
    fn from(e: PostError<W>) -> Self {
        e.error
    }
}

/// A post list that was not (entirely) posted.
#[derive(Debug)]
pub struct PostListError<'scope, W: SendRequest> {
    /// What stopped it.
    pub error: Error,
    /// The tokens of the requests that were posted (a prefix of the list).
    pub posted: Vec<Token<'scope, W::Buffers>>,
    /// The requests that were not posted, in order, with their buffers.
    pub rejected: Vec<W>,
}

impl<W: SendRequest> From<PostListError<'_, W>> for Error {
    fn from(e: PostListError<'_, W>) -> Self {
        e.error
    }
}

/// What a post returns: the token, or the error with the request handed back.
pub type PostResult<'scope, B, W> = std::result::Result<Token<'scope, B>, PostError<W>>;

/// A wait that ran out: the error, and the token to wait on again.
#[derive(Debug)]
pub struct WaitError<'scope, B: Completes> {
    /// The timeout (or poll failure).
    pub error: Error,
    /// The token, still valid.
    pub token: Token<'scope, B>,
}

impl<B: Completes> From<WaitError<'_, B>> for Error {
    fn from(e: WaitError<'_, B>) -> Self {
        e.error
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The book-keeping is consistent at every step, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with a [`Scope`] for posting work requests over borrowed memory, then waits until
/// the device is done with every one of them, with the [default drain
/// timeout](DEFAULT_DRAIN_TIMEOUT).
///
/// Returns what `f` returned. If `f` panics, the scope drains first and then resumes the panic.
/// A panic out of the drain's polls (a future's waker, or the `Drop` of a parked buffer, run
/// by the completions they route) does not cut the drain short: it is resumed once the drain
/// is done (if `f` panicked too, `f`'s panic is resumed).
///
/// # Errors
/// [`Error::QpBroken`] if a QP had to be forced to RESET to reclaim the buffers (its
/// outstanding requests did not complete within the drain timeout, or one of the scope's own
/// requests was an unsignaled one at the tail of the send queue, or one that the provider
/// refused and may have queued, which no completion covers). `f`'s result is lost in that
/// case.
pub fn scope<'env, F, R>(f: F) -> Result<R>
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    scope_with_timeout(DEFAULT_DRAIN_TIMEOUT, f)
}

/// [`scope`] with an explicit drain timeout.
///
/// # Errors
/// As for [`scope`].
pub fn scope_with_timeout<'env, F, R>(drain_timeout: Duration, f: F) -> Result<R>
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    let scope = Scope {
        id: NEXT_SCOPE_ID.fetch_add(1, Ordering::Relaxed),
        touched: Mutex::new(Vec::new()),
        last_touched: AtomicPtr::new(std::ptr::null_mut()),
        keep: Mutex::new(Vec::new()),
        drain_timeout,
        _scope: PhantomData,
        _env: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    let (drained, drain_panic) = scope.drain();
    match (result, drain_panic) {
        // The closure's panic first (the drain's payload leaked: its drop could panic); one out
        // of the drain's polls after it.
        (Err(panic), other) => {
            std::mem::forget(other);
            resume_unwind(panic)
        }
        (Ok(_), Some(panic)) => resume_unwind(panic),
        (Ok(r), None) => drained.map(|()| r),
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Registers `q` as posted to by this scope (its drain then covers it).
    #[inline(always)]
    pub(crate) fn touch(&self, q: QueueRef<'scope>) {
        let ptr = q.tracked() as *const TrackedQueue as *mut TrackedQueue;
        if self.last_touched.load(Ordering::Relaxed) != ptr {
            self.touch_new(q, ptr);
        }
    }

    #[cold]
    #[inline(never)]
    fn touch_new(&self, q: QueueRef<'scope>, ptr: *mut TrackedQueue) {
        let mut touched = lock(&self.touched);
        if !touched.iter().any(|t| std::ptr::eq(t.tracked(), q.tracked())) {
            touched.push(q);
        }
        self.last_touched.store(ptr, Ordering::Relaxed);
    }

    #[inline(always)]
    fn token<B: Completes>(&'scope self, posted: Posted<'scope>, keep: Option<Ah>, buffers: B) -> Token<'scope, B> {
        self.touch(posted.q);
        self.token_touched(posted, keep, buffers)
    }

    /// [`Scope::token`] for a queue already touched.
    #[inline(always)]
    fn token_touched<B: Completes>(
        &'scope self,
        posted: Posted<'scope>,
        keep: Option<Ah>,
        buffers: B,
    ) -> Token<'scope, B> {
        if let Some(ah) = keep {
            self.keep_ah(ah);
        }
        Token { guard: TokenGuard { posted, _scope: PhantomData }, buffers: ManuallyDrop::new(buffers) }
    }

    #[cold]
    fn keep_ah(&self, ah: Ah) {
        lock(&self.keep).push(ah);
    }

    /// A post on `q` was refused after the provider may have queued it as request `seq`
    /// ([`Refused::kept`]): the scope's drain covers it, the address handle is kept to the
    /// scope's end, and what the request owns (`parked`: [`Completes::into_parked`], or a
    /// window) is kept with the queue until the device is done with it, as for a dropped token.
    fn keep_refused(
        &'scope self,
        q: QueueRef<'scope>,
        seq: u64,
        parked: Option<Box<dyn std::any::Any + Send>>,
        ah: Option<Ah>,
    ) {
        self.touch(q);
        if let Some(ah) = ah {
            lock(&self.keep).push(ah);
        }
        if let Some(parked) = parked {
            q.tracked().release(seq, parked);
        }
    }

    /// The [`PostError`] of a refused send request: the request back if it was certainly not
    /// posted, otherwise kept ([`Scope::keep_refused`]).
    fn refused_send<W: SendRequest>(&'scope self, qp: &'scope QpShared, refused: Refused, wr: W) -> PostError<W> {
        let Some(seq) = refused.kept else { return PostError { error: refused.error, wr: Some(wr) } };
        let ah = wr.address_handle().cloned();
        self.keep_refused(QueueRef::Send(qp), seq, wr.into_buffers(INTERNAL).into_parked(INTERNAL), ah);
        PostError { error: refused.error, wr: None }
    }

    /// The [`PostError`] of a refused bind, rebind or unbind of the window `wr` holds: `wr`
    /// back if the request was certainly not posted, otherwise the window kept with the queue
    /// ([`Scope::keep_refused`]) and nothing handed back.
    fn refused_window<W, K: crate::mw::MwType>(
        &'scope self,
        qp: &'scope QpShared,
        refused: Refused,
        wr: W,
        window: impl FnOnce(W) -> Mw<K>,
    ) -> PostError<W> {
        let Some(seq) = refused.kept else { return PostError { error: refused.error, wr: Some(wr) } };
        self.keep_refused(QueueRef::Send(qp), seq, Some(Box::new(window(wr))), None);
        PostError { error: refused.error, wr: None }
    }

    /// `ibv_post_send` of `wr` on `qp`, which must be in RTS; the opcode must be valid for the
    /// QP's transport, and a UD send must name its destination (compile-time).
    ///
    /// The memory the request uses stays borrowed until the completion is collected with
    /// [`Scope::wait`] (or the scope ends).
    ///
    /// # Errors
    /// Returns the request with a [`PostError`]:
    /// - [`Error::InvalidArgument`] for what the request's checks reject (atomic alignment,
    ///   sizes, memory or an address handle of another PD, a capability of another context,
    ///   ODP memory whose capability did not verify the operation on the QP's transport);
    /// - [`Error::TooManySges`] above the QP's `max_send_sge`;
    /// - [`Error::Unsupported`] for an atomic request, or a bind granting remote atomics, on a
    ///   device without atomic operations (`atomic_cap` `IBV_ATOMIC_NONE`);
    /// - [`Error::InlineTooLarge`] for an inline payload above the QP's `max_inline_data`;
    /// - [`Error::QueueFull`] when the send queue is full of outstanding requests;
    /// - [`Error::QpBroken`] after a forced reset or a [`Scope::flush`], until the QP is reset;
    /// - [`Error::Verb`] with `ibv_post_send` and its errno.
    ///
    /// See ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    pub fn post_send<T, S, W>(&'scope self, qp: &'scope Qp<T, S>, wr: W) -> PostResult<'scope, W::Buffers, W>
    where
        T: Transport,
        S: CanPostSend,
        W: SendWr<T> + AddressedFor<T> + 'scope,
    {
        // The scope's drain covers the queue (touched before the post: nothing is kept across
        // the provider's call for it).
        self.touch(QueueRef::Send(&qp.shared));
        // SAFETY: the memory `wr` names is borrowed for at least 'scope (`W: 'scope`), i.e.
        // until `scope` returns, and `scope` does not return before this request completed or
        // its QP was reset (`drain`, which covers the queue touched above). The views move into
        // the token, so the program cannot touch the memory through them meanwhile; shared
        // views (`LocalBuf`) keep the region immutably borrowed, exclusive ones (`LocalBufMut`)
        // exclusively.
        let seq = match unsafe { post_raw(qp, &wr, self.id) } {
            Ok(seq) => seq,
            Err(refused) => return Err(self.refused_send(&qp.shared, refused, wr)),
        };
        let keep = wr.address_handle().cloned();
        Ok(self.token_touched(Posted { q: QueueRef::Send(&qp.shared), seq }, keep, wr.into_buffers(INTERNAL)))
    }

    /// `ibv_post_send` of an inline request (`IBV_SEND_INLINE`: Send and RDMA Write only,
    /// compile-time): the payload is copied during the call, so it is borrowed only for the
    /// call, as ibv_post_send(3) allows. The token reports the completion.
    ///
    /// # Errors
    /// As for [`Scope::post_send`]; [`Error::InlineTooLarge`] when the payload exceeds the
    /// QP's `max_inline_data` (checked before the provider sees it).
    ///
    /// See ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    pub fn post_inline<T, S, W>(&'scope self, qp: &'scope Qp<T, S>, wr: W) -> PostResult<'scope, (), W>
    where
        T: Transport,
        S: CanPostSend,
        W: SendWr<T> + AddressedFor<T> + InlineWr,
    {
        // SAFETY: an inline request's only memory is its payload, which the provider copies
        // during the call ("the buffer can be reused immediately after the call returns",
        // ibv_post_send(3)); the address handle of a UD destination is kept alive by the
        // scope until the completion (`keep`).
        let seq = match unsafe { post_raw(qp, &wr, self.id) } {
            Ok(seq) => seq,
            Err(refused) => return Err(self.refused_send(&qp.shared, refused, wr)),
        };
        let keep = wr.address_handle().cloned();
        Ok(self.token(Posted { q: QueueRef::Send(&qp.shared), seq }, keep, ()))
    }

    /// `ibv_post_send` of several requests chained into one list (one call into the
    /// provider). Requests that ask to be unsignaled are signaled where needed so the send
    /// queue never fills with unsignaled requests.
    ///
    /// # Errors
    /// [`PostListError`] with the tokens of the requests that were posted (a prefix of the
    /// list) and the requests that were not, with their buffers: [`Error::InvalidArgument`]
    /// for an empty list or a request's own check failing, or another error of the checks of
    /// [`Scope::post_send`] (`Error::Unsupported` for atomics the device lacks; nothing is
    /// posted then),
    /// [`Error::QueueFull`] when the whole list does not fit (nothing is posted), or the
    /// provider refusing a request (the ones before it are posted).
    ///
    /// See ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    pub fn post_send_list<T, S, W, I>(
        &'scope self,
        qp: &'scope Qp<T, S>,
        wrs: I,
    ) -> std::result::Result<Vec<Token<'scope, W::Buffers>>, PostListError<'scope, W>>
    where
        T: Transport,
        S: CanPostSend,
        W: SendWr<T> + AddressedFor<T> + 'scope,
        I: IntoIterator<Item = W>,
    {
        let wrs: Vec<W> = wrs.into_iter().collect();
        let mut built = Vec::with_capacity(wrs.len());
        for wr in &wrs {
            match build_checked::<T, W>(&qp.shared, wr) {
                Ok(raw) => built.push(raw),
                Err(error) => {
                    // The requests built before it are not posted either.
                    wrs[..built.len()].iter().for_each(|w| w.not_posted(PostedOn(&qp.shared)));
                    return Err(PostListError { error, posted: Vec::new(), rejected: wrs });
                }
            }
        }
        let mut sges: Vec<W::Sges> = built.iter().map(|r| r.sges).collect();
        let mut raws: Vec<sys::ibv_send_wr> = built.iter().map(|r| r.wr).collect();
        // One pointer for the whole buffer, offset per request: re-borrowing `&mut sges[i]` for
        // each request would invalidate the pointers taken before it (Stacked Borrows). Each
        // element is an array of entries, so a pointer to it is a pointer to its first entry.
        let sge_base = sges.as_mut_ptr();
        for (i, raw) in raws.iter_mut().enumerate() {
            raw.sg_list = sge_base.wrapping_add(i).cast::<sys::ibv_sge>();
            raw.num_sge = built[i].num_sge;
        }
        // SAFETY: as in `post_send`, for every request: the memory is borrowed for 'scope and
        // moves into the tokens, and `scope` drains before returning. `sges` outlives the call.
        let (seqs, err) = unsafe { qp.shared.post_send_list(&mut raws, self.id) };
        let mut rest = wrs.into_iter();
        let posted: Vec<_> = seqs
            .into_iter()
            .zip(rest.by_ref())
            .map(|(seq, wr)| {
                wr.posted_on(PostedOn(&qp.shared));
                let keep = wr.address_handle().cloned();
                self.token(Posted { q: QueueRef::Send(&qp.shared), seq }, keep, wr.into_buffers(INTERNAL))
            })
            .collect();
        match err {
            None => Ok(posted),
            Some(error) => {
                let rejected: Vec<W> = rest.collect();
                rejected.iter().for_each(|w| w.not_posted(PostedOn(&qp.shared)));
                Err(PostListError { error, posted, rejected })
            }
        }
    }

    /// `ibv_modify_qp` of `qp` to ERR, so that every outstanding request completes with
    /// `IBV_WC_WR_FLUSH_ERR`, then a wait of at most `timeout` for those completions. Use it to end
    /// a scope that still has receives posted; reset the QP afterwards to use it again: until
    /// then it refuses posts ([`Error::QpBroken`]), as its type still names the state it had.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_modify_qp`; [`Error::Timeout`] if the flushes do not all
    /// arrive (the scope's own drain then takes over); a poll failure.
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn flush<T: Transport, S: QpState>(&'scope self, qp: &'scope Qp<T, S>, timeout: Duration) -> Result<()> {
        // The type still says the state the QP had: from the move on, posts are refused until
        // the program resets it (`Qp::reset` clears the mark).
        qp.shared.force_state(sys::IBV_QPS_ERR)?;
        match wait_flushed(&qp.shared, timeout, None)? {
            (0, 0) => Ok(()),
            (sq, rq) => {
                let what = format!("the flush of QP {:#x} ({sq} send, {rq} receive requests left)", qp.qp_num());
                Err(Error::Timeout { what, after: timeout })
            }
        }
    }

    /// `ibv_post_recv` of `wr` on `qp`, which must be in INIT, RTR or RTS (compile-time).
    ///
    /// # Errors
    /// Returns the request with a [`PostError`]:
    /// - [`Error::InvalidArgument`] for a buffer of another PD, a QP whose receives come from
    ///   an SRQ, or while a receive lane is open on the QP;
    /// - [`Error::TooManySges`] above the QP's `max_recv_sge`;
    /// - [`Error::InvalidArgument`] for ODP memory whose capability did not verify receives on
    ///   the QP's transport, or that starts mid-page where the device misplaces ODP packets;
    /// - [`Error::QueueFull`], [`Error::QpBroken`];
    /// - [`Error::Verb`] with `ibv_post_recv` and its errno.
    ///
    /// See ibv_post_recv(3).
    #[doc(alias = "ibv_post_recv")]
    pub fn post_recv<T, S, L>(&'scope self, qp: &'scope Qp<T, S>, wr: Recv<L>) -> PostResult<'scope, L, Recv<L>>
    where
        T: Transport,
        S: CanPostRecv,
        T: HasRecvQueue,
        L: Scatter + 'scope,
    {
        self.post_recv_on::<T, L>(&qp.shared, wr)
    }

    /// `ibv_post_recv` on the QP of a [`SendLane`](crate::lane::SendLane), as [`Scope::post_recv`]:
    /// the lane owns the send queue, the receive queue stays open to the scope (a ping-pong sends
    /// with the lane and receives here).
    ///
    /// # Errors
    /// As for [`Scope::post_recv`]; [`Error::InvalidArgument`] while a receive lane is open on
    /// the QP (it alone counts the receive queue's depth: post through it).
    ///
    /// See ibv_post_recv(3).
    #[doc(alias = "ibv_post_recv")]
    pub fn post_recv_lane<T, S, L>(
        &'scope self,
        lane: &crate::lane::SendLane<'scope, T, S>,
        wr: Recv<L>,
    ) -> PostResult<'scope, L, Recv<L>>
    where
        T: Transport,
        S: CanPostSend + CanPostRecv,
        T: HasRecvQueue,
        L: Scatter + 'scope,
    {
        self.post_recv_on::<T, L>(lane.shared(), wr)
    }

    fn post_recv_on<T: Transport, L: Scatter + 'scope>(
        &'scope self,
        qp: &'scope QpShared,
        wr: Recv<L>,
    ) -> PostResult<'scope, L, Recv<L>> {
        let mut sges = match qp.recv_sges::<T, L>(&wr.buf) {
            Ok(sges) => sges,
            Err(error) => return Err(PostError { error, wr: Some(wr) }),
        };
        let mut raw = sges.recv_wr();
        // SAFETY: as in `post_send`: the receive buffer is borrowed (or owned) for at least
        // 'scope and moves into the token; `scope` drains before returning.
        let seq = match unsafe { qp.post_recv(&mut raw, self.id) } {
            Ok(seq) => seq,
            Err(Refused { error, kept: None }) => return Err(PostError { error, wr: Some(wr) }),
            Err(Refused { error, kept: Some(seq) }) => {
                self.keep_refused(QueueRef::Recv(qp), seq, wr.buf.into_parked(INTERNAL), None);
                return Err(PostError { error, wr: None });
            }
        };
        Ok(self.token(Posted { q: QueueRef::Recv(qp), seq }, None, wr.buf))
    }

    /// `ibv_poll_cq`, bounded: waits at most `timeout` for the completion of `token`'s request,
    /// polling its CQ, and hands back the completion (whatever its status) with what the request
    /// held: its memory views, or for a window bind the bound window (success) or the window back
    /// (failure). Yields the thread after every empty poll; [`Scope::wait_spin`] busy-polls
    /// instead.
    ///
    /// # Errors
    /// [`WaitError`] with [`Error::Timeout`] (or a poll failure) and the token, which stays
    /// valid.
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    pub fn wait<B: Completes>(
        &'scope self,
        token: Token<'scope, B>,
        timeout: Duration,
    ) -> std::result::Result<(Completion, B::Output), WaitError<'scope, B>> {
        self.wait_with(token, timeout, Waiting::Yield)
    }

    /// `ibv_poll_cq`, as [`Scope::wait`] busy-polling: the thread never yields while it waits, and
    /// reads the clock only every [`SPIN_CLOCK_EVERY`] empty polls (a latency-bound loop on a
    /// dedicated core, as perftest's). Still bounded by `timeout`.
    ///
    /// # Errors
    /// As for [`Scope::wait`].
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    pub fn wait_spin<B: Completes>(
        &'scope self,
        token: Token<'scope, B>,
        timeout: Duration,
    ) -> std::result::Result<(Completion, B::Output), WaitError<'scope, B>> {
        self.wait_with(token, timeout, Waiting::Spin)
    }

    /// The wait: an unsignaled request whose later signaled one was collected is handed over
    /// inline; everything else (a completion polled meanwhile, the polling loop) is out of
    /// line, so that the inline part writes its result on one path.
    #[inline(always)]
    fn wait_with<B: Completes>(
        &'scope self,
        token: Token<'scope, B>,
        timeout: Duration,
        how: Waiting,
    ) -> std::result::Result<(Completion, B::Output), WaitError<'scope, B>> {
        let p = token.guard.posted;
        if let Some(c) = p.q.tracked().implied(p.seq) {
            return Ok(token.finish(c));
        }
        self.poll_until_done(token, timeout, how)
    }

    /// The book first: a completion another poll routed there already is handed over without
    /// a poll, so that no other future's waker, which a poll may run, can unwind through this
    /// wait and drop the token while its result is there. After each poll the book is read
    /// again before a failed poll's error is returned.
    #[inline(never)]
    fn poll_until_done<B: Completes>(
        &'scope self,
        token: Token<'scope, B>,
        timeout: Duration,
        how: Waiting,
    ) -> std::result::Result<(Completion, B::Output), WaitError<'scope, B>> {
        let p = token.guard.posted;
        if let Take::Done(c) = p.q.tracked().try_take_locked(p.seq) {
            return Ok(token.finish(c));
        }
        let mut idle = Idle::new(how, timeout);
        let mut mine = None;
        loop {
            let polled = p.q.poll_for(p.seq, &mut mine);
            if let Some(c) = mine {
                return Ok(token.finish(c));
            }
            // Before the deadline is looked at: a poll that found the time up may have recorded
            // this request's completion (a later one's, covering it).
            if let Take::Done(c) = p.q.tracked().try_take(p.seq) {
                return Ok(token.finish(c));
            }
            match polled {
                Ok(n) if idle.after_poll(n) => {
                    let what = format!("the completion of {}", p.q.describe(p.seq));
                    return Err(WaitError { error: Error::Timeout { what, after: timeout }, token });
                }
                Ok(_) => {}
                Err(error) => return Err(WaitError { error, token }),
            }
        }
    }

    /// `ibv_bind_mw`: binds the type 1 window `mw` to `mr[offset..offset + len]` with rights
    /// `access`, through `qp` (UC, RC or XRC_SEND, in RTS).
    ///
    /// Compile-time: the window is type 1 (type 2 windows are bound with a
    /// [`BindMw`](crate::wr::BindMw) work request), the region is a [`WindowRegion`]: pinned,
    /// not On-Demand Paging ([`WindowHost`](crate::mr::WindowHost)), and it has MW_BIND (and
    /// LOCAL_WRITE for a writable or atomic window), the window is not zero-based, the transport
    /// allows binds.
    /// The region stays borrowed while the window is bound. The new rkey is only available from
    /// the [`BoundMw`] that [`Scope::wait`] returns on success; a bind that completes with an
    /// error hands back an unbound window: the same one for `IBV_WC_MW_BIND_ERR`, otherwise (a
    /// flush, which may come after the bind ran) a new one of the same PD, the window deallocated.
    ///
    /// # Errors
    /// Returns the window with a [`PostError`]: [`Error::InvalidArgument`] for an empty range,
    /// a range outside the region or a window of another PD; [`Error::Unsupported`] for
    /// remote atomic rights on a device without atomic operations; [`Error::QueueFull`];
    /// [`Error::QpBroken`] after a forced reset or a flush; [`Error::Verb`] with `ibv_bind_mw` and
    /// its errno.
    ///
    /// See ibv_bind_mw(3).
    #[doc(alias = "ibv_bind_mw")]
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw<'m, T, S, K, H, R>(
        &'scope self,
        qp: &'scope Qp<T, S>,
        mw: Mw<K>,
        mr: &'m H,
        offset: u64,
        len: u64,
        access: R,
    ) -> PostResult<'scope, PendingBind<'m, K, R>, Mw<K>>
    where
        T: SupportsBindMw,
        S: CanPostSend,
        K: BoundByVerb,
        H: WindowRegion + ?Sized,
        R: WindowOn<H::Access> + VirtuallyAddressed,
        'm: 'scope,
    {
        self.post_bind(qp, mw, mr.window_region(), offset, len, access, sys::IBV_SEND_SIGNALED)
    }

    /// `ibv_bind_mw` with `IBV_SEND_FENCE`: [`Scope::bind_mw`], fenced (RC only, compile-time): the
    /// bind waits for the RDMA READs and atomics that `qp` itself posted before it to complete. It
    /// does not wait for the peer's operations through the window (a READ the peer issues is the
    /// peer's request, not this QP's).
    ///
    /// # Errors
    /// As for [`Scope::bind_mw`].
    ///
    /// See ibv_bind_mw(3) (`IBV_SEND_FENCE` in `send_flags`), ibv_post_send(3).
    #[doc(alias = "ibv_bind_mw")]
    #[doc(alias = "IBV_SEND_FENCE")]
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw_fenced<'m, T, S, K, H, R>(
        &'scope self,
        qp: &'scope Qp<T, S>,
        mw: Mw<K>,
        mr: &'m H,
        offset: u64,
        len: u64,
        access: R,
    ) -> PostResult<'scope, PendingBind<'m, K, R>, Mw<K>>
    where
        T: SupportsBindMw + SupportsFence,
        S: CanPostSend,
        K: BoundByVerb,
        H: WindowRegion + ?Sized,
        R: WindowOn<H::Access> + VirtuallyAddressed,
        'm: 'scope,
    {
        self.post_bind(qp, mw, mr.window_region(), offset, len, access, sys::IBV_SEND_SIGNALED | sys::IBV_SEND_FENCE)
    }

    /// The bind of [`Scope::bind_mw`] and [`Scope::bind_mw_fenced`], with `send_flags`.
    #[allow(clippy::too_many_arguments)]
    fn post_bind<'m, T, S, K, MA, R>(
        &'scope self,
        qp: &'scope Qp<T, S>,
        mw: Mw<K>,
        mr: &'m Mr<MA>,
        offset: u64,
        len: u64,
        access: R,
        send_flags: u32,
    ) -> PostResult<'scope, PendingBind<'m, K, R>, Mw<K>>
    where
        T: SupportsBindMw,
        S: CanPostSend,
        K: BoundByVerb,
        MA: AccessSet,
        R: WindowOn<MA> + VirtuallyAddressed,
        'm: 'scope,
    {
        let _ = access;
        let mut mw = mw;
        // SAFETY: the window is owned here and moves into the token (or is kept with the queue
        // when the provider may have queued the bind); the region is borrowed for 'm, which
        // outlives 'scope, and `scope` drains before returning.
        let posted = match unsafe { self.post_bind_raw::<T, S, K, MA, R>(qp, &mut mw, mr, offset, len, send_flags) } {
            Ok(posted) => posted,
            Err(refused) => return Err(self.refused_window(&qp.shared, refused, mw, |mw| mw)),
        };
        let pending = PendingBind {
            watch: InvalidationWatch::of(&mw, posted.new_rkey),
            mw,
            mr: mr.raw(),
            old_rkey: posted.old_rkey,
            new_rkey: posted.new_rkey,
            addr: posted.addr,
            len,
            _region: RegionBorrow::new(),
            _rights: PhantomData,
        };
        Ok(self.token(Posted { q: QueueRef::Send(&qp.shared), seq: posted.seq }, None, pending))
    }

    /// `ibv_bind_mw` of the type 1 window `mw` to `mr[offset..offset + len]` with `send_flags`,
    /// after the checks every bind makes (range, PD, atomics). On a refusal the window's rkey is
    /// what it was; on success `mw` holds the new one.
    ///
    /// # Safety
    /// The window and the region must stay valid until the bind completes or the QP is reset:
    /// the caller moves the window into the token (or keeps it with the queue) and borrows the
    /// region for the scope.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_bind_raw<T, S, K, MA, R>(
        &'scope self,
        qp: &'scope Qp<T, S>,
        mw: &mut Mw<K>,
        mr: &Mr<MA>,
        offset: u64,
        len: u64,
        send_flags: u32,
    ) -> std::result::Result<BindPosted, Refused>
    where
        T: SupportsBindMw,
        S: CanPostSend,
        K: BoundByVerb,
        MA: AccessSet,
        R: WindowOn<MA> + VirtuallyAddressed,
    {
        check_window_range("ibv_bind_mw", offset, len, mr.len() as u64)?;
        if !mw.same_pd(mr.pd()) {
            return Err(Error::invalid(
                "ibv_bind_mw",
                "the window and the region belong to different protection domains",
            )
            .into());
        }
        qp.shared.check_pd("ibv_bind_mw", "the window", mw.pd_id())?;
        qp.shared.check_atomics(crate::Verb::BindMw, R::BITS & sys::IBV_ACCESS_REMOTE_ATOMIC != 0)?;
        let addr = mr.addr() + offset;
        let old_rkey = mw.raw_rkey();
        let mut bind = sys::ibv_mw_bind {
            wr_id: 0,
            send_flags,
            bind_info: sys::ibv_mw_bind_info { mr: mr.as_ptr(), addr, length: len, mw_access_flags: R::BITS },
        };
        // SAFETY: the window is valid (owned by the caller) and the region alive; both stay so
        // until the bind completes, per this function's contract.
        match unsafe { qp.shared.bind_mw(mw.as_ptr(), &mut bind, self.id) } {
            Ok(seq) => Ok(BindPosted { seq, old_rkey, new_rkey: mw.raw_rkey(), addr }),
            Err(refused) => {
                mw.set_raw_rkey(old_rkey);
                Err(refused)
            }
        }
    }

    /// `ibv_bind_mw` of the bound type 1 window `bound` to `mr[offset..offset + len]` with
    /// rights `access`, without unbinding it first: the new binding replaces the old one (its
    /// rkey stops working) when the bind completes.
    ///
    /// Compile-time, as for [`Scope::bind_mw`]. Both regions stay borrowed for the scope: the
    /// old one because a peer may use the old rkey until the bind completes, and because a
    /// failed bind hands the window back as bound to it. On success [`Scope::wait`] hands
    /// back the window bound to the new range, with the new rkey; on failure the window as it
    /// was (its old rkey restored; whether a failed bind left the old binding usable is the
    /// device's, so the old region stays borrowed by it until an unbind or its drop). A failed
    /// bind that ran on the device all the same (a flushed one may have) leaves the window on
    /// the new range, whose borrow ends with the scope: as after a failed [`Scope::bind_mw`],
    /// deregistering that region then fails while the window lives, and the region's memory is
    /// leaked rather than freed (borrowed memory: the process aborts). Unbind or drop the
    /// window first.
    ///
    /// # Errors
    /// Returns the bound window with a [`PostError`], as for [`Scope::bind_mw`].
    ///
    /// See ibv_bind_mw(3).
    #[doc(alias = "ibv_bind_mw")]
    #[allow(clippy::too_many_arguments)]
    pub fn rebind_mw<'o, 'm, T, S, K, R0, H, R>(
        &'scope self,
        qp: &'scope Qp<T, S>,
        bound: BoundMw<'o, K, R0>,
        mr: &'m H,
        offset: u64,
        len: u64,
        access: R,
    ) -> PostResult<'scope, PendingRebind<'o, 'm, K, R0, R>, BoundMw<'o, K, R0>>
    where
        T: SupportsBindMw,
        S: CanPostSend,
        K: BoundByVerb,
        R0: WindowRights,
        H: WindowRegion + ?Sized,
        R: WindowOn<H::Access> + VirtuallyAddressed,
        'o: 'scope,
        'm: 'scope,
    {
        let _ = access;
        let mr = mr.window_region();
        let mut bound = bound;
        // SAFETY: the window is owned by `bound`, which moves into the token (or its window is
        // kept with the queue); both regions are borrowed for 'o and 'm, which outlive 'scope,
        // and `scope` drains before returning.
        let posted = match unsafe {
            self.post_bind_raw::<T, S, K, H::Access, R>(qp, bound.mw_mut(), mr, offset, len, sys::IBV_SEND_SIGNALED)
        } {
            Ok(posted) => posted,
            Err(refused) => return Err(self.refused_window(&qp.shared, refused, bound, BoundMw::into_mw)),
        };
        let pending = PendingRebind::new(bound, mr.raw(), posted.new_rkey, posted.addr, len);
        Ok(self.token(Posted { q: QueueRef::Send(&qp.shared), seq: posted.seq }, None, pending))
    }

    /// `ibv_bind_mw` with a zero length: unbinds the type 1 window `bound` (its rkey stops
    /// working). On success [`Scope::wait`] hands the window back unbound; on failure, still
    /// bound.
    ///
    /// # Errors
    /// Returns the bound window with a [`PostError`]: [`Error::QueueFull`], [`Error::Verb`]
    /// with `ibv_bind_mw` and its errno.
    ///
    /// See ibv_bind_mw(3).
    #[doc(alias = "ibv_bind_mw")]
    pub fn unbind_mw<'m, T, S, K, R>(
        &'scope self,
        qp: &'scope Qp<T, S>,
        bound: BoundMw<'m, K, R>,
    ) -> PostResult<'scope, PendingUnbind<'m, K, R>, BoundMw<'m, K, R>>
    where
        T: SupportsBindMw,
        S: CanPostSend,
        K: UnboundByVerb,
        R: WindowRights,
        'm: 'scope,
    {
        if let Err(error) = qp.shared.check_pd("ibv_bind_mw", "the window", bound.mw().pd_id()) {
            return Err(PostError { error, wr: Some(bound) });
        }
        // A zero-length bind ignores the region, but rdma-core 44's rxe provider dereferences
        // `bind_info.mr` unconditionally: name the region the window is bound to.
        let mut bind = sys::ibv_mw_bind {
            wr_id: 0,
            send_flags: sys::IBV_SEND_SIGNALED,
            bind_info: sys::ibv_mw_bind_info { mr: bound.region_ptr(), addr: 0, length: 0, mw_access_flags: 0 },
        };
        let mut bound = bound;
        // SAFETY: the window is owned by `bound`, which moves into the token; the region it names
        // is borrowed by `bound` for 'm, which outlives 'scope.
        let seq = match unsafe { qp.shared.bind_mw(bound.mw().as_ptr(), &mut bind, self.id) } {
            Ok(seq) => seq,
            Err(refused) => {
                // As a refused bind: the window's rkey is what it was (whatever the provider did).
                bound.restore_rkey();
                return Err(self.refused_window(&qp.shared, refused, bound, BoundMw::into_mw));
            }
        };
        let new_rkey = Some(bound.mw().raw_rkey());
        Ok(self.token(Posted { q: QueueRef::Send(&qp.shared), seq }, None, PendingUnbind { bound, new_rkey }))
    }

    /// `ibv_post_send` of a window's advertisement: sends the window of a bind still in flight to
    /// the peer, the one way ibv_bind_mw(3) NOTES allow before the bind's completion: "a send after
    /// a bind request on the same QP \[is\] always ordered". Posts an inline SEND of a
    /// [`WindowAdvert`](crate::mw::WindowAdvert) (21 bytes; the QP needs `max_inline_data >= 21`)
    /// on `qp`, which must be the QP the bind was posted on.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `qp` is not the QP of the bind; [`Error::InlineTooLarge`];
    /// [`Error::QueueFull`]; [`Error::Verb`] with `ibv_post_send`.
    ///
    /// See ibv_bind_mw(3), ibv_post_send(3).
    #[doc(alias = "ibv_post_send")]
    pub fn advertise_window<T, S, B>(
        &'scope self,
        qp: &'scope Qp<T, S>,
        bind: &Token<'scope, B>,
    ) -> Result<Token<'scope, ()>>
    where
        T: AdvertisesWindows,
        S: CanPostSend,
        B: BindInFlight,
    {
        if !matches!(bind.guard.posted.q, QueueRef::Send(q) if std::ptr::eq(q, &*qp.shared)) {
            return Err(Error::invalid(
                "ibv_post_send",
                "a window may be advertised before its bind completed only on the QP that posted the bind (ibv_bind_mw(3) NOTES)",
            ));
        }
        let bytes = bind.buffers.advert().encode();
        let wr = InlineSend::new(&bytes);
        // SAFETY: an inline send's payload is copied during the call.
        let seq = match unsafe { post_raw(qp, &wr, self.id) } {
            Ok(seq) => seq,
            Err(refused) => return Err(self.refused_send(&qp.shared, refused, wr).error),
        };
        Ok(self.token(Posted { q: QueueRef::Send(&qp.shared), seq }, None, ()))
    }

    /// Waits for every request the scope posted (or resets their QPs), then lets go of what it
    /// kept. Nothing it polls can cut it short: a panic out of a poll (a future's waker, or a
    /// parked buffer's `Drop`, run by the routing) is caught, the drain goes on where it was,
    /// and the first such panic comes back with the result, to be resumed once the drain is
    /// done.
    fn drain(&self) -> (Result<()>, Option<Box<dyn std::any::Any + Send>>) {
        let mut state = DrainState {
            deadline: deadline_after(Instant::now(), self.drain_timeout),
            broken: None,
            forced: Vec::new(),
        };
        let mut panic = None;
        // Each retry goes on with the queues not finished yet; each panic used up what raised
        // it (a waker is woken once, a parked buffer dropped once).
        while let Err(p) = catch_unwind(AssertUnwindSafe(|| self.drain_touched(&mut state))) {
            crate::queue::keep_first_panic(&mut panic, p);
        }
        lock(&self.keep).clear();
        let result = match state.broken {
            Some(e) => Err(e),
            None => Ok(()),
        };
        (result, panic)
    }

    /// Drains the touched queues one by one, each taken off the list only once it is done.
    fn drain_touched(&self, state: &mut DrainState) {
        loop {
            let Some(&q) = lock(&self.touched).last() else { return };
            // Only QP queues are posted in a scope (shared receive queues take owned buffers).
            if let Some(qp) = q.qp() {
                self.drain_queue(q, qp, state);
            }
            lock(&self.touched).pop();
        }
    }

    fn drain_queue(&self, q: QueueRef<'scope>, qp: &QpShared, state: &mut DrainState) {
        let mine = q.tracked().owned_by(self.id);
        for &seq in &mine {
            if state.is_forced(qp) {
                break;
            }
            if !wait_until_done(&Posted { q, seq }, state.deadline) {
                // Nothing will complete it in time: flush, and if even that fails, reset.
                state.force(qp);
            }
        }
        if !state.is_forced(qp) {
            wait_graves_dropped(q, state.deadline);
        }
        for seq in mine {
            q.tracked().abandon(seq);
        }
        if !state.is_forced(qp) && !wait_lane_drained(q, state.deadline) {
            state.force(qp);
        }
        if let QueueRef::Recv(_) = q {
            // A receive lane of this scope, even one forgotten (`mem::forget`: its drop, which
            // closes it, never ran), cannot be used after the scope (it borrows the QP for
            // 'scope, exclusively: no other scope posts on the queue while it is open), so
            // scope and owned receives may be posted again.
            q.tracked().lane.set_open(false);
        }
    }
}

/// Where a scope's drain stands: kept across a panic out of one of its polls.
struct DrainState {
    deadline: Instant,
    /// The error of the first QP that had to be forced.
    broken: Option<Error>,
    /// The QPs forced to ERR and RESET (`force_quiesce`) to the end.
    forced: Vec<*const QpShared>,
}

impl DrainState {
    fn is_forced(&self, qp: &QpShared) -> bool {
        self.forced.contains(&(qp as *const QpShared))
    }

    /// Forces `qp` to ERR and RESET; it counts as forced only once that returned (a panic
    /// out of its flush wait forces it again on the retry).
    fn force(&mut self, qp: &QpShared) {
        let e = force_quiesce(qp);
        self.forced.push(qp);
        self.broken.get_or_insert(e);
    }
}

/// How a wait spends an empty poll: yield the thread, or poll again at once.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    Yield,
    Spin,
}

/// A busy-polling wait reads the clock once every this many empty polls.
pub const SPIN_CLOCK_EVERY: u32 = 1024;

/// Any wait reads the clock once every this many polls that found completions without ending
/// it (a CQ other queues keep busy never comes back empty).
pub(crate) const BUSY_CLOCK_EVERY: u32 = 64;

/// `from + d`, saturating: a timeout too long to represent (e.g. `Duration::MAX`) waits about
/// as long as the clock can count (a deadline decades away), instead of panicking.
pub(crate) fn deadline_after(from: Instant, d: Duration) -> Instant {
    from.checked_add(d).or_else(|| from.checked_add(Duration::from_secs(u64::from(u32::MAX)))).unwrap_or(from)
}

/// The polls of one bounded wait: reads the clock once a poll came back empty (and, spinning,
/// only every [`SPIN_CLOCK_EVERY`] of them), yields the thread unless spinning, and reads it
/// every [`BUSY_CLOCK_EVERY`] polls that found completions without ending the wait, so that a
/// CQ kept busy by other queues cannot hold a wait past its deadline. Every bounded poll loop
/// of the library goes through it (the waits, the drain, the flushes).
pub(crate) struct Idle {
    how: Waiting,
    timeout: Duration,
    deadline: Option<Instant>,
    empty: u32,
    busy: u32,
}

impl Idle {
    pub(crate) fn new(how: Waiting, timeout: Duration) -> Self {
        Idle { how, timeout, deadline: None, empty: 0, busy: 0 }
    }

    /// A yielding wait that runs out at `deadline`, fixed by the caller.
    pub(crate) fn until(deadline: Instant) -> Self {
        Idle { how: Waiting::Yield, timeout: Duration::ZERO, deadline: Some(deadline), empty: 0, busy: 0 }
    }

    /// After a poll that found completions, none of which ended the wait: whether the wait has
    /// run out of time (the clock read every [`BUSY_CLOCK_EVERY`] such polls; the deadline
    /// counts from the first read, as in [`Idle::expired`]).
    #[inline(always)]
    pub(crate) fn busy(&mut self) -> bool {
        self.busy = self.busy.wrapping_add(1);
        self.busy % BUSY_CLOCK_EVERY == 0 && self.past_deadline()
    }

    /// After a poll that found `n` completions without ending the wait: [`Idle::expired`] if
    /// it found none, [`Idle::busy`] otherwise.
    #[inline(always)]
    pub(crate) fn after_poll(&mut self, n: usize) -> bool {
        if n == 0 {
            self.expired()
        } else {
            self.busy()
        }
    }

    #[cold]
    #[inline(never)]
    fn past_deadline(&mut self) -> bool {
        let now = Instant::now();
        now >= *self.deadline.get_or_insert(deadline_after(now, self.timeout))
    }

    /// After an empty poll: whether the wait has run out of time. The deadline counts from the
    /// first clock read: the first empty poll, or spinning, the first [`SPIN_CLOCK_EVERY`]-th
    /// (a spinning wait that ends sooner reads no clock at all, as a C busy-poll loop).
    pub(crate) fn expired(&mut self) -> bool {
        self.empty = self.empty.wrapping_add(1);
        if self.how == Waiting::Spin && self.empty % SPIN_CLOCK_EVERY != 0 {
            return false;
        }
        let now = Instant::now();
        if now >= *self.deadline.get_or_insert(deadline_after(now, self.timeout)) {
            return true;
        }
        if self.how == Waiting::Yield {
            std::thread::yield_now();
        }
        false
    }
}

/// Builds and posts `wr` on `qp` for the scope `owner` (0: an owned token); returns its
/// sequence number. The caller keeps the request's address handle alive until it completes.
///
/// # Safety
/// The memory `wr` names (other than an inline payload) must stay valid and untouched by the
/// program until the request completes or the QP is reset, and the objects it points at (a UD
/// destination's address handle; a type 2 bind's window and region) must stay alive until
/// then.
#[inline(always)]
pub(crate) unsafe fn post_raw<T: Transport, S: QpState, W: SendRequest>(
    qp: &Qp<T, S>,
    wr: &W,
    owner: u64,
) -> std::result::Result<u64, Refused> {
    let mut raw = RawSendWr::new();
    build_into::<T, W>(&qp.shared, wr, &mut raw)?;
    raw.link_sges();
    // SAFETY: the caller guarantees the memory; `raw` (with its entries) outlives the call; the
    // address handle in `raw` is alive (borrowed by `wr`).
    let posted = unsafe { qp.shared.post_send(&mut raw.wr, owner) };
    match posted {
        Ok(_) | Err(Refused { kept: Some(_), .. }) => wr.posted_on(PostedOn(&qp.shared)),
        Err(Refused { kept: None, .. }) => wr.not_posted(PostedOn(&qp.shared)),
    }
    posted
}

/// Builds `wr` for `qp`, with every check that needs no device (inline length and the number
/// of scatter/gather entries included).
pub(crate) fn build_checked<T: Transport, W: SendRequest>(qp: &QpShared, wr: &W) -> Result<RawSendWr<W::Sges>> {
    let mut raw = RawSendWr::new();
    build_into::<T, W>(qp, wr, &mut raw)?;
    Ok(raw)
}

/// [`build_checked`] into `raw` (a new [`RawSendWr`]), in place: the data path's form.
#[inline(always)]
pub(crate) fn build_into<T: Transport, W: SendRequest>(
    qp: &QpShared,
    wr: &W,
    raw: &mut RawSendWr<W::Sges>,
) -> Result<()> {
    if let Some(len) = wr.inline_len() {
        let max = qp.caps().max_inline_data;
        if len > max as usize {
            return Err(Error::InlineTooLarge { qp_num: qp.qp_num(), len, max });
        }
    }
    // Constants of the request's type, as the atomics' below. A SEND_WITH_INV claims a binding
    // of this process's windows only when its peer is on the QP's own device (`claim`).
    if W::LOCAL_INV || (W::SEND_INV && qp.peer_on_device()) {
        // Every receive completion the device has written for the QP is decoded: among them,
        // a SEND_WITH_INV's invalidation of the window (`mw::note_remote_invalidation`), which
        // the claim below then finds.
        qp.recv_cq.take_all()?;
    }
    wr.build(raw)?;
    // A constant of the request's type: no instruction for requests without atomics.
    if W::ATOMICS {
        qp.check_atomics(crate::Verb::PostSend, true)?;
    }
    crate::sgl::check_count("send", qp.qp_num(), raw.num_sge, qp.caps().max_send_sge)?;
    if let Some(pd) = raw.pd {
        qp.check_pd("ibv_post_send", "the request's memory (or window)", pd)?;
    }
    if let Some(ah) = wr.address_handle() {
        qp.check_pd("ibv_post_send", "the address handle", ah.pd_id())?;
    }
    // Nothing to compare, and no instruction, for a request that carries no capability.
    if !wr.capabilities_of(qp.context_id()) {
        return Err(foreign_capability(qp));
    }
    raw.odp.check(T::QP_TYPE, T::NAME, raw.odp_op)?;
    // Constants of the request's type. The last check: it claims the window binding the
    // request invalidates, which a request certainly not posted gives back (`not_posted`).
    if W::SEND_INV || W::LOCAL_INV {
        wr.claim(PostedOn(qp))?;
    }
    Ok(())
}

/// A request's `IpCsum` or `TsoCap` was reported by another device context than `qp`'s.
#[cold]
#[inline(never)]
fn foreign_capability(qp: &QpShared) -> Error {
    Error::invalid(
        "ibv_post_send",
        format!(
            "the request's capability (IpCsum or TsoCap) was reported by another device context than QP {:#x}'s",
            qp.qp_num()
        ),
    )
}

/// Polls until `p` completed or `deadline`; true if it completed.
fn wait_until_done(p: &Posted<'_>, deadline: Instant) -> bool {
    let q = p.q.tracked();
    // An unsignaled request at the tail of the send queue, or a request the provider refused
    // after it may have queued it, never completes on its own. Only the scope's own request
    // counts: another owner's uncovered tail (an owned request, another scope's run) is
    // theirs, and a request before it completes all the same.
    let uncovered = || q.is_uncovered(p.seq);
    drain_until(p.q, deadline, || q.is_pending(p.seq), uncovered)
}

/// Waits until what dropped tokens held is dropped for every request of `q` that completed:
/// the poll that completed one drops it just after, maybe on another thread, and the scope must
/// not return before (the program may deregister a region a parked window is bound to next:
/// `ibv_dereg_mr` would fail while the window is allocated). That covers the scope's requests
/// whichever thread polled them, those it waited for and those completed before the drain
/// looked at the queue (no longer the scope's to find: an abandoned request's completion is not
/// stored). It looks at least once, which waits out a drop in progress, then until `deadline`.
/// Nothing to wait for without parked buffers, the usual case.
fn wait_graves_dropped(q: QueueRef<'_>, deadline: Instant) {
    let q = q.tracked();
    while q.holds_settled_grave() && Instant::now() < deadline {
        std::thread::yield_now();
    }
}

/// Polls until the lane of `q` (send or receive) has nothing outstanding, or `deadline`; true
/// if so.
fn wait_lane_drained(q: QueueRef<'_>, deadline: Instant) -> bool {
    let lane = &q.tracked().lane;
    // Unsignaled requests at the tail of a send lane never complete on their own, nor does a
    // receive the provider refused without naming it, last of a receive lane.
    let is_send = matches!(q, QueueRef::Send(_));
    let uncovered = || if is_send { lane.has_uncovered_tail() } else { lane.has_refused_tail() };
    drain_until(q, deadline, || lane.outstanding() != 0, uncovered)
}

/// Polls `q` while `pending()`, until `deadline`; true once nothing is pending. While
/// `uncovered()` (what is pending will never complete by itself), polls only until a poll
/// takes none of the queue's completions (the CQ empty, or busy with other queues').
fn drain_until(q: QueueRef<'_>, deadline: Instant, pending: impl Fn() -> bool, uncovered: impl Fn() -> bool) -> bool {
    let mut idle = Idle::until(deadline);
    loop {
        if !pending() {
            return true;
        }
        if uncovered() {
            // Polled while the polls take this queue's completions: one that took none (the
            // CQ empty, or busy with other queues') ends the wait.
            let before = q.tracked().outstanding();
            if q.poll().unwrap_or(0) == 0 || q.tracked().outstanding() == before || idle.busy() {
                return !pending();
            }
            continue;
        }
        match q.poll() {
            Ok(n) if idle.after_poll(n) => return false,
            Err(_) if idle.expired() => return false,
            _ => {}
        }
    }
}

/// After `qp` was moved to ERR: polls both its queues until nothing is outstanding, or
/// `timeout` ran out. Returns what is left: the numbers of send and receive requests still
/// outstanding.
///
/// With `tail_grace`, gives up sooner: once that long has passed since the wait began, at a
/// poll that took none of the QP's completions and leaves only an unsignaled send tail
/// outstanding. A flush covers only the
/// requests the device had not executed when the QP entered ERR, and it comes at once; a tail
/// it had executed (no error: an error would have completed) never completes.
///
/// # Errors
/// A failed poll.
fn wait_flushed(qp: &QpShared, timeout: Duration, tail_grace: Option<Duration>) -> Result<(u32, u32)> {
    let start = Instant::now();
    let mut idle = Idle::until(deadline_after(start, timeout));
    loop {
        let (sq, rq) = qp.outstanding();
        if sq == 0 && rq == 0 {
            return Ok((0, 0));
        }
        // A poll that took none of this QP's completions is an empty one here: on a CQ that
        // other queues keep busy, the tail's grace still ends the wait.
        if QueueRef::Send(qp).poll()? + QueueRef::Recv(qp).poll()? != 0 && qp.outstanding() != (sq, rq) {
            if idle.busy() {
                // What the last poll left (it may have taken the last of them).
                return Ok(qp.outstanding());
            }
            continue;
        }
        // Without a grace (`Scope::flush`), the tail is not even looked at.
        let tail_done = |grace| {
            start.elapsed() >= grace
                && (rq == 0 || qp.rq.has_uncovered_tail())
                && (sq == 0 || qp.sq.has_uncovered_tail())
        };
        if tail_grace.is_some_and(tail_done) || idle.expired() {
            return Ok((sq, rq));
        }
    }
}

/// Moves `qp` to ERR and waits for the flushes; if they do not all arrive, moves it to RESET,
/// after which the device no longer accesses any buffer of the QP. Returns the error to report.
fn force_quiesce(qp: &QpShared) -> Error {
    let _ = qp.force_state(sys::IBV_QPS_ERR);
    // Whatever the outcome (a poll failure included), RESET follows: it alone guarantees that
    // the device is done with the QP's buffers.
    let _ = wait_flushed(qp, FLUSH_TIMEOUT, Some(TAIL_GRACE));
    if let Err(e) = qp.force_state(sys::IBV_QPS_RESET) {
        // The device may still be using memory that is about to be released to the program:
        // the only sound continuation is to stop the process.
        crate::error::abort_process(|| {
            format!("cannot reset QP {:#x} to reclaim in-flight buffers ({e}); aborting", qp.qp_num())
        });
    }
    Error::QpBroken { qp_num: qp.qp_num() }
}

impl<'m, K: MwType, R: WindowRights> Token<'_, PendingBind<'m, K, R>> {
    /// Not available: the rkey of a new binding is only obtainable from the [`BoundMw`] that a
    /// successful bind completion yields ([`Scope::wait`]), or sent to the peer on the same QP
    /// with [`Scope::advertise_window`]. This method exists to say so at compile time.
    pub fn rkey(&self) -> u32
    where
        PendingBind<'m, K, R>: BindCompleted,
    {
        self.buffers.advert().rkey
    }
}

impl<'o, 'm, K: MwType, R0: WindowRights, R: WindowRights> Token<'_, PendingRebind<'o, 'm, K, R0, R>> {
    /// Not available, as for a bind ([`Token::rkey`](Token#method.rkey) of a
    /// [`PendingBind`]): the new rkey comes with the [`BoundMw`] a successful completion
    /// yields, or goes to the peer with [`Scope::advertise_window`].
    pub fn rkey(&self) -> u32
    where
        PendingRebind<'o, 'm, K, R0, R>: BindCompleted,
    {
        self.buffers.advert().rkey
    }
}

impl<B: Completes> Token<'_, B> {
    /// The request completed with `c`: the buffers come back, and the token is gone without
    /// its drop (nothing is left to give up).
    #[inline(always)]
    fn finish(self, c: Completion) -> (Completion, B::Output) {
        let mut token = ManuallyDrop::new(self);
        // SAFETY: the buffers are taken once: the token is consumed here and never dropped
        // (`ManuallyDrop`), so `Token::drop`, the only other place that takes them, never
        // runs for it. The guard holds nothing to release (a completed request's number).
        let buffers = unsafe { ManuallyDrop::take(&mut token.buffers) };
        let output = buffers.complete(&c, INTERNAL);
        (c, output)
    }
}

impl<B: Completes> Drop for Token<'_, B> {
    fn drop(&mut self) {
        // SAFETY: a token being dropped was not consumed (`Token::finish` never drops it), so
        // the buffers were never taken; this is the only other place that takes them.
        let buffers = unsafe { ManuallyDrop::take(&mut self.buffers) };
        // Borrowed views stay borrowed until the scope ends (the scope drains first); what the
        // token owns goes back only through the queue's one release rule. The guard's drop
        // (after this) abandons the completion.
        if let Some(parked) = buffers.into_parked(INTERNAL) {
            let p = self.guard.posted;
            p.q.tracked().release(p.seq, parked);
        }
    }
}

impl Drop for TokenGuard<'_> {
    fn drop(&mut self) {
        // Nobody will collect this completion: a result kept for it is dropped now, and one
        // still to come is not kept. (The scope still waits for the request at its end: its
        // drain finds the outstanding requests of the scope whether given up or not.)
        let p = self.posted;
        p.q.tracked().abandon(p.seq);
    }
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// Requests outstanding on the (send, receive) queues.
    pub fn outstanding(&self) -> (u32, u32) {
        self.shared.outstanding()
    }
}

/// What a token holds, and what it becomes once the request completed. Sealed.
pub trait Completes: sealed::Sealed {
    /// What [`Scope::wait`] hands back with the completion.
    type Output;
    /// Turns the held value into the output, given the completion. Only the library calls
    /// it, with the request's real completion (`Internal` cannot be made outside it): a
    /// program that could call it would forge a window's bind or unbind.
    #[doc(hidden)]
    fn complete(self, c: &Completion, _: sealed::Internal) -> Self::Output;
    /// What must outlive the request when its token is dropped before the completion: owned
    /// memory (a [`Chunk`]) and windows, whose drop would deregister or deallocate them under
    /// the device. `None` for borrowed views and nothing, which free nothing (their borrow
    /// lasts to the scope's end).
    #[doc(hidden)]
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>>;
}

pub(crate) mod sealed {
    sealed_trait!();
    /// The proof that a caller of [`Completes`](super::Completes)' methods is the library:
    /// public in a private module, with a private field, so no program can name or make it.
    pub struct Internal(pub(super) ());
}

/// The library's [`sealed::Internal`], for the calls of [`Completes`]' methods.
pub(crate) const INTERNAL: sealed::Internal = sealed::Internal(());

macro_rules! completes_as_itself {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Completes for $t {
            type Output = Self;
            fn complete(self, _: &Completion, _: sealed::Internal) -> Self {
                self
            }
            fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
                None
            }
        }
    )*};
}
completes_as_itself!((), LocalBuf<'_>, LocalBufMut<'_>, crate::dmabuf::DeviceBuf<'_>, crate::dmabuf::DeviceBufMut<'_>);

/// A buffer whose drop panics, as a program's own buffer type may (`StableBuffer` inside a
/// chunk): the host tests of a release in the middle of a poll's routing.
#[cfg(test)]
pub(crate) struct PanickingDrop;
#[cfg(test)]
impl Drop for PanickingDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("hostile buffer: its drop panics");
        }
    }
}
#[cfg(test)]
completes_as_itself!(PanickingDrop);

impl<A: AccessSet, K: crate::mr::MrKind> sealed::Sealed for Chunk<A, K> {}
impl<A: AccessSet, K: crate::mr::MrKind> Completes for Chunk<A, K> {
    type Output = Self;
    fn complete(self, _: &Completion, _: sealed::Internal) -> Self {
        self
    }
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        Some(Box::new(self))
    }
}

/// The parts of a scatter/gather list that must outlive its request, as one value (`None` when
/// no part owns anything: borrowed views).
fn park_all(
    parts: impl IntoIterator<Item = Option<Box<dyn std::any::Any + Send>>>,
) -> Option<Box<dyn std::any::Any + Send>> {
    let parked: Vec<_> = parts.into_iter().flatten().collect();
    (!parked.is_empty()).then(|| Box::new(parked) as Box<dyn std::any::Any + Send>)
}

impl<L: LocalSource, const N: usize> sealed::Sealed for [L; N] {}
/// A scatter/gather list hands back its entries, each as itself.
impl<L: LocalSource, const N: usize> Completes for [L; N] {
    type Output = [L::Output; N];
    fn complete(self, c: &Completion, _: sealed::Internal) -> Self::Output {
        self.map(|l| l.complete(c, INTERNAL))
    }
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        park_all(self.map(|l| l.into_parked(INTERNAL)))
    }
}

macro_rules! completes_tuple {
    ($($t:ident . $i:tt),*) => {
        impl<$($t: LocalSource),*> sealed::Sealed for ($($t,)*) {}
        /// A scatter/gather list hands back its entries, each as itself.
        impl<$($t: LocalSource),*> Completes for ($($t,)*) {
            type Output = ($($t::Output,)*);
            fn complete(self, c: &Completion, _: sealed::Internal) -> Self::Output {
                ($(self.$i.complete(c, INTERNAL),)*)
            }
            fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
                park_all([$(self.$i.into_parked(INTERNAL)),*])
            }
        }
    };
}
completes_tuple!(A.0, B.1);
completes_tuple!(A.0, B.1, C.2);
completes_tuple!(A.0, B.1, C.2, D.3);

impl<K: MwType, R> sealed::Sealed for PendingBind<'_, K, R> {}
impl<'m, K: MwType, R: WindowRights> Completes for PendingBind<'m, K, R> {
    type Output = std::result::Result<BoundMw<'m, K, R>, Mw<K>>;
    fn complete(self, c: &Completion, _: sealed::Internal) -> Self::Output {
        self.finish(c)
    }
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        // The region stays borrowed to the scope's end; the window must not be deallocated
        // while its bind may be in flight.
        Some(Box::new(self.mw))
    }
}

impl<K: MwType, R0, R> sealed::Sealed for PendingRebind<'_, '_, K, R0, R> {}
impl<'o, 'm, K: MwType, R0: WindowRights, R: WindowRights> Completes for PendingRebind<'o, 'm, K, R0, R> {
    type Output = std::result::Result<BoundMw<'m, K, R>, BoundMw<'o, K, R0>>;
    fn complete(self, c: &Completion, _: sealed::Internal) -> Self::Output {
        self.finish(c)
    }
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        // Both regions stay borrowed to the scope's end; the window must not be deallocated
        // while its bind may be in flight.
        Some(Box::new(self.into_mw()))
    }
}

impl<K: MwType, R> sealed::Sealed for PendingUnbind<'_, K, R> {}
impl<'m, K: MwType, R: WindowRights> Completes for PendingUnbind<'m, K, R> {
    type Output = std::result::Result<Mw<K>, BoundMw<'m, K, R>>;
    fn complete(self, c: &Completion, _: sealed::Internal) -> Self::Output {
        self.finish(c)
    }
    fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
        Some(Box::new(self.bound.into_mw()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeout too long to represent (`Duration::MAX`) saturates instead of panicking: the
    /// deadline is decades away, and neither a yielding nor a spinning wait runs out.
    #[test]
    fn timeouts_too_long_to_represent_saturate() {
        let now = Instant::now();
        let far = deadline_after(now, Duration::MAX);
        assert!(far > now + Duration::from_secs(10 * 365 * 24 * 3600), "{:?}", far - now);
        assert_eq!(deadline_after(now, Duration::from_secs(5)), now + Duration::from_secs(5));
        let mut yielding = Idle::new(Waiting::Yield, Duration::MAX);
        assert!(!yielding.expired() && !yielding.expired());
        let mut spinning = Idle::new(Waiting::Spin, Duration::MAX);
        assert!((0..2 * SPIN_CLOCK_EVERY).all(|_| !spinning.expired()));
        let mut until = Idle::until(far);
        assert!(!until.expired());
    }

    /// What a dropped token held, standing for a parked window: its drop (`ibv_dealloc_mw`, a
    /// system call) takes a while, and it records when it is done.
    #[cfg(not(loom))]
    struct SlowDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

    #[cfg(not(loom))]
    impl Drop for SlowDrop {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(300));
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[cfg(not(loom))]
    impl sealed::Sealed for SlowDrop {}

    #[cfg(not(loom))]
    impl Completes for SlowDrop {
        type Output = ();
        fn complete(self, _: &Completion, _: sealed::Internal) {}
        fn into_parked(self, _: sealed::Internal) -> Option<Box<dyn std::any::Any + Send>> {
            Some(Box::new(self))
        }
    }

    /// A scope's request whose token was dropped (its window parked with the queue), completed
    /// by another thread's poll before the drain looks at the queue: the drain no longer finds
    /// the request (an abandoned request's completion is not stored), and must still not return
    /// before the poller has dropped what the token held, or the program could deregister the
    /// region of a window that is still allocated.
    #[cfg(not(loom))]
    #[test]
    fn a_scope_returns_only_after_another_threads_poll_dropped_what_its_dropped_token_held() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        use std::sync::Arc;
        let w = crate::async_races::World::new();
        let (cq, fake) = w.cq();
        let qp = w.qp(0x7a0, 16, &cq, None);
        let dropped = Arc::new(AtomicBool::new(false));
        let mut poller = None;
        let ended = scope(|s| {
            // Posted as `QpShared::bind_mw` records a bind, its token dropped before the completion.
            let seq = qp.sq.lock().push_owned(true, s.id);
            let t = s.token(Posted { q: QueueRef::Send(&qp), seq }, None, SlowDrop(Arc::clone(&dropped)));
            drop(t);
            fake.complete(crate::async_races::send_wc(0x7a0, seq, sys::IBV_WC_SUCCESS));
            let cq = Arc::clone(&cq);
            poller = Some(std::thread::spawn(move || cq.poll_and_route().map(drop)));
            // The poll recorded the completion; it may still be dropping the parked value.
            while qp.sq.is_pending(seq) {
                std::thread::yield_now();
            }
        });
        let done = dropped.load(SeqCst);
        poller.expect("spawned").join().expect("the poller").expect("the poll");
        assert!(ended.is_ok(), "{ended:?}");
        assert!(done, "the scope returned while its dropped token's parked value was still being dropped");
    }
}
