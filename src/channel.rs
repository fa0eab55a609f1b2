//! Completion channels: `ibv_create_comp_channel`, `ibv_req_notify_cq`, `ibv_get_cq_event`,
//! `ibv_ack_cq_events`.
//!
//! A [`CompChannel`] lets a thread sleep until a completion arrives instead of spinning on
//! `ibv_poll_cq`. The protocol (ibv_get_cq_event(3)):
//!
//! 1. create CQs on the channel ([`Context::create_cq_with_channel`]);
//! 2. arm a CQ with [`Cq::req_notify`]: the *next* completion added to it will produce one event
//!    on the channel (one event per arming);
//! 3. block in [`CompChannel::wait`] (bounded by a timeout; or `CompChannel::wait_async` with
//!    the `tokio` feature), which says which CQ fired;
//! 4. re-arm, then poll the CQ (here: collect tokens with
//!    [`Scope::wait`](crate::scope::Scope::wait)), so that a completion that arrived between the
//!    event and the re-arming is not missed.
//!
//! Rules that are not left to the caller:
//! - every event read with `ibv_get_cq_event` must be acknowledged with `ibv_ack_cq_events`
//!   before its CQ is destroyed (otherwise `ibv_destroy_cq` waits forever): [`CompChannel::wait`]
//!   acknowledges each event before it returns, so no unacknowledged event ever exists outside
//!   this module;
//! - the channel must outlive every CQ attached to it (`ibv_destroy_comp_channel` fails with
//!   EBUSY otherwise): each such CQ holds a reference to the channel;
//! - the channel's file descriptor is made non-blocking at creation, so `ibv_get_cq_event` never
//!   blocks; the only blocking call is poll(2), with the caller's timeout.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
#[cfg(feature = "tokio")]
use std::task::Poll;
use std::time::{Duration, Instant};

use typed_verbs_sys as sys;

use crate::cq::{Cq, CqShared};
use crate::device::{Context, ContextInner};
use crate::error::{Error, Result, Verb};

/// A completion channel: `struct ibv_comp_channel`. Cheap to clone (shared); destroyed with
/// `ibv_destroy_comp_channel` when the last clone and every CQ attached to it are gone.
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<ChannelShared>,
}

pub(crate) struct ChannelShared {
    ch: NonNull<sys::ibv_comp_channel>,
    /// The channel's file descriptor (non-blocking), owned by libibverbs.
    fd: RawFd,
    ctx: Arc<ContextInner>,
    /// The CQs attached to this channel, by the address of their `ibv_cq`, to say which of the
    /// caller's `Cq`s an event names.
    cqs: Mutex<Vec<(usize, Weak<CqShared>)>>,
    /// The futures waiting on this channel's CQs and the CQs whose events await service
    /// ([`CompChannel::dispatch`]).
    driver: Mutex<Driver>,
}

/// The futures' side of a channel ([`crate::owned::OwnedCompletion`]).
#[derive(Default)]
struct Driver {
    /// Futures waiting for a request that completes on one of the channel's CQs.
    waiters: usize,
    /// CQs whose event was read and that futures wait on: served by the next `dispatch`.
    ready: Vec<Weak<CqShared>>,
    /// The running tokio driver tasks, at most one per runtime: a future is served by a task
    /// of the runtime it is polled on, whatever other runtimes (idle, blocked or leaked) do.
    tasks: Vec<DriverTask>,
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    next_gen: u64,
}

/// A running driver task.
struct DriverTask {
    /// Its generation (which task of the channel it is).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    gen: u64,
    /// The runtime it runs on.
    #[cfg(feature = "tokio")]
    runtime: tokio::runtime::Id,
    /// Its waker: woken when an event was read by another waiter ([`CompChannel::wait`]) or
    /// when the channel is dropped (the task then ends).
    waker: Option<std::task::Waker>,
}

impl Driver {
    /// The wakers of the driver tasks (`take`: forgotten).
    fn task_wakers(&mut self, take: bool) -> Vec<std::task::Waker> {
        let wakers = self.tasks.iter_mut();
        if take {
            wakers.filter_map(|t| t.waker.take()).collect()
        } else {
            wakers.filter_map(|t| t.waker.clone()).collect()
        }
    }

    /// Driver task `gen` ended: forgets it.
    #[cfg(feature = "tokio")]
    fn ended(&mut self, gen: u64) {
        self.tasks.retain(|t| t.gen != gen);
    }
}

/// How many events one [`CompChannel::dispatch`] reads at most.
const DISPATCH_EVENTS: usize = 64;
/// How many batches of 16 completions one [`CompChannel::dispatch`] polls at most from each CQ
/// that fired, and one poll of a future from its CQ.
pub(crate) const SERVE_BATCHES: usize = 4;

/// What one [`CompChannel::dispatch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dispatch {
    /// Completion events read from the channel (each acknowledged).
    pub events: usize,
    /// Completions polled (and routed to their requests' tokens and futures).
    pub completions: usize,
    /// Work was left for a later call, which should come without waiting for the channel's
    /// descriptor to become readable: more events than one call reads, or a CQ with more
    /// completions than one call polls.
    pub more: bool,
}

// SAFETY: a completion channel is a file descriptor read with `read(2)` by `ibv_get_cq_event`;
// libibverbs allows it to be used from any thread. Our own state is behind a mutex.
unsafe impl Send for ChannelShared {}
// SAFETY: as above.
unsafe impl Sync for ChannelShared {}

impl Drop for ChannelShared {
    fn drop(&mut self) {
        // The driver tasks end when polled again (they hold the channel weakly): woken now, so
        // that they close their duplicates of the descriptor.
        let drivers = lock(&self.driver).task_wakers(true);
        for w in drivers {
            w.wake();
        }
        // SAFETY: the channel is live and every CQ attached to it holds an `Arc` to this value,
        // so none is left (no EBUSY). Every event read from it was acknowledged inside `wait`.
        // A failure cannot be acted on in drop; it is ignored.
        let _ = unsafe { sys::ibv_destroy_comp_channel(self.ch.as_ptr()) };
    }
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompChannel").field("device", &self.inner.ctx.name).field("fd", &self.inner.fd).finish()
    }
}

