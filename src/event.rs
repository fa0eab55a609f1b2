//! Asynchronous events of a device context: `ibv_get_async_event`, `ibv_ack_async_event`.
//!
//! The device reports things that happen outside any work request (a QP that went to the error
//! state, a port that went down, a CQ overrun) as asynchronous events on the context's
//! `async_fd`. [`Context::next_async_event`] waits for one, bounded by a timeout, copies it out
//! into an [`AsyncEvent`] and acknowledges it (`ibv_ack_async_event`) before returning, so an
//! unacknowledged event never exists outside this module (destroying a QP, CQ or SRQ waits until
//! every event naming it has been acknowledged).
//!
//! For an event loop, [`Context::async_events`] gives an [`AsyncEvents`]: a duplicate of
//! `async_fd` to register for readability and a non-blocking read
//! ([`AsyncEvents::try_next_event`]); with the `tokio` feature, `AsyncEvents::next` (an `async
//! fn`) and `AsyncEvents::poll_next_event` (a poll function, the shape of a `Stream`'s) wait
//! with tokio's reactor. Every reader of one context reads one queue: each event goes to exactly
//! one of them.
//!
//! Observed on Soft-RoCE (rxe, kernel 6.12, rdma-core 44): see `tests/device/events.rs`.
#![allow(unsafe_code)]

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
#[cfg(feature = "tokio")]
use std::task::Poll;
use std::time::{Duration, Instant};

use typed_verbs_sys as sys;

use crate::channel::{poll_readable, set_nonblocking};
use crate::cq::Cq;
use crate::device::Context;
use crate::error::{Error, Result, Verb};

/// An opaque identity of a verbs object named by an asynchronous event (the address of its C
/// object). Compare it with the object's own [`HandleId`], e.g. [`Cq::handle_id`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct HandleId(u64);

impl HandleId {
    /// The raw value (the address of the C object), for logging.
    pub fn raw(self) -> u64 {
        self.0
    }

    pub(crate) fn of<T>(p: *mut T) -> Self {
        HandleId(p as usize as u64)
    }
}

impl crate::srq::Srq {
    /// This SRQ's identity in [`AsyncEvent::SrqLimitReached`] and [`AsyncEvent::SrqError`].
    pub fn handle_id(&self) -> HandleId {
        HandleId::of(self.as_ptr())
    }
}

impl Cq {
    /// This CQ's identity in [`AsyncEvent::CqError`].
    pub fn handle_id(&self) -> HandleId {
        HandleId::of(self.as_ptr())
    }
}

