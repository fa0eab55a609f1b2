//! Completion queues: `ibv_create_cq`, `ibv_poll_cq`, `ibv_destroy_cq`.
//!
//! Completions are not handed to whoever happens to poll: every completion polled from a CQ is
//! routed, by QP number and `wr_id`, to the book-keeping of the work queue it belongs to, where
//! the holder of the work request's token collects it. This is what lets several QPs (and
//! several threads) share one CQ without stealing each other's completions.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use typed_verbs_sys as sys;

use crate::device::{Context, ContextInner};
use crate::error::{Error, Result, Verb};
use crate::qp::QpShared;
use crate::queue::{is_lane_request, is_recv_lane_request, DeferWakes, RECV_BIT};
use crate::wc::Completion;

/// How many completions one `ibv_poll_cq` call may return.
const POLL_BATCH: usize = 16;

/// What [`CqShared::poll_for_lane`] returns when it polled the awaited request's own
/// successful completion (otherwise what `ibv_poll_cq` returned: 1 at most).
pub(crate) const LANE_POLLED_AWAITED: i32 = 2;

/// A completion queue: `struct ibv_cq`. Cheap to clone (shared); destroyed when the last clone
/// and every QP using it are gone.
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqShared>,
}

pub(crate) struct CqShared {
    cq: NonNull<sys::ibv_cq>,
    /// The provider's `ibv_poll_cq` (`cq->context->ops.poll_cq`), looked up once: what
    /// verbs.h's inline `ibv_poll_cq` reads on every call.
    poll_fn: PollFn,
    cqe: u32,
    /// The device reports `wc_flags` in the kernel's numbering (see [`WcFlagsQuirk`]).
    quirk: WcFlagsQuirk,
    /// `ctx.tag`, the device's tag every decoded completion carries, read without following
    /// `ctx` on the data path.
    dev_tag: u16,
    pub(crate) ctx: Arc<ContextInner>,
    /// The completion channel the CQ reports to, kept alive as long as the CQ.
    pub(crate) channel: Option<Arc<crate::channel::ChannelShared>>,
    /// An arming (`ibv_req_notify_cq`) made for the futures waiting here whose event has not
    /// been read yet ([`crate::owned::OwnedCompletion`]): the next completion will produce an
    /// event, so a waiting future need not arm again.
    pub(crate) armed: AtomicBool,
    /// Futures waiting for a request that completes here.
    pub(crate) waiters: std::sync::atomic::AtomicUsize,
    /// [`Cq::set_await_polls`]: how many more polls a future whose completion is not here yet
    /// makes, yielding to its runtime between them, before it arms the CQ and sleeps.
    pub(crate) await_polls: AtomicU32,
    /// QPs whose completions land here, by QP number, and the entries of a batch poll. Also
    /// serialises polling, so that the completions of one work queue are routed in the order
    /// the device produced them.
    routes: PollLock<Routing>,
    /// QPs destroyed after completing here, whose completions may still sit in the CQ
    /// (rxe keeps a destroyed QP's completions) while the device may give their numbers to new
    /// QPs. The next QP registered here first takes every such completion off the CQ
    /// ([`CqShared::register`]), so a stale completion can never be routed to a new QP.
    retired: std::sync::Mutex<Vec<Retired>>,
    /// Completions the queues completing here may have in the CQ at once: the depths of the
    /// registered QPs' queues and attached SRQs, and of destroyed ones until their completions
    /// are taken off ([`CqShared::register`]). Never above `cqe`, so the CQ cannot overrun.
    /// Changed only under the routing lock.
    reserved: std::sync::atomic::AtomicU64,
}

/// The type of a provider's `ibv_poll_cq` (`struct verbs_context_ops::poll_cq`).
type PollFn = unsafe extern "C" fn(*mut sys::ibv_cq, i32, *mut sys::ibv_wc) -> i32;

/// A QP whose completions land on the CQ.
struct Route {
    qp_num: u32,
    qp: Weak<QpShared>,
    /// The shared receive queue its receives come from: a receive completion of the QP polled
    /// while the QP is being dropped (its `Weak` dead, its [`Retired`] record not yet written)
    /// still reaches the SRQ's book.
    srq: Option<Weak<crate::srq::SrqShared>>,
}

/// What a CQ's routing lock guards.
pub(crate) struct Routing {
    /// QPs whose completions land on the CQ, by QP number.
    routes: Vec<Route>,
    /// The entries a batch poll hands to `ibv_poll_cq`, zeroed between polls: each poll
    /// zeroes again the entries it used (a failed `ibv_poll_cq` all of them), so a batch costs
    /// the entries it returns rather than a zeroed array of [`POLL_BATCH`]. (A routing that
    /// panics halfway leaves its entries as the provider wrote them: initialised values, only
    /// ever read where the next completion's provider leaves fields unwritten.)
    wcs: [sys::ibv_wc; POLL_BATCH],
}

/// A QP destroyed after completing on a CQ: its number, and the shared receive queue its
/// receive completions belong to.
#[derive(Clone)]
pub(crate) struct Retired {
    /// The QP's number; `None` for a shared receive queue that was destroyed (its completions
    /// name the QPs that consumed its receives, never it).
    pub(crate) qp_num: Option<u32>,
    pub(crate) srq: Option<Weak<crate::srq::SrqShared>>,
    /// The capacity it had reserved on the CQ, freed once its completions are off the CQ.
    pub(crate) reserved: u64,
}

// SAFETY: CQs may be polled and used from any thread (libibverbs is thread-safe); our own state
// is behind the routing lock.
unsafe impl Send for CqShared {}
// SAFETY: as above.
unsafe impl Sync for CqShared {}

impl Drop for CqShared {
    fn drop(&mut self) {
        // The completions of QPs destroyed since the last registration, still in the CQ, are
        // taken off first: a shared receive queue's receive that such a QP consumed completes
        // in the SRQ's book (destroyed with the CQ, it would stay pending for ever).
        let retired = std::mem::take(&mut *self.retired());
        if !retired.is_empty() {
            // Dropped after the lock: the futures the drain wakes.
            let _wakes = DeferWakes::new();
            // A failed poll leaves completions in a CQ destroyed next: nobody is handed them.
            let _ = self.drain_retired(&mut self.routes.lock(), &retired);
        }
        // SAFETY: every QP using this CQ holds an `Arc` to it, so none is left. A failure
        // (EBUSY) cannot be acted on in drop; ignored. (`verbs` is libibverbs' for every
        // context the library opens.)
        let _ = unsafe { (self.ctx.verbs.destroy_cq)(self.cq.as_ptr()) };
    }
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq").field("device", &self.inner.ctx.name).field("cqe", &self.inner.cqe).finish()
    }
}