/// One completion event: the CQ named by it had a completion added after it was armed with
/// [`Cq::req_notify`]. The event is already acknowledged (`ibv_ack_cq_events`).
///
/// An event is a hint, not a completion: poll the CQ (collect the tokens) to get the
/// completions, after re-arming it.
#[derive(Clone, Debug)]
pub struct CqEvent {
    cq: Cq,
}

impl CqEvent {
    /// The CQ that fired.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// True when the event is for `cq` (or a clone of it).
    pub fn is_for(&self, cq: &Cq) -> bool {
        self.cq.same_as(cq)
    }

    /// The CQ that fired, by value.
    pub fn into_cq(self) -> Cq {
        self.cq
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The registry is consistent at every step, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Context {
    /// `ibv_create_comp_channel`: a completion channel of this device, with its file descriptor
    /// set to non-blocking (`fcntl(O_NONBLOCK)`), so that reading it never blocks unboundedly.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_create_comp_channel` and its errno (also when setting the file
    /// descriptor non-blocking fails).
    ///
    /// See ibv_create_comp_channel(3).
    #[doc(alias = "ibv_create_comp_channel")]
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        // SAFETY: the context is open.
        let ch = unsafe { sys::ibv_create_comp_channel(self.as_ptr()) };
        let ch = NonNull::new(ch)
            .ok_or_else(|| Error::last_os(Verb::CreateCompChannel, format!("device {}", self.inner.name)))?;
        // SAFETY: `ch` is a live channel returned just above.
        let fd = unsafe { (*ch.as_ptr()).fd };
        // Owned from here on: an error below destroys the channel.
        let shared = ChannelShared {
            ch,
            fd,
            ctx: Arc::clone(&self.inner),
            cqs: Mutex::new(Vec::new()),
            driver: Mutex::new(Driver::default()),
        };
        set_nonblocking(fd).map_err(|e| {
            Error::verb(
                Verb::CreateCompChannel,
                format!("fcntl(O_NONBLOCK) on the channel fd {fd} of {}", self.inner.name),
                e,
            )
        })?;
        Ok(CompChannel { inner: Arc::new(shared) })
    }

    /// `ibv_create_cq` with room for at least `cqe` completions, reporting to `channel`
    /// (arm it with [`Cq::req_notify`], wait with [`CompChannel::wait`]). The channel stays alive
    /// as long as the CQ.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for `cqe == 0` or above the device's `max_cqe`, or a channel
    ///   of another device context;
    /// - [`Error::Verb`] with `ibv_create_cq` and its errno.
    ///
    /// See ibv_create_cq(3).
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq_with_channel(&self, cqe: u32, channel: &CompChannel) -> Result<Cq> {
        if !Arc::ptr_eq(&self.inner, &channel.inner.ctx) {
            return Err(Error::invalid(
                "ibv_create_cq",
                format!(
                    "the completion channel belongs to another context (of {}) than the CQ (of {})",
                    channel.inner.ctx.name, self.inner.name
                ),
            ));
        }
        let cq = self.create_cq_on(cqe, channel.inner.ch.as_ptr(), Some(Arc::clone(&channel.inner)))?;
        let mut cqs = lock(&channel.inner.cqs);
        cqs.retain(|(_, w)| w.strong_count() > 0);
        cqs.push((cq.as_ptr() as usize, Arc::downgrade(&cq.inner)));
        // Room for each CQ in the list of CQs to serve (at most once each), reserved now: a
        // dispatch that finds more CQs ready at once than ever before allocates nothing.
        let mut d = lock(&channel.inner.driver);
        let want = cqs.len().saturating_sub(d.ready.len());
        d.ready.reserve(want);
        drop(d);
        Ok(cq)
    }
}

impl Cq {
    /// `ibv_req_notify_cq`: arms the CQ so that the next completion added to it (with
    /// `solicited_only`, the next *solicited* receive completion or any error completion)
    /// produces one event on its completion channel.
    ///
    /// An arming is consumed by the one event it produces: re-arm after each event. Completions
    /// already in the CQ when it is armed produce no event, so the usual loop is: wait for the
    /// event, re-arm, then poll until the CQ is empty. Arming a CQ that has no channel does
    /// nothing observable.
    ///
    /// Futures waiting on the CQ ([`OwnedToken`](crate::owned::OwnedToken) awaited) need it
    /// armed for any completion, and nothing in the verbs says whether a solicited-only arming
    /// leaves an earlier arming for any completion in force (rxe keeps it; a provider may keep
    /// the last one). So after a solicited-only arming the library counts its own arming gone:
    /// if futures wait, this call serves the CQ at once (polls it, routing what it finds, arms
    /// it for any completion again, and polls until a poll after the arming finds it empty, or
    /// about as many completions as the CQ holds were taken) and queues it for the channel's
    /// next dispatch. While
    /// futures wait on the CQ, its events are the library's: [`CompChannel::dispatch`] (the
    /// tokio driver's) reads them, so the program's arming is superseded.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_req_notify_cq` and its errno, or with `ibv_poll_cq` when the
    /// CQ is served.
    ///
    /// See ibv_req_notify_cq(3).
    #[doc(alias = "ibv_req_notify_cq")]
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: the CQ is alive (we hold a reference to it).
        let ret = unsafe { sys::ibv_req_notify_cq(self.as_ptr(), c_int::from(solicited_only)) };
        if ret != 0 {
            return Err(Error::from_ret(
                Verb::ReqNotifyCq,
                format!("{} CQ on {}", if solicited_only { "solicited-only" } else { "any" }, self.device_name()),
                ret,
            ));
        }
        if solicited_only {
            if let Some(ch) = &self.inner.channel {
                ch.arming_replaced(&self.inner)?;
            }
        }
        Ok(())
    }
}