/// An asynchronous event (`struct ibv_async_event`), already acknowledged.
///
/// Events about a QP carry its QP number, events about a port its port number. Unknown event
/// types (from a newer kernel) are preserved in [`AsyncEvent::Unknown`].
#[non_exhaustive]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AsyncEvent {
    /// `IBV_EVENT_QP_FATAL`: an error occurred that prevents the QP from reporting completions;
    /// it is in the error state.
    QpFatal {
        /// The QP number.
        qp_num: u32,
    },
    /// `IBV_EVENT_QP_REQ_ERR`: the responder detected an invalid request (transport error);
    /// the QP is in the error state.
    QpRequestError {
        /// The QP number.
        qp_num: u32,
    },
    /// `IBV_EVENT_QP_ACCESS_ERR`: the responder detected a remote access violation (e.g. a bad
    /// rkey in an incoming RDMA request); the QP is in the error state.
    QpAccessError {
        /// The QP number.
        qp_num: u32,
    },
    /// `IBV_EVENT_COMM_EST`: the first packet arrived on a QP in RTR.
    CommEstablished {
        /// The QP number.
        qp_num: u32,
    },
    /// `IBV_EVENT_SQ_DRAINED`: a QP in SQD has no outstanding send requests.
    SqDrained {
        /// The QP number.
        qp_num: u32,
    },
    /// `IBV_EVENT_PATH_MIG`: the QP migrated to its alternate path.
    PathMigrated {
        /// The QP number.
        qp_num: u32,
    },
    /// `IBV_EVENT_PATH_MIG_ERR`: path migration failed.
    PathMigrationError {
        /// The QP number.
        qp_num: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ in the error state will consume no more
    /// receive requests.
    LastWqeReached {
        /// The QP number.
        qp_num: u32,
    },
    /// `IBV_EVENT_CQ_ERR`: a CQ overran (a completion could not be added).
    CqError {
        /// The CQ ([`Cq::handle_id`]).
        cq: HandleId,
    },
    /// `IBV_EVENT_SRQ_ERR`: an error occurred on an SRQ.
    SrqError {
        /// The SRQ.
        srq: HandleId,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: an SRQ armed with a limit has fewer receive requests than
    /// the limit.
    SrqLimitReached {
        /// The SRQ.
        srq: HandleId,
    },
    /// `IBV_EVENT_WQ_FATAL`: an error occurred on a work queue (`ibv_wq`).
    WqFatal {
        /// The work queue.
        wq: HandleId,
    },
    /// `IBV_EVENT_PORT_ACTIVE`: the port became ACTIVE.
    PortActive {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR`: the port left the ACTIVE state.
    PortError {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_LID_CHANGE`: the port's LID changed.
    LidChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_PKEY_CHANGE`: the port's P_Key table changed.
    PkeyChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_GID_CHANGE`: the port's GID table changed.
    GidChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_SM_CHANGE`: the subnet manager of the port changed.
    SmChange {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_CLIENT_REREGISTER`: the subnet manager asks clients to re-register.
    ClientReregister {
        /// The port number.
        port: u8,
    },
    /// `IBV_EVENT_DEVICE_FATAL`: the device is unusable; close it.
    DeviceFatal,
    /// An event type this library does not know (the raw `enum ibv_event_type` value).
    Unknown(u32),
}

impl AsyncEvent {
    /// The C name of the event type, e.g. `"IBV_EVENT_PORT_ACTIVE"` (`"unknown"` for
    /// [`AsyncEvent::Unknown`]).
    pub fn name(&self) -> &'static str {
        match self {
            AsyncEvent::QpFatal { .. } => "IBV_EVENT_QP_FATAL",
            AsyncEvent::QpRequestError { .. } => "IBV_EVENT_QP_REQ_ERR",
            AsyncEvent::QpAccessError { .. } => "IBV_EVENT_QP_ACCESS_ERR",
            AsyncEvent::CommEstablished { .. } => "IBV_EVENT_COMM_EST",
            AsyncEvent::SqDrained { .. } => "IBV_EVENT_SQ_DRAINED",
            AsyncEvent::PathMigrated { .. } => "IBV_EVENT_PATH_MIG",
            AsyncEvent::PathMigrationError { .. } => "IBV_EVENT_PATH_MIG_ERR",
            AsyncEvent::LastWqeReached { .. } => "IBV_EVENT_QP_LAST_WQE_REACHED",
            AsyncEvent::CqError { .. } => "IBV_EVENT_CQ_ERR",
            AsyncEvent::SrqError { .. } => "IBV_EVENT_SRQ_ERR",
            AsyncEvent::SrqLimitReached { .. } => "IBV_EVENT_SRQ_LIMIT_REACHED",
            AsyncEvent::WqFatal { .. } => "IBV_EVENT_WQ_FATAL",
            AsyncEvent::PortActive { .. } => "IBV_EVENT_PORT_ACTIVE",
            AsyncEvent::PortError { .. } => "IBV_EVENT_PORT_ERR",
            AsyncEvent::LidChange { .. } => "IBV_EVENT_LID_CHANGE",
            AsyncEvent::PkeyChange { .. } => "IBV_EVENT_PKEY_CHANGE",
            AsyncEvent::GidChange { .. } => "IBV_EVENT_GID_CHANGE",
            AsyncEvent::SmChange { .. } => "IBV_EVENT_SM_CHANGE",
            AsyncEvent::ClientReregister { .. } => "IBV_EVENT_CLIENT_REREGISTER",
            AsyncEvent::DeviceFatal => "IBV_EVENT_DEVICE_FATAL",
            AsyncEvent::Unknown(_) => "unknown",
        }
    }

    /// The QP number, for events about a QP.
    pub fn qp_num(&self) -> Option<u32> {
        match *self {
            AsyncEvent::QpFatal { qp_num }
            | AsyncEvent::QpRequestError { qp_num }
            | AsyncEvent::QpAccessError { qp_num }
            | AsyncEvent::CommEstablished { qp_num }
            | AsyncEvent::SqDrained { qp_num }
            | AsyncEvent::PathMigrated { qp_num }
            | AsyncEvent::PathMigrationError { qp_num }
            | AsyncEvent::LastWqeReached { qp_num } => Some(qp_num),
            _ => None,
        }
    }

    /// The port number, for events about a port.
    pub fn port(&self) -> Option<u8> {
        match *self {
            AsyncEvent::PortActive { port }
            | AsyncEvent::PortError { port }
            | AsyncEvent::LidChange { port }
            | AsyncEvent::PkeyChange { port }
            | AsyncEvent::GidChange { port }
            | AsyncEvent::SmChange { port }
            | AsyncEvent::ClientReregister { port } => Some(port),
            _ => None,
        }
    }

    /// Decodes an event still owned by libibverbs (not yet acknowledged).
    ///
    /// # Safety
    /// `ev` was filled by a successful `ibv_get_async_event` and is not acknowledged yet, so
    /// the QP, CQ, SRQ or WQ it names is still allocated.
    unsafe fn from_raw(ev: &sys::ibv_async_event) -> Self {
        let qp_num = || {
            // SAFETY: for QP events the union holds the QP pointer, which stays valid until the
            // event is acknowledged (the caller's obligation); the null check is defensive.
            unsafe {
                let qp = ev.element.qp;
                if qp.is_null() {
                    0
                } else {
                    (*qp).qp_num
                }
            }
        };
        let handle = || {
            // SAFETY: for CQ, SRQ and WQ events the union holds a pointer (all three members
            // are raw pointers of the same size); any bit pattern is a valid raw pointer, and
            // it is only used as an opaque identity, never dereferenced.
            HandleId::of(unsafe { ev.element.cq })
        };
        // SAFETY: for port events the union holds `port_num`, an int.
        let port = || u8::try_from(unsafe { ev.element.port_num }).unwrap_or(0);
        match ev.event_type {
            sys::IBV_EVENT_QP_FATAL => AsyncEvent::QpFatal { qp_num: qp_num() },
            sys::IBV_EVENT_QP_REQ_ERR => AsyncEvent::QpRequestError { qp_num: qp_num() },
            sys::IBV_EVENT_QP_ACCESS_ERR => AsyncEvent::QpAccessError { qp_num: qp_num() },
            sys::IBV_EVENT_COMM_EST => AsyncEvent::CommEstablished { qp_num: qp_num() },
            sys::IBV_EVENT_SQ_DRAINED => AsyncEvent::SqDrained { qp_num: qp_num() },
            sys::IBV_EVENT_PATH_MIG => AsyncEvent::PathMigrated { qp_num: qp_num() },
            sys::IBV_EVENT_PATH_MIG_ERR => AsyncEvent::PathMigrationError { qp_num: qp_num() },
            sys::IBV_EVENT_QP_LAST_WQE_REACHED => AsyncEvent::LastWqeReached { qp_num: qp_num() },
            sys::IBV_EVENT_CQ_ERR => AsyncEvent::CqError { cq: handle() },
            sys::IBV_EVENT_SRQ_ERR => AsyncEvent::SrqError { srq: handle() },
            sys::IBV_EVENT_SRQ_LIMIT_REACHED => AsyncEvent::SrqLimitReached { srq: handle() },
            sys::IBV_EVENT_WQ_FATAL => AsyncEvent::WqFatal { wq: handle() },
            sys::IBV_EVENT_PORT_ACTIVE => AsyncEvent::PortActive { port: port() },
            sys::IBV_EVENT_PORT_ERR => AsyncEvent::PortError { port: port() },
            sys::IBV_EVENT_LID_CHANGE => AsyncEvent::LidChange { port: port() },
            sys::IBV_EVENT_PKEY_CHANGE => AsyncEvent::PkeyChange { port: port() },
            sys::IBV_EVENT_GID_CHANGE => AsyncEvent::GidChange { port: port() },
            sys::IBV_EVENT_SM_CHANGE => AsyncEvent::SmChange { port: port() },
            sys::IBV_EVENT_CLIENT_REREGISTER => AsyncEvent::ClientReregister { port: port() },
            sys::IBV_EVENT_DEVICE_FATAL => AsyncEvent::DeviceFatal,
            other => AsyncEvent::Unknown(other),
        }
    }
}

impl fmt::Display for AsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            AsyncEvent::Unknown(v) => write!(f, " ({v})"),
            AsyncEvent::CqError { cq: id }
            | AsyncEvent::SrqError { srq: id }
            | AsyncEvent::SrqLimitReached { srq: id }
            | AsyncEvent::WqFatal { wq: id } => {
                write!(f, " ({:#x})", id.0)
            }
            _ => {
                if let Some(q) = self.qp_num() {
                    write!(f, " on QP {q:#x}")
                } else if let Some(p) = self.port() {
                    write!(f, " on port {p}")
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// One non-blocking `ibv_get_async_event` on `ctx` (whose `async_fd` is non-blocking), the
/// event decoded and acknowledged at once. `Ok(None)`: nothing was pending (EAGAIN, EINTR).
fn try_get(ctx: &Context) -> Result<Option<AsyncEvent>> {
    let mut raw = sys::ibv_async_event::default();
    // SAFETY: the context is open; `raw` is a valid out-pointer; the context's `async_fd` was
    // set non-blocking by every caller (`next_async_event`, `Context::async_events`), so the
    // read returns at once; `verbs.get_async_event` is `ibv_get_async_event` (a test's fake of
    // its type on the fake device).
    let ret = unsafe { (ctx.inner.verbs.get_async_event)(ctx.as_ptr(), &mut raw) };
    if ret != 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(Error::verb(
            Verb::GetAsyncEvent,
            format!("reading async_fd (async events of {})", ctx.inner.name),
            e,
        ));
    }
    // SAFETY: the event was just read and is not acknowledged yet.
    let ev = unsafe { AsyncEvent::from_raw(&raw) };
    // The CQ an error names is found before the acknowledgement: until then `ibv_destroy_cq`
    // waits, so its address names it and not a CQ created since at the same address. What is
    // found is held (not dropped) until after it: a last reference dropped here would destroy
    // the CQ on this thread, waiting for this very event.
    let failed = match ev {
        AsyncEvent::CqError { cq } => Some(crate::cq::FailedCq::find(&ctx.inner, cq)),
        _ => None,
    };
    // SAFETY: `raw` is an event returned by `ibv_get_async_event`, acknowledged once.
    unsafe { sys::ibv_ack_async_event(&mut raw) };
    if let Some(failed) = failed {
        failed.break_qps();
    }
    Ok(Some(ev))
}

/// The context's `async_fd` (set once by `ibv_open_device`, open until `ibv_close_device`).
fn async_fd(ctx: &Context) -> RawFd {
    // SAFETY: the context is open; `async_fd` is set once by ibv_open_device.
    unsafe { (*ctx.as_ptr()).async_fd }
}

impl Context {
    /// `ibv_get_async_event`: waits at most `timeout` for the next asynchronous event of this
    /// device, copies it out and acknowledges it (`ibv_ack_async_event`) before returning.
    ///
    /// The wait is poll(2) on the context's `async_fd`, which this call sets non-blocking, so
    /// the read itself never blocks. Events are queued by the kernel from the moment the context
    /// is open, whether or not anyone waits; `Duration::ZERO` takes one if it is pending. Several
    /// threads may call this; each event goes to one of them. The queue is the same one an
    /// [`AsyncEvents`] of this context reads: each event goes to exactly one reader, this call
    /// or one of them.
    ///
    /// An `IBV_EVENT_CQ_ERR` also breaks every QP completing on that CQ: its completions may
    /// have been lost, so the QPs refuse posts ([`Error::QpBroken`]) until they are reset. (The
    /// library sizes CQs so that they cannot overrun; this answers a device that reports an
    /// error anyway.)
    ///
    /// # Errors
    /// - [`Error::Timeout`] if no event arrived within `timeout`;
    /// - [`Error::Verb`] with `ibv_get_async_event` and the errno of fcntl(2), poll(2) or the
    ///   read.
    ///
    /// See ibv_get_async_event(3).
    #[doc(alias = "ibv_get_async_event")]
    #[doc(alias = "ibv_ack_async_event")]
    pub fn next_async_event(&self, timeout: Duration) -> Result<AsyncEvent> {
        let fd = async_fd(self);
        let err = |what: &str, e: io::Error| {
            Error::verb(Verb::GetAsyncEvent, format!("{what} (async events of {})", self.inner.name), e)
        };
        set_nonblocking(fd).map_err(|e| err("fcntl(O_NONBLOCK) on async_fd", e))?;
        let start = Instant::now();
        loop {
            let remaining = timeout.saturating_sub(start.elapsed());
            if !poll_readable(fd, remaining).map_err(|e| err("poll(2) on async_fd", e))? {
                return Err(Error::Timeout {
                    what: format!("an asynchronous event of {}", self.inner.name),
                    after: timeout,
                });
            }
            // `None`: another reader took it; wait on with the time left.
            if let Some(ev) = try_get(self)? {
                return Ok(ev);
            }
        }
    }

    /// `ibv_get_async_event` without a blocked thread: a reader of this device's asynchronous
    /// events for an event loop ([`AsyncEvents`]), with its own duplicate of the context's
    /// `async_fd` to register for readability. The context's `async_fd` is set non-blocking.
    ///
    /// Creating one needs no runtime; with the `tokio` feature, `AsyncEvents::next` and
    /// `AsyncEvents::poll_next_event` register it with the tokio runtime whose task polls them
    /// (again when a task of another runtime does).
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_get_async_event` and the errno of fcntl(2) or of duplicating
    /// the descriptor (`F_DUPFD_CLOEXEC`, e.g. EMFILE).
    ///
    /// See ibv_get_async_event(3).
    #[doc(alias = "ibv_get_async_event")]
    pub fn async_events(&self) -> Result<AsyncEvents> {
        let raw = async_fd(self);
        let err = |what: &str, e: io::Error| {
            Error::verb(Verb::GetAsyncEvent, format!("{what} (async events of {})", self.inner.name), e)
        };
        set_nonblocking(raw).map_err(|e| err("fcntl(O_NONBLOCK) on async_fd", e))?;
        // SAFETY: `async_fd` is open as long as the context, which `self` keeps open here.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        let fd = fd.try_clone_to_owned().map_err(|e| err("duplicating async_fd", e))?;
        Ok(AsyncEvents {
            #[cfg(feature = "tokio")]
            reactor: crate::channel::Readable::default(),
            fd,
            ctx: self.clone(),
        })
    }
}

/// A reader of a device's asynchronous events for an event loop (`ibv_get_async_event`, each
/// event acknowledged with `ibv_ack_async_event` before it is handed out): device, port, QP,
/// CQ and SRQ events as [`AsyncEvent`]s, from [`Context::async_events`].
///
/// It owns a duplicate of the context's `async_fd` ([`AsFd`]) and keeps the context open.
///
/// # With tokio (`tokio` feature)
/// `next` resolves with the next event (`while let Ok(ev) = events.next().await`);
/// `poll_next_event` is the same as a poll function. The descriptor is
/// registered with the reactor of the runtime whose task polls it, again when a task of another
/// runtime polls. Bound each wait with the runtime's timer, `tokio::time::timeout(d, events.next())`:
/// both are cancel-safe, since an event is read and acknowledged only inside the one poll that
/// returns it, so a future dropped while pending loses no event.
///
/// `poll_next_event` has the signature of `futures::Stream::poll_next` but for the `Option`
/// (the event queue has no end), so a `Stream` is one line where the `futures` crate is at
/// hand: `futures::stream::poll_fn(move |cx| events.poll_next_event(cx).map(Some))`.
///
/// # With another event loop
/// Register [`as_fd`](AsFd::as_fd) for readability (edge- or level-triggered); whenever it is
/// readable, call [`try_next_event`](Self::try_next_event) until it returns `Ok(None)`, then
/// wait for readability again. The descriptor is non-blocking, so `try_next_event` never
/// blocks.
///
/// # Several readers
/// A context has one event queue. [`Context::next_async_event`] and every `AsyncEvents` of
/// the context read it, and each event goes to exactly one reader: with several, which one
/// gets a given event is not specified. Each `AsyncEvents` has its own duplicate descriptor,
/// so any number may be registered with one reactor (epoll tells duplicates apart); each is
/// woken by a new event and the ones that find the queue empty wait on.
#[doc(alias = "ibv_get_async_event")]
#[doc(alias = "ibv_ack_async_event")]
pub struct AsyncEvents {
    /// The registration of a duplicate of `fd` with the reactor of the runtime that polls
    /// (the duplicate is the registration's own, closed when it is dropped).
    #[cfg(feature = "tokio")]
    reactor: crate::channel::Readable,
    /// A duplicate of the context's `async_fd` (the same open file, non-blocking).
    fd: OwnedFd,
    ctx: Context,
}

impl fmt::Debug for AsyncEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("AsyncEvents");
        d.field("device", &self.ctx.inner.name).field("fd", &self.fd.as_raw_fd());
        #[cfg(feature = "tokio")]
        d.field("registered", &self.reactor.is_registered());
        d.finish()
    }
}

impl AsFd for AsyncEvents {
    /// The descriptor to register for readability: a duplicate of the context's `async_fd`.
    ///
    /// Never read it yourself: an event read from the descriptor rather than taken by the
    /// library (`ibv_get_async_event`) is never acknowledged, and destroying its QP, CQ or SRQ
    /// then waits for that acknowledgement forever (ibv_get_async_event(3)): dropping the
    /// object's last handle hangs.
    ///
    /// Nor change its flags: it shares them with every duplicate, and the library's reads rely
    /// on `O_NONBLOCK` (set when the descriptor was created). A descriptor made blocking
    /// through a duplicate makes the library's next read with no event waiting block its thread
    /// (a `dispatch`, the tokio driver task) until an event arrives.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for AsyncEvents {
    /// As [`AsyncEvents::as_fd`]: never read it yourself.
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsyncEvents {
    /// `ibv_get_async_event` without waiting: the next event if one is pending (acknowledged
    /// with `ibv_ack_async_event` before it is returned), `Ok(None)` if the queue is empty.
    ///
    /// The building block for an event loop other than tokio's (see the type's docs); an
    /// `IBV_EVENT_CQ_ERR` breaks the CQ's QPs as [`Context::next_async_event`] says.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_get_async_event` and the errno of the read.
    ///
    /// See ibv_get_async_event(3).
    #[doc(alias = "ibv_get_async_event")]
    pub fn try_next_event(&self) -> Result<Option<AsyncEvent>> {
        try_get(&self.ctx)
    }

    /// The context whose events this reads.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

#[cfg(feature = "tokio")]
impl AsyncEvents {
    /// `ibv_get_async_event` as a poll function (`tokio` feature): `Ready` with the next event
    /// (read and acknowledged with `ibv_ack_async_event` in this call), or `Pending` with `cx`'s
    /// waker registered for the descriptor's readability with tokio's reactor.
    ///
    /// The first call registers the descriptor with the current runtime's reactor, and so does
    /// a call from a task of another runtime than the last registration's. Nothing is kept between
    /// calls, so abandoning a pending poll loses no event. `&mut self`: one task polls one
    /// reader (the reactor keeps the waker of the last poll only); give each task its own
    /// [`Context::async_events`].
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_get_async_event` when there is no tokio runtime or it has no
    /// I/O driver (built without `enable_io`; the latter needs unwinding: tokio panics there,
    /// which aborts under `panic = "abort"`), when the descriptor cannot be registered with the
    /// reactor or the reactor reports an error (polled outside any runtime after the runtime
    /// it was registered with shut down), when it is polled outside any runtime after it was
    /// registered with a current-thread runtime (whose reactor runs only inside its
    /// `block_on`), or when the read fails (also when the descriptor reports only an error, as
    /// once the device is gone: the read is tried then).
    ///
    /// See ibv_get_async_event(3).
    #[doc(alias = "ibv_get_async_event")]
    pub fn poll_next_event(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<AsyncEvent>> {
        let name = &self.ctx.inner.name;
        let err =
            |what: &str, e: io::Error| Error::verb(Verb::GetAsyncEvent, format!("{what} (async events of {name})"), e);
        // Outside a runtime, or in one without I/O, an error rather than tokio's panic.
        let ctx = &self.ctx;
        self.reactor.poll_read(self.fd.as_fd(), cx, || try_get(ctx), err)
    }

    /// `ibv_get_async_event`, awaited (`tokio` feature): resolves with the next asynchronous
    /// event of the device, acknowledged with `ibv_ack_async_event`
    /// ([`poll_next_event`](Self::poll_next_event) in a future).
    ///
    /// Cancel-safe: an event is read only in the poll that resolves the future, so dropping
    /// the future (a `tokio::time::timeout` that expired, a `select!` branch that lost) loses
    /// no event; the next call gets it. Unbounded by itself: bound it with
    /// `tokio::time::timeout`.
    ///
    /// # Errors
    /// As [`poll_next_event`](Self::poll_next_event).
    ///
    /// See ibv_get_async_event(3).
    #[doc(alias = "ibv_get_async_event")]
    pub async fn next(&mut self) -> Result<AsyncEvent> {
        std::future::poll_fn(|cx| self.poll_next_event(cx)).await
    }
}

static_assertions::assert_impl_all!(AsyncEvent: Send, Sync, Unpin);
static_assertions::assert_impl_all!(AsyncEvents: Send, Sync, Unpin);

#[cfg(test)]
mod tests {
    use super::{AsyncEvent, HandleId};
    use typed_verbs_sys as sys;

    fn decode(event_type: u32, fill: impl FnOnce(&mut sys::ibv_async_event)) -> AsyncEvent {
        let mut raw = sys::ibv_async_event { event_type, ..Default::default() };
        fill(&mut raw);
        // SAFETY: the event names no object, or one that lives on this stack frame.
        unsafe { AsyncEvent::from_raw(&raw) }
    }

    #[test]
    fn decodes_qp_port_handle_and_unknown_events() {
        let mut qp = sys::ibv_qp { qp_num: 0x1234, ..Default::default() };
        let qp_ptr: *mut sys::ibv_qp = &mut qp;
        let ev = decode(sys::IBV_EVENT_QP_ACCESS_ERR, |e| e.element.qp = qp_ptr);
        assert_eq!(ev, AsyncEvent::QpAccessError { qp_num: 0x1234 });
        assert_eq!(ev.qp_num(), Some(0x1234));
        assert_eq!(ev.to_string(), "IBV_EVENT_QP_ACCESS_ERR on QP 0x1234");

        let ev = decode(sys::IBV_EVENT_PORT_ERR, |e| e.element.port_num = 1);
        assert_eq!(ev, AsyncEvent::PortError { port: 1 });
        assert_eq!((ev.port(), ev.qp_num()), (Some(1), None));

        let cq = 0xdead_b000usize as *mut sys::ibv_cq;
        let ev = decode(sys::IBV_EVENT_CQ_ERR, |e| e.element.cq = cq);
        assert_eq!(ev, AsyncEvent::CqError { cq: HandleId(0xdead_b000) });
        assert_eq!(ev.name(), "IBV_EVENT_CQ_ERR");

        assert_eq!(decode(sys::IBV_EVENT_DEVICE_FATAL, |_| {}), AsyncEvent::DeviceFatal);
        let ev = decode(4242, |_| {});
        assert_eq!(ev, AsyncEvent::Unknown(4242));
        assert_eq!(ev.to_string(), "unknown (4242)");
    }
}