impl Context {
    /// `ibv_create_cq` with room for at least `cqe` completions (the provider may round up).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for `cqe == 0` or above the device's `max_cqe`;
    /// - [`Error::Verb`] with `ibv_create_cq` and its errno.
    ///
    /// See ibv_create_cq(3).
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        self.create_cq_on(cqe, std::ptr::null_mut(), None)
    }

    /// `ibv_create_cq` attached to the completion channel `channel` (may be null), keeping
    /// `keep` (the channel's owner) alive as long as the CQ.
    pub(crate) fn create_cq_on(
        &self,
        cqe: u32,
        channel: *mut sys::ibv_comp_channel,
        keep: Option<Arc<crate::channel::ChannelShared>>,
    ) -> Result<Cq> {
        let dev = self.inner.attr();
        let max = dev.max_cqe();
        if cqe == 0 || cqe > max {
            return Err(Error::invalid(
                "ibv_create_cq",
                format!("{cqe} entries requested; {} allows 1..={max}", self.inner.name),
            ));
        }
        // The provider's `poll_cq`, which every poll calls as verbs.h's inline `ibv_poll_cq`
        // does. (libibverbs gives every context a full table of operations; a provider
        // without one would make any poll call a null pointer, so none is created.)
        // SAFETY: the context is open; the provider's operations are set when it is opened
        // and never change.
        let Some(poll_fn) = (unsafe { (*self.as_ptr()).ops.poll_cq }) else {
            return Err(crate::device::provider_lacks(Verb::CreateCq, "poll_cq", &self.inner.name));
        };
        // SAFETY: the context is open; `channel` is null or a live channel of this context, kept
        // alive by `keep` as long as the CQ; no user context.
        let cq = unsafe { sys::ibv_create_cq(self.as_ptr(), cqe as i32, std::ptr::null_mut(), channel, 0) };
        let cq = NonNull::new(cq)
            .ok_or_else(|| Error::last_os(Verb::CreateCq, format!("{cqe} entries on {}", self.inner.name)))?;
        // SAFETY: `cq` is valid; `cqe` is the size the provider granted.
        let granted = unsafe { (*cq.as_ptr()).cqe };
        let inner = Arc::new(CqShared {
            cq,
            poll_fn,
            cqe: u32::try_from(granted).unwrap_or(cqe),
            quirk: if dev.is_soft_roce() { WcFlagsQuirk::KernelNumbering } else { WcFlagsQuirk::None },
            dev_tag: self.inner.tag,
            ctx: Arc::clone(&self.inner),
            channel: keep,
            armed: AtomicBool::new(false),
            waiters: std::sync::atomic::AtomicUsize::new(0),
            await_polls: AtomicU32::new(0),
            routes: PollLock::new(Routing { routes: Vec::new(), wcs: [sys::ibv_wc::default(); POLL_BATCH] }),
            retired: std::sync::Mutex::new(Vec::new()),
            reserved: std::sync::atomic::AtomicU64::new(0),
        });
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.retain(|w| w.strong_count() > 0);
        cqs.push(Arc::downgrade(&inner));
        drop(cqs);
        Ok(Cq { inner })
    }
}

impl Cq {
    /// `ibv_poll_cq` once: routes the completions found to the tokens of their requests (and
    /// releases buffers parked for dropped tokens). Returns how many completions were polled.
    /// Waiting on a token polls by itself; this is for progress without a token at hand.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_poll_cq` and its errno.
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    pub fn progress(&self) -> Result<usize> {
        self.inner.poll_and_route()
    }

    /// `ibv_poll_cq` of up to `out.len()` completions in one call (batches of at most 16 are
    /// polled until `out` is full or the CQ is empty). Each completion is routed to the token of
    /// its request, as every poll does, and a copy is written to `out`: an event loop learns
    /// which QPs have news, and the tokens still hand over each result exactly once. Returns
    /// how many were written.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_poll_cq` and its errno.
    ///
    /// See ibv_poll_cq(3).
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll_into(&self, out: &mut [Completion]) -> Result<usize> {
        let mut n = 0;
        while n < out.len() {
            let got = self.inner.poll_batch(&mut out[n..])?;
            if got == 0 {
                break;
            }
            n += got;
        }
        Ok(n)
    }

    /// Sets how many more times a future awaiting a completion of this CQ (an
    /// [`OwnedToken`](crate::owned::OwnedToken) awaited) polls the CQ, when its first poll did not
    /// find the completion, before it arms the CQ (`ibv_req_notify_cq`) and sleeps until the
    /// completion event. Between two polls the future wakes its own task and returns `Pending`:
    /// an executor that queues woken tasks (tokio's) runs the tasks ahead of it first, one that
    /// polls a lone future in a loop (a `block_on`) polls it again at once. Each poll is the
    /// wait's poll of the CQ: one completion if it is the future's own, otherwise up to a batch
    /// of 16, routed to their requests as every poll routes them (for a shared receive queue's
    /// receive, a batch from each attached QP's CQ). 0, the default, arms at the first miss.
    ///
    /// Polls cost CPU and save the event's path (arming, the channel's descriptor, the
    /// runtime's reactor, a thread woken): a completion that lands within the polls is taken
    /// without it. BENCHMARKS.md measures the latency either way; how many polls a round trip
    /// takes depends on the host (hundreds under emulation). The setting is read when a future
    /// first misses; a future already polling or asleep keeps what it read. A future awaiting a
    /// shared receive queue's receive uses the largest setting among the CQs of the QPs attached
    /// to the SRQ.
    pub fn set_await_polls(&self, polls: u32) {
        self.inner.await_polls.store(polls, Ordering::Relaxed);
    }

    /// The polls a future makes before it sleeps: [`Cq::set_await_polls`].
    pub fn await_polls(&self) -> u32 {
        self.inner.await_polls.load(Ordering::Relaxed)
    }