/// What one non-blocking `ibv_get_cq_event` produced.
enum Got {
    /// An event for one of our live CQs (acknowledged).
    Event(CqEvent),
    /// An event for a CQ that is being destroyed (acknowledged, nobody to report it to).
    Stale,
    /// No event was pending (EAGAIN).
    Nothing,
}

impl CompChannel {
    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_comp_channel {
        self.inner.ch.as_ptr()
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.inner.fd
    }

    /// `ibv_get_cq_event`, bounded: waits at most `timeout` for the next completion event on this
    /// channel: poll(2) on the channel's file descriptor, then `ibv_get_cq_event`, then
    /// `ibv_ack_cq_events` for that one event, before returning which CQ fired.
    ///
    /// Only CQs armed with [`Cq::req_notify`] produce events. Several threads may wait on one
    /// channel; each event goes to one of them. An event for a CQ that is being dropped is
    /// acknowledged and skipped.
    ///
    /// # Errors
    /// - [`Error::Timeout`] if no event arrived within `timeout`;
    /// - [`Error::Verb`] with `ibv_get_cq_event` and the errno of poll(2) or of the read.
    ///
    /// See ibv_get_cq_event(3).
    #[doc(alias = "ibv_get_cq_event")]
    #[doc(alias = "ibv_ack_cq_events")]
    pub fn wait(&self, timeout: Duration) -> Result<CqEvent> {
        let start = Instant::now();
        loop {
            let remaining = timeout.saturating_sub(start.elapsed());
            let ready = poll_readable(self.inner.fd, remaining).map_err(|e| {
                Error::verb(
                    Verb::GetCqEvent,
                    format!("poll(2) on the completion channel of {}", self.inner.ctx.name),
                    e,
                )
            })?;
            if !ready {
                return Err(Error::Timeout {
                    what: format!("a completion event on the channel of {}", self.inner.ctx.name),
                    after: timeout,
                });
            }
            match self.try_get(false)? {
                Got::Event(ev) => return Ok(ev),
                // Another thread took the event, or it was for a CQ being dropped: wait on.
                Got::Stale | Got::Nothing => {}
            }
        }
    }

    /// One non-blocking `ibv_get_cq_event`, acknowledged at once.
    fn try_get(&self, from_dispatch: bool) -> Result<Got> {
        let mut cq: *mut sys::ibv_cq = ptr::null_mut();
        let mut cq_context: *mut std::ffi::c_void = ptr::null_mut();
        // SAFETY: the channel is live; its fd is non-blocking, so the call returns at once;
        // the out-pointers are valid; `verbs.get_cq_event` is `ibv_get_cq_event` (a test's fake
        // of its type on the fake device).
        let ret = unsafe { (self.inner.ctx.verbs.get_cq_event)(self.inner.ch.as_ptr(), &mut cq, &mut cq_context) };
        if ret != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                return Ok(Got::Nothing);
            }
            return Err(Error::verb(
                Verb::GetCqEvent,
                format!("reading the completion channel of {}", self.inner.ctx.name),
                e,
            ));
        }
        if cq.is_null() {
            return Ok(Got::Stale);
        }
        // Find the CQ before acknowledging: until the event is acknowledged, `ibv_destroy_cq`
        // of that CQ cannot complete, so its address cannot have been reused by another CQ.
        // A CQ whose last handle is being dropped fails to upgrade.
        let found = {
            let cqs = lock(&self.inner.cqs);
            cqs.iter().filter(|(p, _)| *p == cq as usize).find_map(|(_, w)| w.upgrade())
        };
        // SAFETY: `cq` was returned by `ibv_get_cq_event` for one event that is not yet
        // acknowledged, so the CQ is still allocated (its destruction waits for this ack).
        unsafe { sys::ibv_ack_cq_events(cq, 1) };
        Ok(match found {
            Some(inner) => {
                self.inner.event_for(&inner, from_dispatch);
                Got::Event(CqEvent { cq: Cq { inner } })
            }
            None => Got::Stale,
        })
    }
}

