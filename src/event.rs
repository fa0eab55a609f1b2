//! Asynchronous events of a device context: `ibv_get_async_event`, `ibv_ack_async_event`.
//!
//! The device reports things that happen outside any work request (a QP that went to the error
//! state, a port that went down, a CQ overrun) as asynchronous events on the context's
//! `async_fd`. [`Context::next_async_event`] waits for one, bounded by a timeout, copies it out
//! into an [`AsyncEvent`] and acknowledges it (`ibv_ack_async_event`) before returning, so an
//! unacknowledged event never exists outside this module (destroying a QP, CQ or SRQ waits until
//! every event naming it has been acknowledged).
//!
//! Observed on Soft-RoCE (rxe, kernel 6.12, rdma-core 44): see `tests/device/events.rs`.
#![allow(unsafe_code)]

use std::fmt;
use std::io;
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

impl Context {
    /// `ibv_get_async_event`: waits at most `timeout` for the next asynchronous event of this
    /// device, copies it out and acknowledges it (`ibv_ack_async_event`) before returning.
    ///
    /// The wait is poll(2) on the context's `async_fd`, which this call sets non-blocking, so
    /// the read itself never blocks. Events are queued by the kernel from the moment the context
    /// is open, whether or not anyone waits; `Duration::ZERO` takes one if it is pending. Several
    /// threads may call this; each event goes to one of them.
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
        // SAFETY: the context is open; `async_fd` is set once by ibv_open_device.
        let fd = unsafe { (*self.as_ptr()).async_fd };
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
            let mut raw = sys::ibv_async_event::default();
            // SAFETY: the context is open; `raw` is a valid out-pointer; the fd is non-blocking.
            let ret = unsafe { sys::ibv_get_async_event(self.as_ptr(), &mut raw) };
            if ret != 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                    // Another thread took it: wait on with the time left.
                    continue;
                }
                return Err(err("reading async_fd", e));
            }
            // SAFETY: the event was just read and is not acknowledged yet.
            let ev = unsafe { AsyncEvent::from_raw(&raw) };
            // SAFETY: `raw` is an event returned by `ibv_get_async_event`, acknowledged once.
            unsafe { sys::ibv_ack_async_event(&mut raw) };
            if let AsyncEvent::CqError { cq } = ev {
                crate::cq::CqShared::failed(&self.inner, cq);
            }
            return Ok(ev);
        }
    }
}

static_assertions::assert_impl_all!(AsyncEvent: Send, Sync);

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