    /// The number of entries the provider granted.
    pub fn capacity(&self) -> u32 {
        self.inner.cqe
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_cq {
        self.inner.cq.as_ptr()
    }

    /// True when `self` and `other` are handles to the same CQ.
    pub fn same_as(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn device_name(&self) -> &str {
        &self.inner.ctx.name
    }
}

/// The routing lock of a CQ: a ticket lock that yields the thread while another holds it. It
/// is held only around one `ibv_poll_cq` and the routing of what that returned (or a route
/// being added), like the providers' own CQ locks (`pthread_spin_lock` in rxe's and mlx5's
/// `poll_cq`), so each hold is short. Tickets make it fair: a thread that wants the lock gets
/// it after the holders whose tickets came before its own, so a thread that releases the lock
/// and takes it again at once (a `Cq::progress` loop, another queue's busy wait on a shared
/// CQ) cannot keep a wait from its CQ, and from its deadline, for longer than one hold each.
/// Taking and releasing it is one atomic add each, with no poisoning to check on every poll.
/// A panic while it is held releases it (the guard's drop): the routes and the book-keeping
/// they feed are consistent at every step.
pub(crate) struct PollLock<T> {
    /// The next ticket to hand out.
    next: AtomicU32,
    /// The ticket that holds the lock (it is free when `serving == next`).
    serving: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a `PollGuard`, and at most one guard exists at a
// time (the one whose ticket is `serving`), so sharing the lock shares `T` between threads one
// at a time: `T: Send`.
unsafe impl<T: Send> Sync for PollLock<T> {}

impl<T> PollLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        PollLock { next: AtomicU32::new(0), serving: AtomicU32::new(0), value: UnsafeCell::new(value) }
    }

    #[inline(always)]
    pub(crate) fn lock(&self) -> PollGuard<'_, T> {
        // Tickets wrap: only equality is compared, and fewer than 2^32 threads wait at once.
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        if self.serving.load(Ordering::Acquire) != ticket {
            self.lock_contended(ticket);
        }
        PollGuard { lock: self, _value: std::marker::PhantomData }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self, ticket: u32) {
        loop {
            for _ in 0..64 {
                if self.serving.load(Ordering::Acquire) == ticket {
                    return;
                }
                std::hint::spin_loop();
            }
            std::thread::yield_now();
        }
    }

    /// How many threads hold or wait for the lock (the unit tests' view of the queue).
    #[cfg(test)]
    fn queued(&self) -> u32 {
        self.next.load(Ordering::SeqCst).wrapping_sub(self.serving.load(Ordering::SeqCst))
    }
}

/// The CQ an `IBV_EVENT_CQ_ERR` names and the QPs completing on it, found while the event is
/// unacknowledged; held, so that none is destroyed before they are broken.
///
/// The device reported `IBV_EVENT_CQ_ERR` for the CQ of `ctx` whose handle is `cq`: its
/// completions may have been lost (an overrun drops them, and a failed request would then
/// read as done), so every QP completing on it refuses further posts ([`Error::QpBroken`])
/// until the program resets it; what is outstanding is reclaimed by the scope's drain
/// (timeout, flush, reset) or a reset. The library's reservations make an overrun
/// unreachable ([`CqShared::register`]); this is the answer should a device report one
/// anyway.
pub(crate) struct FailedCq {
    /// Every CQ of the context that was alive, the failed one among them: released with this,
    /// after the event was acknowledged.
    _live: Vec<Arc<CqShared>>,
    qps: Vec<Arc<QpShared>>,
}

impl FailedCq {
    pub(crate) fn find(ctx: &ContextInner, cq: crate::event::HandleId) -> FailedCq {
        // Upgraded under the context's lock, compared and dropped after it: a handle dropped
        // here may be the last of its CQ, whose destroy waits for its events' acknowledgement,
        // which another reader of events may be about to give from this very function.
        // (Kept whole, the others too: each may be the last handle of its CQ.)
        let live: Vec<_> = ctx.cqs.lock().unwrap_or_else(|e| e.into_inner()).iter().filter_map(Weak::upgrade).collect();
        let qps = live
            .iter()
            .filter(|c| crate::event::HandleId::of(c.cq.as_ptr()) == cq)
            .flat_map(|c| c.routes.lock().routes.iter().filter_map(|r| r.qp.upgrade()).collect::<Vec<_>>())
            .collect();
        FailedCq { _live: live, qps }
    }

    /// Every QP found refuses posts until the program resets it.
    pub(crate) fn break_qps(self) {
        for qp in &self.qps {
            qp.mark_broken();
        }
    }
}

/// Access to a [`PollLock`]'s value; releases the lock when dropped.
pub(crate) struct PollGuard<'a, T> {
    lock: &'a PollLock<T>,
    /// A guard lends `&T` through a shared reference (`Deref`), and `&mut T` through an
    /// exclusive one: it is `Sync` only for `T: Sync` and `Send` only for `T: Send`, as a
    /// `&mut T` (the lock alone, `Sync` for every `T: Send`, would make it `Sync` for a `Cell`).
    _value: std::marker::PhantomData<&'a mut T>,
}

impl<T> std::ops::Deref for PollGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock (its ticket is `serving`), so no other reference to
        // the value exists until it is dropped.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for PollGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for PollGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        // Only the holder moves `serving`: the next ticket holds the lock from here.
        self.lock.serving.fetch_add(1, Ordering::Release);
    }
}