impl ChannelShared {
    /// An event for `cq` was read (by [`CompChannel::dispatch`] or another waiter): its arming
    /// is used up. If futures wait on it, it is served by the next `dispatch`; an event read by
    /// another waiter ([`CompChannel::wait`]) wakes the driver task for that.
    fn event_for(&self, cq: &Arc<CqShared>, from_dispatch: bool) {
        // SeqCst, as the future's side (`wait_on`'s count, `serve`'s swap): a store then a load
        // of another variable on each side, so that either this load sees the new waiter or
        // that swap sees `armed` cleared and arms again (else the event is dropped here and
        // the CQ stays unarmed). No test produces the interleaving.
        cq.armed.store(false, std::sync::atomic::Ordering::SeqCst);
        if cq.waiters.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            return;
        }
        self.serve_next(cq, !from_dispatch);
    }

    /// The program armed `cq` itself for solicited completions only ([`Cq::req_notify`]),
    /// which may have replaced an arming made for the futures waiting on it: as after an event
    /// read elsewhere, the arming counts as used up and, if futures wait, the next dispatch
    /// serves the CQ. If futures wait, the CQ is also served now (polled, armed for any
    /// completion, polled again), whatever executor (or none) dispatches the channel, so that
    /// what lands from here on produces an event: served until a poll after the arming finds
    /// it empty, since completions left in it would produce no event, and an executor that
    /// dispatches only when the channel's descriptor is readable would never come back for
    /// them. Once about as many completions as the CQ holds were taken (a CQ that keeps
    /// filling), it stops there, armed for any completion all the same, and wakes the futures
    /// waiting on the CQ: each serves it itself (the queued dispatch, which the tokio driver
    /// runs at once, serves it too).
    ///
    /// # Errors
    /// A failed poll or arming of the CQ.
    pub(crate) fn arming_replaced(&self, cq: &Arc<CqShared>) -> Result<()> {
        self.event_for(cq, false);
        if cq.waiters.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            let mut left = cq.capacity();
            loop {
                let (n, more) = cq.serve(SERVE_BATCHES)?;
                if !more {
                    break;
                }
                if n >= left {
                    // Its batches all came back full: `serve` may not have reached its arming.
                    // Armed now; completions left from before the arming fire no event: the
                    // futures waiting here are woken, and each serves the CQ itself (its own
                    // bounded serving wakes it again while more is left).
                    let armed = cq.arm_once();
                    cq.wake_waiters();
                    armed?;
                    break;
                }
                left -= n;
            }
        }
        Ok(())
    }

    /// Queues `cq` to be served by the next [`CompChannel::dispatch`], and with `wake_drivers`
    /// wakes the driver tasks for it (outside the lock).
    fn serve_next(&self, cq: &Arc<CqShared>, wake_drivers: bool) {
        let drivers = {
            let mut d = lock(&self.driver);
            if !d.ready.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(cq))) {
                d.ready.push(Arc::downgrade(cq));
            }
            if wake_drivers {
                d.task_wakers(false)
            } else {
                Vec::new()
            }
        };
        for w in drivers {
            w.wake();
        }
    }

    /// A future's poll served `cq`, left completions in it (its bounded batches) and then
    /// resolved, so it will not poll again for them: they may be other futures' and no event
    /// may come for them (they can have landed before the CQ's arming took effect), so the
    /// next dispatch serves the CQ, as for an event read elsewhere.
    pub(crate) fn left_in(&self, cq: &Arc<CqShared>) {
        self.serve_next(cq, true);
    }

    /// Wakes every future waiting on one of the channel's CQs (the wakes run at the caller's
    /// `DeferWakes`, or at once): after a failed serving, when a driver task ends.
    fn wake_all_waiting(&self) {
        let cqs: Vec<_> = lock(&self.cqs).iter().filter_map(|(_, w)| w.upgrade()).collect();
        for cq in &cqs {
            if cq.waiters.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                cq.wake_waiters();
            }
        }
    }

    /// Whether `cq` is queued for the next dispatch (the fake device's tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_queued(&self, cq: &Arc<CqShared>) -> bool {
        lock(&self.driver).ready.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(cq)))
    }

    /// A future starts waiting on one of this channel's CQs. The first after an idle period
    /// wakes the driver tasks, which then wait for the descriptor again.
    pub(crate) fn add_waiter(&self) {
        let mut d = lock(&self.driver);
        d.waiters += 1;
        if d.waiters == 1 {
            // Under the lock, by reference: no allocation, and a driver task's waker is its
            // tokio task's, which schedules the task and never runs it here.
            for t in &d.tasks {
                if let Some(w) = &t.waker {
                    w.wake_by_ref();
                }
            }
        }
    }

    /// A future stopped waiting on one of this channel's CQs. The driver tasks stay, idle (they
    /// read no event): the next future that waits wakes them, and needs no new task nor a new
    /// registration with the reactor.
    pub(crate) fn remove_waiter(&self) {
        let mut d = lock(&self.driver);
        d.waiters = d.waiters.saturating_sub(1);
    }
}

impl CompChannel {
    /// `ibv_get_cq_event` (each event acknowledged at once with `ibv_ack_cq_events`), then
    /// `ibv_poll_cq` and `ibv_req_notify_cq` of each CQ that fired: serves the futures waiting
    /// on this channel's CQs ([`OwnedToken`](crate::owned::OwnedToken) awaited,
    /// [`OwnedCompletion`](crate::owned::OwnedCompletion)). Reads the pending completion
    /// events (at most 64), and for each CQ that fired and has futures waiting,
    /// polls and routes its completions (at most 4 batches of 16), which wakes the futures
    /// whose requests completed, then re-arms it (`ibv_req_notify_cq`) and polls once more.
    /// Never blocks.
    ///
    /// This is what an executor other than tokio plugs in: register the channel's descriptor
    /// ([`AsFd`](std::os::fd::AsFd)) with its reactor for readability, and when it is readable,
    /// call `dispatch` until it returns `more == false` (yielding between calls), then wait for
    /// readability again (with an edge-triggered reactor, only after `more == false`: the
    /// descriptor was drained). With the `tokio` feature, a future that has to wait starts a
    /// task on the current tokio runtime that does exactly this, so tokio programs need
    /// nothing (a waker that panics comes out of `dispatch` after its work is done; the tokio
    /// task goes on serving the channel). The futures' wakers are called inside this call, at
    /// its end, after every lock of the library is released: a waker may schedule its task or
    /// poll it inline (see
    /// [`owned`](crate::owned#awaiting-a-token)). While futures wait, this reads every event of
    /// the channel, and an event for a CQ no future waits on is acknowledged and dropped: a
    /// program's own [`CompChannel::wait`] should use another channel.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_get_cq_event` (reading the channel), `ibv_poll_cq` or
    /// `ibv_req_notify_cq` and their errno.
    ///
    /// See ibv_get_cq_event(3), ibv_req_notify_cq(3).
    #[doc(alias = "ibv_get_cq_event")]
    pub fn dispatch(&self) -> Result<Dispatch> {
        self.dispatch_reading(true)
    }