impl CqShared {
    /// Routes the completions of QP `qp_num` to `qp` from now on.
    ///
    /// QP numbers are reused (cyclically on rxe), and a destroyed QP's completions stay in the
    /// CQ. So first, if QPs completing here were destroyed since the last registration, every
    /// completion the CQ holds is taken off and routed (at most `cqe` entries: all that were
    /// in it when this began; later ones come from live QPs), the destroyed QPs' own to their
    /// shared receive queue or nowhere. All under the routing lock, which every poll takes:
    /// no poll can route a stale completion to the new QP. `ibv_create_qp` cannot hand out a
    /// destroyed QP's number before its destroy returned, and the destroy records the QP in
    /// `retired` under that list's lock taken before the destroy ([`CqShared::retired`]).
    ///
    /// It also reserves room for `need` more completions: the depths of the queues that will
    /// complete here. Every completion in a CQ belongs to a request the library counts as
    /// outstanding until it is polled, and each queue keeps at most its depth outstanding, so
    /// as long as the reservations fit in `cqe` the CQ cannot overrun (an overrun drops
    /// completions, and a failed request would then read as done). A destroyed QP's (or SRQ's)
    /// reservation is freed only once its completions are off the CQ, here.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `need` does not fit, or when a live QP completing here
    /// has the number `qp_num` already; [`Error::Verb`] with `ibv_poll_cq`
    /// when a poll of the destroyed QPs' completions fails (they stay recorded, for the next
    /// registration to take off). Nothing is registered then.
    pub(crate) fn register(
        &self,
        qp_num: u32,
        qp: Weak<QpShared>,
        srq: Option<Weak<crate::srq::SrqShared>>,
        need: u64,
    ) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        // Dropped after the lock: the futures the drain of retired completions wakes.
        let _wakes = DeferWakes::new();
        let mut routing = self.routes.lock();
        let retired = std::mem::take(&mut *self.retired());
        let mut used = self.reserved.load(Relaxed);
        if !retired.is_empty() {
            if let Err(e) = self.drain_retired(&mut routing, &retired) {
                // Completions of the destroyed QPs may still be in the CQ: a QP that reuses
                // one of their numbers would be handed them. They stay retired (and their
                // room reserved) for the next registration's drain; this one is refused.
                self.retired().extend(retired);
                return Err(e);
            }
            used = used.saturating_sub(retired.iter().map(|r| r.reserved).sum());
            self.reserved.store(used, Relaxed);
        }
        // The dead routes go once their QP's completions were drained (its number among the
        // records just drained); one that names a shared receive queue and was not recorded
        // stays: its QP's destroy failed, so the device may still complete the SRQ's receives
        // it consumed, or its drop is under way (`route_orphan`).
        routing.routes.retain(|r| {
            r.qp.strong_count() > 0 || (r.srq.is_some() && !retired.iter().any(|d| d.qp_num == Some(r.qp_num)))
        });
        // Completions are told apart by QP number: a second live QP under one number would
        // have its completions taken for the first's (whose buffers would come back while the
        // device still uses them). Only a provider breaking the numbers' uniqueness does that.
        if routing.routes.iter().any(|r| r.qp_num == qp_num && r.qp.strong_count() > 0) {
            return Err(Error::invalid(
                "ibv_create_qp",
                format!(
                    "the provider numbered the new QP {qp_num:#x}, the number of a live QP that completes on the same CQ: \
                     their completions could not be told apart"
                ),
            ));
        }
        if used + need > u64::from(self.cqe) {
            return Err(Error::invalid(
                "ibv_create_qp",
                format!(
                    "the CQ holds {} completions and {used} are reserved for the queues completing on it; this QP \
                     needs {need} more (its queue depths): a CQ smaller than its queues could overrun and lose completions",
                    self.cqe
                ),
            ));
        }
        self.reserved.store(used + need, Relaxed);
        routing.routes.push(Route { qp_num, qp, srq });
        Ok(())
    }

    /// Runs `f` under the routing lock, serialised with every poll's routing (a reset's flush
    /// of a lane's book, which pollers write under it).
    pub(crate) fn with_routing_lock<R>(&self, f: impl FnOnce() -> R) -> R {
        // Dropped after the lock: the futures a reset's flush completes are woken outside it.
        let _wakes = DeferWakes::new();
        let _routes = self.routes.lock();
        f()
    }

    /// The list of QPs destroyed after completing here (see [`CqShared::register`]); a QP's
    /// drop holds it across `ibv_destroy_qp` and adds the QP to it.
    pub(crate) fn retired(&self) -> std::sync::MutexGuard<'_, Vec<Retired>> {
        self.retired.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes off the CQ every completion it holds (at most `cqe`), routing each: those of the
    /// `retired` QPs to their shared receive queue (or nowhere), the others as usual. Called
    /// with the routing lock held (`routing`).
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_poll_cq` for a failed poll: completions of the retired QPs
    /// may be left in the CQ.
    #[cold]
    fn drain_retired(&self, routing: &mut Routing, retired: &[Retired]) -> Result<()> {
        let mut left = self.cqe as usize;
        let Routing { routes, wcs } = routing;
        while left > 0 {
            let polled = self.poll_locked(wcs, left.min(POLL_BATCH), |_, wc| {
                // A live QP's number is its own (a refused QP's record may carry it).
                let live = routes.iter().any(|r| r.qp_num == wc.qp_num && r.qp.strong_count() > 0);
                match retired.iter().find(|r| !live && r.qp_num == Some(wc.qp_num)) {
                    Some(r) => Self::route_retired(r.srq.as_ref(), wc, || self.decode(wc)),
                    None => self.route(routes, wc, None, || self.decode(wc)),
                }
            });
            match polled? {
                0 => return Ok(()),
                n => left -= n,
            }
        }
        Ok(())
    }

    /// A completion of a destroyed QP: a shared receive queue's receive is complete (the
    /// destroyed QP consumed it); anything else has nobody to go to.
    fn route_retired(srq: Option<&Weak<crate::srq::SrqShared>>, wc: &sys::ibv_wc, decode: impl FnOnce() -> Completion) {
        let srq_receive = wc.wr_id & RECV_BIT != 0 && !is_recv_lane_request(wc.wr_id);
        match (srq_receive, srq.and_then(Weak::upgrade)) {
            (true, Some(srq)) => srq.rq.complete(wc.wr_id & !RECV_BIT, decode()),
            // Decoded all the same: decoding a receive that invalidated an rkey is what tells a
            // window bound under it (`mw::note_remote_invalidation`; rxe lets a SEND_WITH_INV
            // through any QP of the device invalidate it).
            _ => {
                let _ = decode();
            }
        }
    }

    /// A completion of no live QP: one of a destroyed QP (not yet drained by a registration)
    /// goes where [`CqShared::route_retired`] sends it.
    #[cold]
    #[inline(never)]
    fn route_orphan(&self, routes: &[Route], wc: &sys::ibv_wc, decode: impl FnOnce() -> Completion) {
        // Routed after the list's lock is released: the routing may drop the last `Arc` of the
        // shared receive queue (its handle dropped meanwhile on another thread), whose drop
        // locks this list to retire itself.
        let found = self.retired().iter().find(|r| r.qp_num == Some(wc.qp_num)).map(|r| r.srq.clone());
        // A QP being dropped: its last `Arc` is gone, and its drop has not yet recorded it as
        // retired (it does so under this list's lock, around `ibv_destroy_qp`). Its route
        // still names its shared receive queue.
        let srq = found.or_else(|| Some(routes.iter().rev().find(|r| r.qp_num == wc.qp_num)?.srq.clone()));
        // Nothing found: as in `route_retired` without a shared receive queue.
        Self::route_retired(srq.flatten().as_ref(), wc, decode);
    }

    /// Work for the futures waiting on this CQ (a future's poll, or
    /// [`CompChannel::dispatch`](crate::channel::CompChannel::dispatch) after an event): polls
    /// and routes at most `budget` batches of [`POLL_BATCH`] completions (routing wakes the
    /// futures whose requests completed); once a batch comes back short (the CQ was empty), and
    /// if futures wait here, makes sure the CQ is armed (`ibv_req_notify_cq`, unless an arming
    /// whose event has not been read is outstanding) and polls once more, so that a completion
    /// that arrived before the arming, which produces no event, is not missed. Returns how many
    /// completions were polled, and whether the budget ran out before the CQ was found empty
    /// after the arming (then the caller must come back without waiting for an event).
    pub(crate) fn serve(&self, budget: usize) -> Result<(usize, bool)> {
        // The futures its polls complete are woken once it returns (or by the caller's own
        // `DeferWakes`): after the arming, so that a waker that panics cannot leave the CQ
        // unarmed with futures waiting on it.
        let _wakes = DeferWakes::new();
        let served = self.serve_batches(budget);
        if served.is_err() && self.waiters.load(Ordering::SeqCst) > 0 {
            // A failed serving may leave completions in the CQ that fire no event (landed
            // before an arming, or left by an earlier serving), and a driver task ends at a
            // failed dispatch: every future waiting here is woken, polls again, and serves the
            // CQ or resolves with the error.
            self.wake_waiters();
        }
        served
    }

    /// [`CqShared::serve`]'s polls and arming.
    fn serve_batches(&self, budget: usize) -> Result<(usize, bool)> {
        let mut n = 0;
        for _ in 0..budget.max(1) {
            let got = self.poll_and_route()?;
            n += got;
            if got < POLL_BATCH {
                if self.waiters.load(Ordering::SeqCst) == 0 {
                    return Ok((n, false));
                }
                self.arm_once()?;
                let got = self.poll_and_route()?;
                return Ok((n + got, got == POLL_BATCH));
            }
        }
        Ok((n, true))
    }

    /// After one of its QPs was reset: takes what the CQ holds off it, routing every
    /// completion as a poll does, at most as many as the CQ holds. The reset QP's are stale by
    /// then (its books were flushed: they ignore them), but a provider that does not clean
    /// the CQ on a reset (rxe) leaves them in it, where they would take the room the QP's next
    /// requests were counted on (an overrun loses completions: a lost error would make a
    /// failed unsignaled request read as done once a later one completes).
    pub(crate) fn drain_after_reset(&self) {
        // A failed poll: nothing more can be taken off.
        let _ = self.take_all();
    }

    /// Polls until the CQ is empty, routing every completion as a poll does, at most as many
    /// as the CQ holds (completions that keep arriving do not keep the caller here).
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_poll_cq` and its errno.
    pub(crate) fn take_all(&self) -> Result<()> {
        let mut left = self.cqe as usize;
        while left > 0 {
            match self.poll_and_route()? {
                0 => break,
                n => left = left.saturating_sub(n),
            }
        }
        Ok(())
    }

    /// How many completions the CQ holds (`cqe` as the provider granted it).
    pub(crate) fn capacity(&self) -> usize {
        self.cqe as usize
    }

    /// Arms the CQ for any completion unless an arming whose event has not been read is
    /// outstanding (`armed`).
    pub(crate) fn arm_once(&self) -> Result<()> {
        // SeqCst: see `ChannelShared::event_for`.
        if !self.armed.swap(true, Ordering::SeqCst) {
            if let Err(e) = self.arm() {
                self.armed.store(false, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Wakes the futures waiting on the queues that complete here (the send and receive
    /// queues of its QPs, their shared receive queues); they register again when polled. All
    /// are woken at the end, a waker that panics included (`DeferWakes`).
    #[cold]
    #[inline(never)]
    pub(crate) fn wake_waiters(&self) {
        let _wakes = DeferWakes::new();
        // Upgraded under the routing lock, woken and dropped after it: a waker may poll this
        // CQ, and a handle dropped here may be the last of its QP, whose drop takes other locks
        // of this CQ (its list of retired QPs).
        let (qps, srqs): (Vec<_>, Vec<_>) = {
            let routing = self.routes.lock();
            (
                routing.routes.iter().filter_map(|r| r.qp.upgrade()).collect(),
                routing.routes.iter().filter_map(|r| r.srq.as_ref()?.upgrade()).collect(),
            )
        };
        for qp in &qps {
            qp.sq.wake_all();
            qp.rq.wake_all();
        }
        for srq in &srqs {
            srq.rq.wake_all();
        }
    }

    /// `ibv_req_notify_cq` for any completion.
    fn arm(&self) -> Result<()> {
        // SAFETY: the CQ is alive (`&self`).
        let ret = unsafe { sys::ibv_req_notify_cq(self.cq.as_ptr(), 0) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::ReqNotifyCq, format!("any CQ on {} (for a future)", self.ctx.name), ret));
        }
        Ok(())
    }

    /// Polls one batch and routes every completion to its work queue. Returns how many
    /// completions were polled.
    pub(crate) fn poll_and_route(&self) -> Result<usize> {
        self.poll_batch(&mut [])
    }

    /// [`CqShared::poll_and_route`] by a waiter for a request of `qp` (one of this CQ's QPs,
    /// alive: the waiter's token holds it): its completions are routed to it without looking it
    /// up (no upgrade of its weak reference), the others as usual.
    pub(crate) fn poll_and_route_for(&self, qp: &QpShared) -> Result<usize> {
        self.poll_with(POLL_BATCH, |_, wc, routes| self.route(routes, wc, Some(qp), || self.decode(wc)))
    }

    /// [`CqShared::poll_and_route_for`] by the wait of send request `seq` of `qp`: its
    /// completion, if polled now, is recorded and handed to the wait (`mine`) rather than
    /// stored for it ([`TrackedQueue::complete_taken`](crate::queue::TrackedQueue::complete_taken));
    /// everything else is routed as usual.
    pub(crate) fn poll_for_send(&self, qp: &QpShared, seq: u64, mine: &mut Option<Completion>) -> Result<usize> {
        // A tracked send request's `wr_id` is its number (lanes' and receives' carry a bit).
        self.poll_one_for(qp, mine, |wc| wc.wr_id == seq && wc.qp_num == qp.qp_num() && qp.sq.complete_taken(seq))
    }

    /// [`CqShared::poll_and_route_for`] by the wait of receive request `seq` of `qp` (which
    /// has a receive queue of its own): as [`CqShared::poll_for_send`], its completion, if
    /// polled now, is recorded and handed to the wait (`mine`) rather than stored for it.
    pub(crate) fn poll_for_recv(&self, qp: &QpShared, seq: u64, mine: &mut Option<Completion>) -> Result<usize> {
        // A tracked receive's `wr_id` is its number with `RECV_BIT` (a lane's has its own bit).
        self.poll_one_for(qp, mine, |wc| {
            wc.wr_id == seq | RECV_BIT && wc.qp_num == qp.qp_num() && qp.rq.complete_taken_recv(seq)
        })
    }

    /// One `ibv_poll_cq` of one completion by a waiter for a request of `qp`: `take` records
    /// the awaited completion and says whether it was (then it is decoded into `mine`). When
    /// the first entry is the awaited one (the common case) this is all, inline: no batch and no
    /// zeroing of its entries. Otherwise that entry is routed and the rest of a batch is polled
    /// under the same lock, out of line (`route_and_poll_rest`), as a batch poll would: a wait
    /// or `try_complete` behind other completions takes its own among the next ones.
    /// Returns how many completions were polled.
    #[inline(always)]
    fn poll_one_for(
        &self,
        qp: &QpShared,
        mine: &mut Option<Completion>,
        mut take: impl FnMut(&sys::ibv_wc) -> bool,
    ) -> Result<usize> {
        // Declared first, dropped last: the futures of the requests this poll completes are
        // woken once the routing lock is released.
        let _wakes = DeferWakes::new();
        let mut routing = self.routes.lock();
        let mut slot = sys::ibv_wc::default();
        let wc = match self.poll_one(&mut slot) {
            Ok(wc) => wc,
            Err(0) => return Ok(0),
            Err(n) => return Err(self.poll_failed(n)),
        };
        if mine.is_none() && take(wc) {
            *mine = Some(self.decode(wc));
            return Ok(1);
        }
        self.route_and_poll_rest(&mut routing, wc, qp, mine, &mut take)
    }

    /// The rest of [`CqShared::poll_one_for`] when its first entry, `first`, was not the
    /// awaited completion: `first` is routed, then up to `POLL_BATCH - 1` more are polled and
    /// handled the same way, under the routing lock the caller holds.
    #[inline(never)]
    fn route_and_poll_rest(
        &self,
        routing: &mut Routing,
        first: &sys::ibv_wc,
        qp: &QpShared,
        mine: &mut Option<Completion>,
        take: &mut impl FnMut(&sys::ibv_wc) -> bool,
    ) -> Result<usize> {
        let Routing { routes, wcs } = routing;
        self.route(routes, first, Some(qp), || self.decode(first));
        let n = self.poll_locked(wcs, POLL_BATCH - 1, |_, wc| {
            if mine.is_none() && take(wc) {
                *mine = Some(self.decode(wc));
            } else {
                self.route(routes, wc, Some(qp), || self.decode(wc));
            }
        })?;
        Ok(1 + n)
    }

    /// As [`CqShared::poll_and_route`], for the send lane of `qp` (one of this CQ's QPs): its
    /// successful lane completions are recorded on the spot, everything else is routed as
    /// usual.
    ///
    /// Returns what `ibv_poll_cq` returned (0, 1, or a negative failure that
    /// [`CqShared::poll_failed`] turns into the error), or [`LANE_POLLED_AWAITED`] when the
    /// completion polled is the successful one of lane request `awaited` itself: a plain
    /// integer keeps this path short. Inline, as verbs.h's `ibv_poll_cq` is: the lane's waits
    /// are the data path.
    #[inline(always)]
    pub(crate) fn poll_for_lane(&self, qp: &QpShared, awaited: u64) -> i32 {
        let routing = self.routes.lock();
        let mut slot = sys::ibv_wc::default();
        let wc = match self.poll_one(&mut slot) {
            Ok(wc) => wc,
            Err(n) => return n,
        };
        // The common case inline: the awaited request's own success, which answers the wait
        // unless it is a made-up duplicate. Lane numbers carry `LANE_BIT`: a completion whose
        // number is the awaited one is a lane request's, with no separate test of the bit.
        debug_assert!(is_lane_request(awaited), "a lane's number: {awaited:#x}");
        let ok = wc.status == sys::IBV_WC_SUCCESS && wc.qp_num == qp.qp_num();
        if ok && wc.wr_id == awaited {
            if qp.sq.lane.complete_awaited(awaited) {
                return LANE_POLLED_AWAITED;
            }
        } else if ok && is_lane_request(wc.wr_id) {
            // An earlier signaled request of the lane.
            qp.sq.lane.complete(wc.wr_id, true, || (self.decode(wc), qp.sq.depth()));
        } else {
            self.route_cold(routing, wc, Some(qp));
        }
        1
    }

    /// One poll for the receive lane of `qp` (one of this CQ's QPs), whose wait is for its
    /// request `seq`. A receive completion of the lane is recorded at once: the awaited one is
    /// written to `mine`, an earlier one goes to `ready` (the lane's own, at most `keep` of
    /// them: the oldest goes first). Anything else is routed as usual.
    ///
    /// Returns what `ibv_poll_cq` returned, as [`CqShared::poll_for_lane`]; inline as it.
    #[inline(always)]
    pub(crate) fn poll_for_recv_lane(
        &self,
        qp: &QpShared,
        seq: u64,
        ready: &mut std::collections::VecDeque<(u64, Completion)>,
        keep: usize,
        mine: &mut Option<Completion>,
    ) -> i32 {
        let routing = self.routes.lock();
        let mut slot = sys::ibv_wc::default();
        let wc = match self.poll_one(&mut slot) {
            Ok(wc) => wc,
            Err(n) => return n,
        };
        // The awaited receive's own completion (its `wr_id` is the lane number with
        // `RECV_BIT`, lane numbers having `LANE_BIT`), inline; anything else out of line.
        if wc.wr_id == seq | RECV_BIT && wc.qp_num == qp.qp_num() && qp.rq.lane.complete_taken(seq) {
            *mine = Some(self.decode(wc));
        } else {
            self.recv_lane_other(routing, qp, ready, keep, wc);
        }
        1
    }

    /// [`CqShared::poll_for_recv_lane`] found another completion than the awaited receive's:
    /// one of an earlier receive of the lane waits in `ready` (at most `keep`, the oldest goes
    /// first); anything else is routed as usual.
    #[cold]
    #[inline(never)]
    fn recv_lane_other(
        &self,
        routing: PollGuard<'_, Routing>,
        qp: &QpShared,
        ready: &mut std::collections::VecDeque<(u64, Completion)>,
        keep: usize,
        wc: &sys::ibv_wc,
    ) {
        let lane_seq = wc.wr_id & !RECV_BIT;
        if wc.qp_num == qp.qp_num() && is_recv_lane_request(wc.wr_id) && qp.rq.lane.complete_taken(lane_seq) {
            if ready.len() >= keep.max(1) {
                ready.pop_front();
            }
            ready.push_back((lane_seq, self.decode(wc)));
        } else {
            self.route_cold(routing, wc, Some(qp));
        }
    }

    /// One `ibv_poll_cq` of one completion into `slot`, for a caller that holds the routing
    /// lock: a lane waits for one request at a time, as perftest's latency loops poll, and a
    /// single entry keeps the path short (no batch loop). The completion, or what
    /// `ibv_poll_cq` returned when it is not 1 (0: empty; negative: a failure).
    #[inline(always)]
    ///
    /// `slot` is an initialised (zeroed) entry: for a failed completion the provider defines
    /// only `wr_id`, `status`, `qp_num` and `vendor_err` (ibv_poll_cq(3)) and may leave the
    /// other fields as they were, and every field is read when the entry is decoded.
    fn poll_one<'w>(&self, slot: &'w mut sys::ibv_wc) -> std::result::Result<&'w sys::ibv_wc, i32> {
        // SAFETY: the CQ is alive and `poll_fn` its provider's `ibv_poll_cq`; `slot` is one
        // valid entry, room for the one asked for.
        let n = unsafe { (self.poll_fn)(self.cq.as_ptr(), 1, slot) };
        if n <= 0 {
            return Err(n);
        }
        Ok(slot)
    }

    /// [`CqShared::route`], out of line, for a lane's poll that holds the routing lock
    /// (`routing`): released here, before the futures of requests the completion completed are
    /// woken ([`DeferWakes`]).
    #[cold]
    #[inline(never)]
    fn route_cold(&self, routing: PollGuard<'_, Routing>, wc: &sys::ibv_wc, known: Option<&QpShared>) {
        let wakes = DeferWakes::new();
        self.route(&routing.routes, wc, known, || self.decode(wc));
        drop(routing);
        drop(wakes);
    }

    /// One `ibv_poll_cq` of at most `want <= POLL_BATCH` completions, handing each, with its
    /// index, to `each` under the routing lock (so that completions are routed in the order
    /// the device produced them). Returns how many were polled.
    #[inline(always)]
    fn poll_with(&self, want: usize, mut each: impl FnMut(usize, &sys::ibv_wc, &[Route])) -> Result<usize> {
        // Declared first, dropped last: the futures of the requests this poll completes are woken
        // once the routing lock is released.
        let _wakes = DeferWakes::new();
        let mut routing = self.routes.lock();
        let Routing { routes, wcs } = &mut *routing;
        self.poll_locked(wcs, want, |i, wc| each(i, wc, routes))
    }

    /// One `ibv_poll_cq` of at most `want <= POLL_BATCH` completions, handing each, with its
    /// index, to `each`. The caller holds the routing lock. Returns how many were polled.
    #[inline(always)]
    fn poll_locked(
        &self,
        wcs: &mut [sys::ibv_wc; POLL_BATCH],
        want: usize,
        mut each: impl FnMut(usize, &sys::ibv_wc),
    ) -> Result<usize> {
        let want = want.min(POLL_BATCH);
        // `wcs` is initialised, and zeroed between polls (see `Routing::wcs`): for a failed
        // completion the provider defines only wr_id, status, qp_num and vendor_err
        // (ibv_poll_cq(3)) and may leave the other fields unwritten, and every field is read
        // when the entry is decoded.
        // SAFETY: the CQ is alive and `poll_fn` its provider's `ibv_poll_cq`; `wcs` holds
        // `want <= POLL_BATCH` valid entries.
        let n = unsafe { (self.poll_fn)(self.cq.as_ptr(), want as i32, wcs.as_mut_ptr()) };
        if n < 0 {
            *wcs = [sys::ibv_wc::default(); POLL_BATCH];
            return Err(self.poll_failed(n));
        }
        // A provider never returns more than asked; clamp anyway so a faulty one cannot panic us.
        let n = (n as usize).min(want);
        for (i, wc) in wcs[..n].iter().enumerate() {
            each(i, wc);
        }
        // Zeroed again for the next poll: only the entries this one used (usually one or two).
        wcs[..n].fill(sys::ibv_wc::default());
        Ok(n)
    }

    /// The error of a failed `ibv_poll_cq` that returned `ret`.
    #[cold]
    pub(crate) fn poll_failed(&self, ret: i32) -> Error {
        Error::from_ret(Verb::PollCq, format!("CQ on {}", self.ctx.name), ret)
    }

    /// Decodes one polled completion.
    #[inline(always)]
    fn decode(&self, wc: &sys::ibv_wc) -> Completion {
        Completion::from_raw(wc, self.quirk, self.dev_tag)
    }

    /// Routes one polled completion to its work queue; `known` is a QP the caller holds;
    /// `decode` gives its decoded form, only needed for a request other than a successful
    /// lane request.
    #[inline(always)]
    fn route(&self, routes: &[Route], wc: &sys::ibv_wc, known: Option<&QpShared>, decode: impl FnOnce() -> Completion) {
        let route = |qp: &QpShared| {
            if is_lane_request(wc.wr_id) {
                let ok = wc.status == sys::IBV_WC_SUCCESS;
                qp.sq.lane.complete(wc.wr_id, ok, || (decode(), qp.sq.depth()));
            } else if is_recv_lane_request(wc.wr_id) {
                qp.rq.lane.complete_kept(wc.wr_id & !RECV_BIT, decode(), qp.rq.depth() as usize);
            } else {
                let is_recv = wc.wr_id & RECV_BIT != 0;
                qp.route(wc.wr_id & !RECV_BIT, is_recv, decode());
            }
        };
        match known {
            Some(qp) if qp.qp_num() == wc.qp_num => route(qp),
            _ => {
                let target = routes.iter().filter(|r| r.qp_num == wc.qp_num).find_map(|r| r.qp.upgrade());
                match target {
                    Some(qp) => route(&qp),
                    // A completion of a QP that no longer exists.
                    None => self.route_orphan(routes, wc, || self.decode(wc)),
                }
            }
        }
    }

    /// Polls one batch of at most `POLL_BATCH` (and, when `copy` is not empty, at most
    /// `copy.len()`) completions, routes each to its work queue and copies it into `copy`.
    fn poll_batch(&self, copy: &mut [Completion]) -> Result<usize> {
        let want = if copy.is_empty() { POLL_BATCH } else { copy.len() };
        self.poll_with(want, |i, wc, routes| {
            // Decoded once, whether it is copied or only routed.
            match copy.get_mut(i) {
                Some(slot) => {
                    *slot = self.decode(wc);
                    let c = *slot;
                    self.route(routes, wc, None, || c);
                }
                None => self.route(routes, wc, None, || self.decode(wc)),
            }
        })
    }
}

/// How a device's completions encode `wc_flags`.
///
/// Soft-RoCE (rxe, kernel 6.12 with rdma-core 44) hands user space its completion entries with
/// the flags in the kernel's `enum ib_wc_flags` numbering, where `IB_WC_WITH_INVALIDATE` is
/// `1 << 2` and `IB_WC_IP_CSUM_OK` is `1 << 3`: the reverse of libibverbs' `IBV_WC_IP_CSUM_OK`
/// (`1 << 2`) and `IBV_WC_WITH_INV` (`1 << 3`). Observed on the device: the receive completion
/// of a SEND_WITH_INV carries bit 2. The other bits agree. Decoding swaps the two bits back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WcFlagsQuirk {
    /// libibverbs numbering.
    None,
    /// Kernel numbering (rxe).
    KernelNumbering,
}

impl WcFlagsQuirk {
    /// `flags` in libibverbs' numbering.
    pub(crate) fn fix(self, flags: u32) -> u32 {
        match self {
            WcFlagsQuirk::None => flags,
            WcFlagsQuirk::KernelNumbering => {
                let bit2 = flags & (1 << 2);
                let bit3 = flags & (1 << 3);
                (flags & !((1 << 2) | (1 << 3))) | (bit2 << 1) | (bit3 >> 1)
            }
        }
    }
}