    /// [`CompChannel::dispatch`]; without `read`, it reads no event and only serves the CQs
    /// queued for it (the tokio driver on a descriptor that reports an error).
    fn dispatch_reading(&self, read: bool) -> Result<Dispatch> {
        // The futures it completes are woken when it returns: after every CQ it served was
        // re-armed and the list of CQs still to serve restored, so that a waker that panics
        // leaves nothing unarmed or forgotten.
        let _wakes = crate::queue::DeferWakes::new();
        let mut out = Dispatch::default();
        let mut drained = !read;
        for _ in 0..if read { DISPATCH_EVENTS } else { 0 } {
            match self.try_get(true)? {
                Got::Event(_) | Got::Stale => out.events += 1,
                Got::Nothing => {
                    drained = true;
                    break;
                }
            }
        }
        let mut ready = std::mem::take(&mut lock(&self.inner.driver).ready);
        let mut left = Vec::new();
        let mut failed = None;
        for w in ready.drain(..) {
            let Some(cq) = w.upgrade() else { continue };
            if failed.is_some() {
                left.push(w);
                continue;
            }
            match cq.serve(SERVE_BATCHES) {
                Ok((n, more)) => {
                    out.completions += n;
                    if more {
                        left.push(w);
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    // Served again only for futures that still wait on it: a CQ that fails for
                    // good would fail every later dispatch before the CQs queued behind it.
                    if cq.waiters.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                        left.push(w);
                    }
                }
            }
        }
        if failed.is_some() {
            // A driver task ends at a failed dispatch, and the CQs queued behind the failing
            // one were not served: every future waiting on one of the channel's CQs is woken
            // (at this call's end), polls again, and serves its CQ itself and starts a new
            // driver, or resolves.
            self.inner.wake_all_waiting();
        }
        out.more = !drained || !left.is_empty();
        {
            let mut d = lock(&self.inner.driver);
            // The list's storage back, unless CQs were queued meanwhile: no allocation per
            // dispatch.
            if d.ready.is_empty() {
                std::mem::swap(&mut d.ready, &mut ready);
            }
            for w in left {
                if !d.ready.iter().any(|r| r.ptr_eq(&w)) {
                    d.ready.push(w);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

impl std::os::fd::AsFd for CompChannel {
    /// The channel's descriptor (non-blocking), to register with a reactor for readability
    /// ([`CompChannel::dispatch`]).
    ///
    /// Never read it yourself: an event read from the descriptor rather than taken by the
    /// library (`ibv_get_cq_event`) is never acknowledged, and destroying its CQ then waits for
    /// that acknowledgement forever (ibv_get_cq_event(3)): dropping the last handle of the CQ
    /// hangs.
    ///
    /// Nor change its flags: it shares them with every duplicate, and the library's reads rely
    /// on `O_NONBLOCK` (set when the descriptor was created). A descriptor made blocking
    /// through a duplicate makes the library's next read with no event waiting block its thread
    /// (a `dispatch`, the tokio driver task) until an event arrives.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the descriptor belongs to the channel, which `self` keeps open for the
        // borrow's lifetime.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.inner.fd) }
    }
}

/// Registers a duplicate of `fd` with the current tokio runtime's reactor, for readability
/// (a completion channel's, a CM event channel's or a context's async event descriptor). On
/// failure, what failed and its error: outside a tokio runtime, or in one without I/O.
///
/// Tokio panics when there is no reactor to register with. Outside a runtime this asks first;
/// for a runtime built without I/O (`enable_io`) tokio offers no question, so that panic is
/// caught here and reported as an error (with unwinding: under `panic = "abort"` it aborts, and
/// the panic hook prints tokio's message either way): no async wait of the library panics on
/// either (device
/// `async_hostile::async_waits_in_a_runtime_without_io_fail_typed`,
/// `events::async_events_outside_a_runtime_are_typed_errors_and_another_runtime_takes_over`).
#[cfg(feature = "tokio")]
pub(crate) fn register_readable(
    fd: std::os::fd::BorrowedFd<'_>,
) -> std::result::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>, (&'static str, io::Error)> {
    use tokio::io::{unix::AsyncFd, Interest};
    if let Err(e) = tokio::runtime::Handle::try_current() {
        return Err(("outside a tokio runtime", io::Error::other(e)));
    }
    let dup = fd.try_clone_to_owned().map_err(|e| ("duplicating the descriptor", e))?;
    let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `dup` is an `OwnedFd`: open, owned by the `AsyncFd` for its whole life, and
        // its `as_raw_fd` always returns the same descriptor.
        unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }
    }));
    match registered {
        Ok(r) => r.map_err(|e| ("registering the descriptor with the tokio reactor", e.into())),
        Err(panic) => {
            // Its drop could panic again.
            std::mem::forget(panic);
            Err((
                "registering the descriptor with the tokio reactor: a runtime without I/O (built without `enable_io`)",
                io::Error::other("the tokio runtime has no I/O driver"),
            ))
        }
    }
}

/// A descriptor's readability as the reactor of the runtime that polls it sees it: registered
/// (a duplicate, [`register_readable`]) at the first poll, and again whenever a poll comes from
/// a task of another runtime (a future moved between runtimes, a reader polled by another
/// runtime's task), so that the runtime that polls is the one that wakes the task, whatever the
/// first one does meanwhile (idle, blocked, shut down). A poll outside any runtime keeps a
/// multi-threaded runtime's registration, whose reactor its workers drive; a current-thread
/// runtime drives its reactor only inside its `block_on`, so outside it such a poll could wait
/// unwoken: it is a typed error, as a poll outside a runtime with nothing registered is (also
/// when that runtime's `block_on` is running on another thread, which the poll cannot tell).
#[cfg(feature = "tokio")]
#[derive(Default)]
pub(crate) struct Readable {
    reg: Option<Registration>,
}

/// A descriptor registered with a runtime's reactor: the runtime, whether its reactor runs
/// outside the program's `block_on` (a multi-threaded runtime's), and the registration.
#[cfg(feature = "tokio")]
struct Registration {
    runtime: tokio::runtime::Id,
    driven_alone: bool,
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

#[cfg(feature = "tokio")]
impl Readable {
    /// Whether it is registered with a reactor.
    pub(crate) fn is_registered(&self) -> bool {
        self.reg.is_some()
    }