/// The `imm_data` / `invalidate_rkey` union of a completion, as raw bits.
pub(crate) fn wc_imm_bits(wc: &sys::ibv_wc) -> u32 {
    // SAFETY: both members of the union are 32-bit integers, so every bit pattern is valid
    // for either; the value is read as `invalidate_rkey` and reinterpreted by the caller.
    unsafe { wc.__bindgen_anon_1.invalidated_rkey }
}

/// A `CqShared` over a fake `ibv_cq` whose context's ops are a test's own functions
/// (`async_races`). Never dropped by the caller (its drop would call `ibv_destroy_cq`).
#[cfg(all(test, not(loom)))]
impl CqShared {
    pub(crate) fn fake(
        cq: NonNull<sys::ibv_cq>,
        ctx: Arc<ContextInner>,
        channel: Option<Arc<crate::channel::ChannelShared>>,
        cqe: u32,
    ) -> Arc<CqShared> {
        // SAFETY: `cq` and its context are the fake's, alive (leaked) for the whole test.
        let poll_fn = unsafe { (*(*cq.as_ptr()).context).ops.poll_cq }.expect("fake poll_cq");
        Arc::new(CqShared {
            cq,
            poll_fn,
            cqe,
            quirk: WcFlagsQuirk::None,
            dev_tag: ctx.tag,
            ctx,
            channel,
            armed: AtomicBool::new(false),
            waiters: std::sync::atomic::AtomicUsize::new(0),
            await_polls: AtomicU32::new(0),
            routes: PollLock::new(Routing { routes: Vec::new(), wcs: [sys::ibv_wc::default(); POLL_BATCH] }),
            retired: std::sync::Mutex::new(Vec::new()),
            reserved: std::sync::atomic::AtomicU64::new(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{PollGuard, PollLock, WcFlagsQuirk};
    use typed_verbs_sys as sys;

    // A guard shares its value as a `&mut T` would: between threads only a `Sync` value (two
    // threads holding `&guard` of a `Cell` would race on it), and it moves to another thread
    // with a `Send` one.
    static_assertions::assert_not_impl_any!(PollGuard<'static, std::cell::Cell<u64>>: Sync);
    static_assertions::assert_impl_all!(PollGuard<'static, std::cell::Cell<u64>>: Send);
    static_assertions::assert_not_impl_any!(PollGuard<'static, std::rc::Rc<u64>>: Send, Sync);
    static_assertions::assert_impl_all!(PollGuard<'static, u64>: Send, Sync);

    #[test]
    fn the_poll_lock_excludes_and_survives_a_panic() {
        // Four threads do a non-atomic read-modify-write under the lock: no update may be lost.
        let lock = PollLock::new((0u64, 0u64));
        std::thread::scope(|t| {
            for _ in 0..4 {
                t.spawn(|| {
                    for _ in 0..20_000 {
                        let mut g = lock.lock();
                        let v = g.0;
                        std::hint::black_box(&mut *g);
                        g.0 = v + 1;
                        g.1 += 2;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), (80_000, 160_000));
        // A panic while it is held releases it (no poisoning).
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = lock.lock();
            panic!("while holding the routing lock");
        }));
        assert!(r.is_err());
        let mut g = lock.lock();
        g.0 += 1;
        assert_eq!(g.0, 80_001);
    }

    /// A thread that releases the routing lock and takes it again at once (a polling loop)
    /// comes after a thread that was already waiting for it: the wait of a thread sharing a
    /// busy CQ is bounded by one hold of each thread ahead of it, not by their luck.
    #[test]
    fn the_poll_lock_goes_first_to_the_thread_that_waited_first() {
        for round in 0..100 {
            let lock = PollLock::new(Vec::new());
            let held = lock.lock();
            std::thread::scope(|t| {
                let waiter = t.spawn(|| lock.lock().push("waiter"));
                let start = std::time::Instant::now();
                // The waiter has its ticket once two threads hold or wait for the lock.
                while lock.queued() < 2 {
                    assert!(start.elapsed() < std::time::Duration::from_secs(10), "round {round}: no waiter");
                    std::thread::yield_now();
                }
                drop(held);
                lock.lock().push("holder again");
                waiter.join().unwrap();
            });
            assert_eq!(*lock.lock(), ["waiter", "holder again"], "round {round}");
            assert_eq!(lock.queued(), 0, "round {round}: every guard released its ticket");
        }
    }

    #[test]
    fn kernel_numbering_swaps_invalidate_and_checksum_bits() {
        let q = WcFlagsQuirk::KernelNumbering;
        assert_eq!(q.fix(1 << 2), sys::IBV_WC_WITH_INV);
        assert_eq!(q.fix(1 << 3), sys::IBV_WC_IP_CSUM_OK);
        assert_eq!(q.fix(sys::IBV_WC_GRH | sys::IBV_WC_WITH_IMM), sys::IBV_WC_GRH | sys::IBV_WC_WITH_IMM);
        assert_eq!(WcFlagsQuirk::None.fix(1 << 2), 1 << 2);
    }
}