    /// Takes what `read` reads off `fd` (the same descriptor at every call), waiting for the
    /// reactor to report it readable: `Some` resolves; `None` (drained) clears the readiness,
    /// which only then is safe (edge-triggered reactor), and waits again. A registration or
    /// reactor failure is `fail(what failed, its error)`.
    pub(crate) fn poll_read<T, E>(
        &mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        cx: &mut std::task::Context<'_>,
        mut read: impl FnMut() -> std::result::Result<Option<T>, E>,
        fail: impl Fn(&'static str, io::Error) -> E,
    ) -> Poll<std::result::Result<T, E>> {
        loop {
            let mut guard = match self.poll_read_ready(fd, cx) {
                Poll::Pending => return self.poll_error(cx, read, fail),
                Poll::Ready(Ok(guard)) => guard,
                Poll::Ready(Err((what, e))) => return Poll::Ready(Err(fail(what, e))),
            };
            match read() {
                Ok(Some(v)) => return Poll::Ready(Ok(v)),
                Ok(None) => guard.clear_ready(),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// The registered descriptor is not readable: whether it reports an error instead. A
    /// descriptor that reports only an error (`EPOLLERR` without `EPOLLIN`: a uverbs event
    /// file once its device was disassociated, whose reads then fail with EIO) never becomes
    /// readable, and tokio wakes no read-readiness waiter for it: it reports it as write-closed
    /// (mio), which wakes a write-readiness waiter. So `cx` waits on that side too (the
    /// registration asks for no write readiness: none comes but with an error or a hang-up),
    /// and on an error the descriptor is read once: what it gives (its error, typically), or
    /// `fail` when it gives nothing (a dead descriptor would report the same at every poll).
    fn poll_error<T, E>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        mut read: impl FnMut() -> std::result::Result<Option<T>, E>,
        fail: impl Fn(&'static str, io::Error) -> E,
    ) -> Poll<std::result::Result<T, E>> {
        let Some(r) = &self.reg else { return Poll::Pending };
        match r.fd.poll_write_ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(fail("waiting for the descriptor", e))),
            Poll::Ready(Ok(_)) => Poll::Ready(match read() {
                Ok(Some(v)) => Ok(v),
                Ok(None) => Err(fail(
                    "the descriptor reports an error (EPOLLERR) and has nothing to read",
                    io::Error::other("the descriptor reports an error"),
                )),
                Err(e) => Err(e),
            }),
        }
    }

    /// Polls `fd`'s readability, registering it first where needed. On failure, what failed
    /// and its error.
    fn poll_read_ready<'a>(
        &'a mut self,
        fd: std::os::fd::BorrowedFd<'_>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<
        std::result::Result<tokio::io::unix::AsyncFdReadyGuard<'a, std::os::fd::OwnedFd>, (&'static str, io::Error)>,
    > {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let current = Handle::try_current();
        match (&self.reg, current) {
            (Some(r), Ok(now)) if r.runtime == now.id() => {}
            // Outside a runtime: a registration whose reactor runs without the program.
            (Some(r), Err(_)) if r.driven_alone => {}
            (Some(_), Err(e)) => {
                let what = "outside a tokio runtime (the descriptor is registered with a current-thread runtime, \
                            whose reactor runs only inside its block_on)";
                return Poll::Ready(Err((what, io::Error::other(e))));
            }
            (None, Err(e)) => return Poll::Ready(Err(("outside a tokio runtime", io::Error::other(e)))),
            (_, Ok(now)) => match register_readable(fd) {
                Ok(afd) => {
                    let driven_alone = now.runtime_flavor() == RuntimeFlavor::MultiThread;
                    self.reg = Some(Registration { runtime: now.id(), driven_alone, fd: afd });
                }
                Err(e) => return Poll::Ready(Err(e)),
            },
        }
        match &self.reg {
            Some(r) => r.fd.poll_read_ready(cx).map_err(|e| ("waiting for the descriptor", e)),
            None => Poll::Ready(Err(("outside a tokio runtime", io::Error::other("nothing registered")))),
        }
    }
}

#[cfg(feature = "tokio")]
impl ChannelShared {
    /// The channel's descriptor, borrowed.
    fn borrowed_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the fd belongs to the channel, which stays open while `self` is borrowed.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) }
    }

    /// An async wait's failure at `what`, with its error.
    fn wait_error(&self, what: &str, e: io::Error) -> Error {
        Error::verb(Verb::GetCqEvent, format!("{what} (completion channel of {})", self.ctx.name), e)
    }

    /// Makes sure a task of the current tokio runtime serves this channel's futures (one per
    /// channel and runtime, started by the first future that has to wait there; it ends when
    /// the channel is dropped or the runtime shuts down, and idles in between). A task of
    /// another runtime is not enough: that runtime may not run (a current-thread runtime
    /// outside `block_on`, a blocked or leaked one). Outside a tokio runtime, nothing: the
    /// program calls [`CompChannel::dispatch`].
    ///
    /// # Errors
    /// As [`CompChannel::wait_async`] when the descriptor cannot be registered.
    pub(crate) fn ensure_driver(self: &Arc<Self>) -> Result<()> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Ok(());
        };
        let runtime = handle.id();
        let mut d = lock(&self.driver);
        if d.tasks.iter().any(|t| t.runtime == runtime) {
            return Ok(());
        }
        let afd = register_readable(self.borrowed_fd()).map_err(|(what, e)| self.wait_error(what, e))?;
        let gen = d.next_gen;
        d.next_gen += 1;
        d.tasks.push(DriverTask { gen, runtime, waker: None });
        drop(d);
        let guard = DriverGuard { ch: Arc::downgrade(self), gen };
        handle.spawn(async move {
            let guard = guard;
            std::future::poll_fn(|cx| drive(&guard, &afd, cx)).await;
        });
        Ok(())
    }
}

/// Marks the driver task `gen` as ended when it is dropped (it ended, or its runtime shut down
/// and dropped it, polled or not).
#[cfg(feature = "tokio")]
struct DriverGuard {
    ch: Weak<ChannelShared>,
    gen: u64,
}

#[cfg(feature = "tokio")]
impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(ch) = self.ch.upgrade() {
            lock(&ch.driver).ended(self.gen);
        }
    }
}

/// One poll of a channel's driver task: while futures wait, waits for the descriptor to be
/// readable and dispatches. A dispatch that left work yields (the task wakes itself) instead
/// of looping: the work per wakeup is one `dispatch`. With no future waiting it idles, reading
/// nothing, until a future waits again (`ChannelShared::add_waiter` wakes it). Ends when the
/// channel is gone (its drop wakes the task), or when the reactor or a dispatch fails (a
/// failed dispatch, whether its serving of a CQ or its read of the channel failed, wakes every
/// future waiting on the channel's CQs, also after this task counts as ended: polled again,
/// each that still has to wait serves its CQ itself and starts a new driver, or reports the
/// failure; see DESIGN.md).
#[cfg(feature = "tokio")]
fn drive(
    guard: &DriverGuard,
    afd: &tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<()> {
    // A readiness that was drained and cleared is looked at again at once (it registers the
    // waker); bounded, as a reactor may report readiness again and again.
    for _ in 0..4 {
        let Some(inner) = guard.ch.upgrade() else { return Poll::Ready(()) };
        {
            let mut d = lock(&inner.driver);
            let Some(me) = d.tasks.iter_mut().find(|t| t.gen == guard.gen) else {
                return Poll::Ready(());
            };
            match &mut me.waker {
                Some(w) => w.clone_from(cx.waker()),
                None => me.waker = Some(cx.waker().clone()),
            }
            if d.waiters == 0 && d.ready.is_empty() {
                // Idle: it reads no event (the program's own `wait` may be reading this
                // channel). The next future that waits wakes it (`add_waiter`, under this lock
                // after the waker above was stored), and so does the channel's drop.
                return Poll::Pending;
            }
        }
        let mut ready = match afd.poll_read_ready(cx) {
            Poll::Pending => None,
            Poll::Ready(Ok(g)) => Some(g),
            Poll::Ready(Err(_)) => return Poll::Ready(()),
        };
        let channel = CompChannel { inner };
        // The futures a dispatch wakes are woken when this ends: a failed dispatch ends this
        // task, and the futures it woke must find it gone, so that the first to wait again
        // starts a new driver (on another worker, a woken future may be polled before this
        // task returns).
        let wakes = crate::queue::DeferWakes::new();
        // A waker that panics (another executor's) panics out of `dispatch` once its work is
        // done (it wakes at its end): the panic hook has reported it, and the task goes on,
        // since the other futures of the channel depend on it. The payload is leaked (its drop
        // could panic again).
        let dispatched = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut done = channel.dispatch();
            // Not reported readable, the dispatch read anyway (events may have come before the
            // registration, which the reactor reports only later), and the read failed: when
            // the descriptor reports an error (a uverbs event file of a disassociated device:
            // `EPOLLERR` without `EPOLLIN`, asked of the descriptor itself, poll(2), since a new
            // registration's readiness may not be in yet) every read fails at once (EIO). Were
            // that failure this task's end, the futures it wakes would start the next driver,
            // which would read and fail at once again: the tasks would run without pause. So
            // the dispatch serves only the CQs queued for it, and this task then waits. (One
            // poll(2), only after a failed read.)
            if done.is_err() && ready.is_none() {
                let fd = std::os::fd::AsRawFd::as_raw_fd(afd.get_ref());
                if poll_readable(fd, Duration::ZERO).is_err() {
                    done = channel.dispatch_reading(false);
                }
            }
            if done.is_err() {
                lock(&channel.inner.driver).ended(guard.gen);
                // Again once this task counts as ended: a future that started waiting during
                // the dispatch, after its wakes were taken, found this task still listed and
                // started no driver (its `ensure_driver` and this `ended` take the same lock,
                // so it is either seen here or finds this task gone).
                channel.inner.wake_all_waiting();
            }
            drop(wakes);
            done
        }));
        let done = match dispatched {
            Ok(Ok(done)) => done,
            Ok(Err(_)) => return Poll::Ready(()),
            Err(panic) => {
                std::mem::forget(panic);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        };
        if done.more {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match ready.as_mut() {
            None => return Poll::Pending,
            // Drained: only now may the readiness be cleared (edge-triggered reactor).
            Some(g) => g.clear_ready(),
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

#[cfg(feature = "tokio")]
impl CompChannel {
    /// `ibv_get_cq_event`, awaited: the asynchronous [`wait`](Self::wait), resolving with the next
    /// completion event on this channel (`ibv_get_cq_event`, acknowledged with `ibv_ack_cq_events`
    /// before it resolves), waiting for the channel's file descriptor with tokio's reactor
    /// ([`AsyncFd`](tokio::io::unix::AsyncFd)) instead of a blocked thread.
    ///
    /// Must be awaited within a tokio runtime with I/O enabled. Bound it with the runtime's
    /// timer (`tokio::time::timeout`): the future is cancel-safe (dropping it loses no event:
    /// an event is only read from the channel in the poll that resolves the future). Each call
    /// registers a duplicate of the channel's descriptor with the reactor, so any number of
    /// tasks, on any runtimes, may wait on one channel.
    ///
    /// Only with the `tokio` feature, which costs nothing when it is off (tokio is then not in
    /// the dependency graph) and nothing in a binary that does not call this method (measured:
    /// the release `rdma_read_write` example has no tokio symbol and is 16 bytes larger once
    /// stripped, codegen noise from the changed crate hash).
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_get_cq_event` when there is no tokio runtime or it has no I/O
    /// driver (built without `enable_io`; the latter needs unwinding: tokio panics there, which
    /// aborts under `panic = "abort"`), when the descriptor cannot be registered with the
    /// reactor, or when the read fails (also when the descriptor reports only an error, as once
    /// the device is gone: the read is tried then).
    ///
    /// See ibv_get_cq_event(3).
    #[doc(alias = "ibv_get_cq_event")]
    pub async fn wait_async(&self) -> Result<CqEvent> {
        // An event of a CQ gone meanwhile is skipped.
        let read = || loop {
            match self.try_get(false)? {
                Got::Event(ev) => return Ok(Some(ev)),
                Got::Stale => {}
                Got::Nothing => return Ok(None),
            }
        };
        let mut readable = Readable::default();
        let fail = |what, e| self.inner.wait_error(what, e);
        std::future::poll_fn(|cx| readable.poll_read(self.inner.borrowed_fd(), cx, read, fail)).await
    }
}

static_assertions::assert_impl_all!(CompChannel: Send, Sync);
static_assertions::assert_impl_all!(CqEvent: Send, Sync);
static_assertions::assert_impl_all!(Dispatch: Send, Sync, Unpin);

/// Sets `O_NONBLOCK` on `fd` (if it is not set already).
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL takes no argument and only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_NONBLOCK != 0 {
        return Ok(());
    }
    // SAFETY: F_SETFL takes one int argument: the new file status flags.
    let ret = unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// poll(2) on `fd` for input, for at most `timeout` (rounded up to a millisecond). Returns
/// whether it is readable; restarts after EINTR with the time left.
pub(crate) fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let start = Instant::now();
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        // Round up, so that a wait never returns "not ready" before its timeout.
        let ms = left.as_nanos().div_ceil(1_000_000);
        let ms = c_int::try_from(ms).unwrap_or(c_int::MAX);
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: `pfd` is one valid pollfd; poll only writes its `revents`.
        let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ret < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if ret == 0 {
            if start.elapsed() >= timeout {
                return Ok(false);
            }
            continue;
        }
        let revents = pfd.revents;
        if revents & libc::POLLIN != 0 {
            return Ok(true);
        }
        // POLLERR, POLLHUP or POLLNVAL without input: the descriptor is unusable.
        return Err(io::Error::other(format!("poll(2) reported revents {revents:#x} on fd {fd}")));
    }
}

/// Constructors of the fake device of `async_races` (test only).
#[cfg(all(test, not(loom)))]
impl CompChannel {
    /// A channel over a fake `ibv_comp_channel` whose `fd` the test writes events into.
    pub(crate) fn fake(ch: NonNull<sys::ibv_comp_channel>, fd: RawFd, ctx: Arc<ContextInner>) -> CompChannel {
        CompChannel {
            inner: Arc::new(ChannelShared {
                ch,
                fd,
                ctx,
                cqs: Mutex::new(Vec::new()),
                driver: Mutex::new(Driver::default()),
            }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<ChannelShared> {
        &self.inner
    }

    /// As `create_cq_with_channel` records a CQ.
    pub(crate) fn attach_fake(&self, cq: &Arc<CqShared>) {
        let p = Cq { inner: Arc::clone(cq) }.as_ptr() as usize;
        lock(&self.inner.cqs).push((p, Arc::downgrade(cq)));
    }
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::{Duration, Instant};

    use super::Readable;

    /// A non-blocking pipe: (read end, write end).
    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0i32; 2];
        // SAFETY: `pipe2` with a valid out-array; on success both descriptors are new and owned
        // by the `OwnedFd`s made of them, and nothing else closes them.
        unsafe {
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC), 0);
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        }
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);
    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    /// Registers `read` with `rt`'s reactor: one poll inside `rt.block_on`, with nothing to read.
    fn registered_with(rt: &tokio::runtime::Runtime, read: &OwnedFd) -> Readable {
        let mut r = Readable::default();
        rt.block_on(std::future::poll_fn(|cx| {
            assert!(r.poll_read_ready(read.as_fd(), cx).is_pending(), "nothing was written");
            Poll::Ready(())
        }));
        assert!(r.is_registered());
        r
    }

    /// A registration with a current-thread runtime, polled outside any runtime, is the typed
    /// refusal, not a wait its reactor would never end (it runs only inside `block_on`); one
    /// with a multi-threaded runtime is kept, and its workers' reactor wakes the waiter.
    #[test]
    fn outside_a_runtime_only_a_multithreaded_runtimes_registration_is_waited_on() {
        let (read, write) = pipe();
        let current = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        let mut r = registered_with(&current, &read);
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        match r.poll_read_ready(read.as_fd(), &mut Context::from_waker(&waker)) {
            Poll::Ready(Err((what, _))) => assert!(what.contains("current-thread"), "{what}"),
            Poll::Ready(Ok(_)) => panic!("ready with nothing written"),
            Poll::Pending => panic!("a wait that the current-thread runtime's reactor would never end"),
        }

        let multi = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_io().build().unwrap();
        let mut r = registered_with(&multi, &read);
        assert!(r.poll_read_ready(read.as_fd(), &mut Context::from_waker(&waker)).is_pending(), "kept, waiting");
        // SAFETY: one byte from a valid buffer to the pipe's open write end.
        assert_eq!(unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(&write), [1u8].as_ptr().cast(), 1) }, 1);
        let start = Instant::now();
        while wakes.0.load(SeqCst) == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the workers' reactor did not wake the waiter");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(matches!(r.poll_read_ready(read.as_fd(), &mut Context::from_waker(&waker)), Poll::Ready(Ok(_))));
    }

    /// A multi-threaded runtime's registration, kept and waited on outside any runtime, then the
    /// runtime shut down: the waiter is woken, and the next poll is the reactor's error, not a
    /// wait that nothing ends.
    #[test]
    fn a_kept_registration_whose_runtime_shuts_down_wakes_its_waiter_with_an_error() {
        let (read, _write) = pipe();
        let multi = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_io().build().unwrap();
        let mut r = registered_with(&multi, &read);
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        assert!(r.poll_read_ready(read.as_fd(), &mut Context::from_waker(&waker)).is_pending(), "kept, waiting");
        drop(multi);
        assert!(wakes.0.load(SeqCst) > 0, "the shut-down reactor woke the waiter");
        match r.poll_read_ready(read.as_fd(), &mut Context::from_waker(&waker)) {
            Poll::Ready(Err((what, _))) => assert_eq!(what, "waiting for the descriptor"),
            Poll::Ready(Ok(_)) => panic!("ready with nothing written"),
            Poll::Pending => panic!("a wait on a reactor that shut down"),
        }
    }
}
