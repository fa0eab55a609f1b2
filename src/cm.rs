//! The RDMA connection manager (librdmacm, `<rdma/rdma_cma.h>`): connections of RC queue pairs
//! by IP address, with the connection's state as a type.
//!
//! Active side: [`CmId::new`] → [`CmId::resolve_addr`] → [`CmId::resolve_route`] →
//! [`CmId::connect`] (or [`CmId::prepare`], receives posted, [`Connecting::connect`]). Passive
//! side: [`CmListener::bind`] → [`CmListener::next_request`] → [`ConnRequest::accept`] (or
//! [`ConnRequest::prepare`], receives posted, [`Accepting::accept`]) or
//! [`ConnRequest::reject`]. Both end in a [`Connection`]: the
//! connected `Qp<RC, RTS>` that scopes, lanes and owned tokens use as any other, and the
//! connection's identifier, which sees the peer's disconnect ([`Connection::wait_disconnected`])
//! and disconnects ([`Connection::disconnect`]). Calling a step out of order does not compile:
//! each step consumes the identifier of the state before it.
//!
//! The QP is the program's own (created with [`Pd::create_qp`](crate::pd::Pd) on the device the
//! address resolved to, [`CmId::device_name`]): the CM computes its attributes
//! (`rdma_init_qp_attr`) and the library moves it RESET → INIT → RTR → RTS with them, the
//! program choosing what peers may do to its memory (an [`access`](crate::access) set, as for
//! a region: [the queue-pair rule](crate::access#queue-pairs)); the typestate follows.
//!
//! Each identifier has an event channel of its own, so a wait for one identifier's event never
//! takes another's; every wait is bounded, and an event other than the one a step expects is a
//! typed error ([`Error::Cm`], [`Error::Rejected`] with the peer's private data).
//!
//! See rdma_cm(7), rdma_create_id(3), rdma_resolve_addr(3), rdma_connect(3), rdma_accept(3).
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use typed_verbs_sys as sys;

use crate::access::{qp_access_flags, AccessSet};
use crate::ah::{AddressVector, Ah};
use crate::device::{ContextInner, DeviceIdentity};
use crate::error::{Error, Result, Verb};
use crate::pd::Pd;
use crate::qp::{CmAttr, Qp, SqPsn, UdRtr};
use crate::transport::{Transport, INIT, RC, RESET, RTR, RTS, UD};

mod sealed {
    sealed_trait!();
}

/// A QP the connection manager readies itself: a `T` QP in RESET, [`Qp<T, RESET>`]. The CM
/// moves it through INIT, RTR and RTS with the attributes it negotiated (rdma_init_qp_attr(3)).
/// Sealed.
#[diagnostic::on_unimplemented(
    message = "the connection manager takes a `Qp<{T}, RESET>`, which it readies itself, not `{Self}`",
    label = "not a `Qp<{T}, RESET>`",
    note = "rdma_init_qp_attr(3): the CM moves the QP through INIT, RTR and RTS itself, with the attributes it negotiated (port, P_Key index, Q_Key or path and PSNs); a QP of another transport cannot carry the connection, and a QP already modified would keep attributes the CM did not choose",
    note = "create a `Qp<{T}, RESET>` for it (`Pd::create_qp`), or reset yours first (`Qp::reset`)"
)]
pub trait CmReadies<T: Transport>: sealed::Sealed {
    /// The QP.
    #[doc(hidden)]
    fn into_reset(self) -> Qp<T, RESET>;
}
impl<T: Transport> sealed::Sealed for Qp<T, RESET> {}
impl<T: Transport> CmReadies<T> for Qp<T, RESET> {
    fn into_reset(self) -> Qp<T, RESET> {
        self
    }
}

/// A UD QP the CM has readied, [`Qp<UD, RTS>`] (or a reference or `Arc` of one): what a SIDR reply
/// names ([`ConnRequest::accept`] on `UD`) and what a multicast group is attached to
/// ([`CmId::join_multicast`]). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a UD QP in RTS, which the connection manager needs here",
    label = "not a UD QP in RTS",
    note = "a SIDR reply names a QP that takes the peer's datagrams at once; a multicast member answers the group, with the group's Q_Key",
    note = "ready a UD QP in RESET with `CmId::ready_qp` or `ConnRequest::ready_qp` (RTS, with the CM's Q_Key)"
)]
pub trait ReadyUd: sealed::Sealed {
    /// The QP.
    #[doc(hidden)]
    fn ready_ud(&self) -> &Qp<UD, RTS>;
}
impl sealed::Sealed for Qp<UD, RTS> {}
impl ReadyUd for Qp<UD, RTS> {
    fn ready_ud(&self) -> &Qp<UD, RTS> {
        self
    }
}
impl<Q: ReadyUd + ?Sized> sealed::Sealed for &Q {}
impl<Q: ReadyUd + ?Sized> ReadyUd for &Q {
    fn ready_ud(&self) -> &Qp<UD, RTS> {
        (**self).ready_ud()
    }
}
impl<Q: ReadyUd + ?Sized> sealed::Sealed for std::sync::Arc<Q> {}
impl<Q: ReadyUd + ?Sized> ReadyUd for std::sync::Arc<Q> {
    fn ready_ud(&self) -> &Qp<UD, RTS> {
        (**self).ready_ud()
    }
}

/// A transport the connection manager sets up: [`RC`] (port space `RDMA_PS_TCP`, a
/// connection) or [`UD`] (`RDMA_PS_UDP`: a service ID resolved to the peer's QP number and
/// Q_Key). Sealed.
pub trait CmTransport: Transport + sealed::Sealed {
    /// The `RDMA_PS_*` port space of its identifiers.
    const PORT_SPACE: sys::rdma_port_space;
}
impl sealed::Sealed for RC {}
impl CmTransport for RC {
    const PORT_SPACE: sys::rdma_port_space = sys::RDMA_PS_TCP;
}
impl sealed::Sealed for UD {}
impl CmTransport for UD {
    const PORT_SPACE: sys::rdma_port_space = sys::RDMA_PS_UDP;
}

/// A connection manager event (`enum rdma_cm_event_type`), as the CM reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant is the RDMA_CM_EVENT_ constant of the same name
pub enum CmEvent {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectRequest,
    ConnectResponse,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    MulticastJoin,
    MulticastError,
    AddrChange,
    TimewaitExit,
    /// A value this library does not know (from a newer librdmacm).
    Other(u32),
}

impl CmEvent {
    fn from_raw(e: sys::rdma_cm_event_type) -> Self {
        match e {
            sys::RDMA_CM_EVENT_ADDR_RESOLVED => CmEvent::AddrResolved,
            sys::RDMA_CM_EVENT_ADDR_ERROR => CmEvent::AddrError,
            sys::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEvent::RouteResolved,
            sys::RDMA_CM_EVENT_ROUTE_ERROR => CmEvent::RouteError,
            sys::RDMA_CM_EVENT_CONNECT_REQUEST => CmEvent::ConnectRequest,
            sys::RDMA_CM_EVENT_CONNECT_RESPONSE => CmEvent::ConnectResponse,
            sys::RDMA_CM_EVENT_CONNECT_ERROR => CmEvent::ConnectError,
            sys::RDMA_CM_EVENT_UNREACHABLE => CmEvent::Unreachable,
            sys::RDMA_CM_EVENT_REJECTED => CmEvent::Rejected,
            sys::RDMA_CM_EVENT_ESTABLISHED => CmEvent::Established,
            sys::RDMA_CM_EVENT_DISCONNECTED => CmEvent::Disconnected,
            sys::RDMA_CM_EVENT_DEVICE_REMOVAL => CmEvent::DeviceRemoval,
            sys::RDMA_CM_EVENT_MULTICAST_JOIN => CmEvent::MulticastJoin,
            sys::RDMA_CM_EVENT_MULTICAST_ERROR => CmEvent::MulticastError,
            sys::RDMA_CM_EVENT_ADDR_CHANGE => CmEvent::AddrChange,
            sys::RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEvent::TimewaitExit,
            other => CmEvent::Other(other),
        }
    }
}

/// What an event carried, copied out before it is acknowledged.
struct Event {
    kind: CmEvent,
    status: i32,
    /// The new identifier of a connection request (owned from here on).
    id: *mut sys::rdma_cm_id,
    private_data: Vec<u8>,
    /// RC identifiers' events: the peer's READ/atomic depths.
    responder_resources: u8,
    initiator_depth: u8,
    /// UD identifiers' events: the peer's address, QP number and Q_Key (`ESTABLISHED`).
    ud: Option<UdParam>,
}

/// The `struct rdma_ud_param` of a UD identifier's event, without its private data.
struct UdParam {
    ah_attr: sys::ibv_ah_attr,
    qp_num: u32,
    qkey: u32,
}

/// An event channel and an identifier on it, destroyed together: the identifier first (which
/// waits until its events are acknowledged: they are, as soon as they are read), then the
/// channel.
struct RawId {
    id: NonNull<sys::rdma_cm_id>,
    channel: NonNull<sys::rdma_event_channel>,
    /// Whether the identifier is of port space `RDMA_PS_UDP`: which member of an event's
    /// `param` union librdmacm filled (`ud` for UD identifiers, `conn` for the others).
    ud: bool,
}

// SAFETY: librdmacm's calls on an identifier and its channel may be made from any thread (it is
// thread-safe: its state is behind its own locks, and events are read from the channel's
// descriptor); the identifier and channel are destroyed only by value (`Drop`).
unsafe impl Send for RawId {}
// SAFETY: through `&RawId` the library reads the identifier's `verbs` (fixed once the address is
// resolved, before any `&` is shared: the states that expose it consumed the resolving one),
// calls `rdma_get_src_port` / `rdma_init_qp_attr` (reads), and reads events
// (`rdma_get_cm_event` on the channel, from any number of threads: each event goes to one
// reader; device test `cm::two_threads_waiting_on_one_listener_each_get_one_request`).
unsafe impl Sync for RawId {}

impl Drop for RawId {
    fn drop(&mut self) {
        // SAFETY: the identifier and its channel are ours, destroyed once, the identifier first;
        // every event read from the channel has been acknowledged (`RawId::next_event` acks at
        // once), so `rdma_destroy_id` does not block.
        unsafe {
            sys::rdma_destroy_id(self.id.as_ptr());
            sys::rdma_destroy_event_channel(self.channel.as_ptr());
        }
    }
}

/// `e`, after moving `qp` to ERR: the failure of a connect or accept whose QP may have owned
/// receives posted ([`Connecting::qp`], [`Accepting::qp`]). Their tokens keep the QP alive
/// after it is dropped here; in ERR their receives complete flushed, so the tokens hand the
/// buffers back (in INIT or RTR they would never complete). A failed move to ERR leaves them
/// to the release rule, as any dropped QP.
fn flushed<S: crate::transport::QpState>(qp: Qp<RC, S>, e: Error) -> Error {
    drop(qp.to_error());
    e
}

/// The value of `$r`, or, on its error, a return of that error after [flushing](flushed) `$qp`.
macro_rules! or_flush {
    ($r:expr, $qp:expr) => {
        match $r {
            Ok(v) => v,
            Err(e) => return Err(flushed($qp, e)),
        }
    };
}

/// The RTR QP's `max_dest_rd_atomic` on the passive side: what the accept tells the peer,
/// `asked` (the program's `responder_resources`), or for the CM's value (255) the request's
/// initiator depth `cm` capped at the device's `max_qp_rd_atom` `max`, as librdmacm's
/// `rdma_accept` computes it (a larger value is refused by `ibv_modify_qp`, EINVAL).
fn passive_dest_rd_atomic(asked: u8, cm: u8, max: u32) -> u8 {
    if asked == u8::MAX {
        capped(cm, max)
    } else {
        asked
    }
}

/// The RTS QP's `max_rd_atomic`: the CM's value `cm` (the peer's responder resources), at most
/// `asked` (the program's `initiator_depth`), or for the CM's value (255) at most the
/// device's `max_qp_init_rd_atom` `max`.
fn rts_rd_atomic(asked: u8, cm: u8, max: u32) -> u8 {
    if asked == u8::MAX {
        capped(cm, max)
    } else {
        cm.min(asked)
    }
}

/// The CM's value `cm`, at most the device's limit `max` (one beyond a `u8` caps nothing).
fn capped(cm: u8, max: u32) -> u8 {
    cm.min(u8::try_from(max).unwrap_or(u8::MAX))
}

/// `-1` with errno (librdmacm's convention) as an [`Error::Verb`].
fn check(ret: i32, verb: Verb, context: impl FnOnce() -> String) -> Result<()> {
    if ret != 0 {
        return Err(Error::last_os(verb, context()));
    }
    Ok(())
}

/// A new event channel, its descriptor non-blocking (the waits poll it with a timeout).
fn new_channel() -> Result<NonNull<sys::rdma_event_channel>> {
    // SAFETY: no preconditions; the result is checked for null.
    let ch = unsafe { sys::rdma_create_event_channel() };
    let ch = NonNull::new(ch).ok_or_else(|| Error::last_os(Verb::CreateEventChannel, "an event channel"))?;
    // SAFETY: the channel is ours and alive; `fd` is its open descriptor.
    let fd = unsafe { (*ch.as_ptr()).fd };
    if let Err(e) = crate::channel::set_nonblocking(fd) {
        // SAFETY: ours, never used.
        unsafe { sys::rdma_destroy_event_channel(ch.as_ptr()) };
        return Err(Error::verb(Verb::CreateEventChannel, "O_NONBLOCK on its descriptor", e));
    }
    Ok(ch)
}

impl RawId {
    /// A new identifier of `T`'s port space on a new channel of its own.
    fn new<T: CmTransport>() -> Result<RawId> {
        let channel = new_channel()?;
        let mut id = std::ptr::null_mut();
        // SAFETY: the channel is alive; `id` is a valid out-pointer; no context pointer.
        let ret = unsafe { sys::rdma_create_id(channel.as_ptr(), &mut id, std::ptr::null_mut(), T::PORT_SPACE) };
        match NonNull::new(id).filter(|_| ret == 0) {
            Some(id) => Ok(RawId { id, channel, ud: T::PORT_SPACE == sys::RDMA_PS_UDP }),
            None => {
                let e = Error::last_os(
                    Verb::CreateId,
                    format!("a {} identifier (port space {:#x})", T::NAME, T::PORT_SPACE),
                );
                // SAFETY: ours, no identifier on it.
                unsafe { sys::rdma_destroy_event_channel(channel.as_ptr()) };
                Err(e)
            }
        }
    }

    /// The identifier of a connection request, moved to a new channel of its own.
    ///
    /// # Safety
    /// `id` is the identifier a `CONNECT_REQUEST` event carried, owned by the caller from now on;
    /// `ud` says whether the listener that received it is a UD one (the request's identifier
    /// has the listener's port space).
    unsafe fn adopt(id: *mut sys::rdma_cm_id, ud: bool) -> Result<RawId> {
        let id = NonNull::new(id).ok_or_else(|| Error::invalid("rdma_get_cm_event", "a request without identifier"))?;
        let channel = match new_channel() {
            Ok(ch) => ch,
            Err(e) => {
                // SAFETY: the request's identifier is ours (the caller's contract); destroyed once.
                unsafe { sys::rdma_destroy_id(id.as_ptr()) };
                return Err(e);
            }
        };
        // SAFETY: both alive; the identifier's events so far are acknowledged.
        let ret = unsafe { sys::rdma_migrate_id(id.as_ptr(), channel.as_ptr()) };
        let raw = RawId { id, channel, ud };
        check(ret, Verb::MigrateId, || "a connection request's identifier to a channel of its own".into())?;
        Ok(raw)
    }

    fn ptr(&self) -> *mut sys::rdma_cm_id {
        self.id.as_ptr()
    }

    /// The RDMA device the identifier is bound to, if any yet, and its name.
    fn device(&self) -> Option<(NonNull<sys::ibv_device>, String)> {
        // SAFETY: the identifier is alive; `verbs` is null or librdmacm's context of the bound
        // device, alive as long as the identifier; the name is NUL-terminated and copied at once.
        unsafe {
            let verbs = (*self.ptr()).verbs;
            if verbs.is_null() {
                return None;
            }
            let dev = NonNull::new((*verbs).device)?;
            let name = sys::ibv_get_device_name(dev.as_ptr());
            (!name.is_null()).then(|| (dev, CStr::from_ptr(name).to_string_lossy().into_owned()))
        }
    }

    /// The name of the RDMA device the identifier is bound to, if any yet.
    fn device_name(&self) -> Option<String> {
        self.device().map(|(_, name)| name)
    }

    /// The port of the device the identifier is bound to (0 before it is bound).
    fn port_num(&self) -> u8 {
        // SAFETY: the identifier is alive; `port_num` is set by librdmacm when the identifier
        // is bound to a device (before any `&` to a state that reads it is shared, as `verbs`).
        unsafe { (*self.ptr()).port_num }
    }

    /// The channel's descriptor (non-blocking).
    fn fd(&self) -> std::os::fd::RawFd {
        // SAFETY: the channel is alive; `fd` is its descriptor.
        unsafe { (*self.channel.as_ptr()).fd }
    }

    /// The channel's descriptor, borrowed.
    #[cfg(feature = "tokio")]
    fn borrowed_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the descriptor belongs to the channel, which stays open while `self` is
        // borrowed.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) }
    }

    /// The next event if one is pending (the descriptor is non-blocking): what it carried,
    /// copied, and the event acknowledged. `None` when there is none yet.
    fn try_event(&self, what: &impl Fn() -> String) -> Result<Option<Event>> {
        let mut ev = std::ptr::null_mut();
        // SAFETY: the channel is alive; `ev` is a valid out-pointer. The descriptor is
        // non-blocking: with no event pending this returns -1 (EAGAIN) at once.
        let ret = unsafe { sys::rdma_get_cm_event(self.channel.as_ptr(), &mut ev) };
        if ret != 0 || ev.is_null() {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(Error::verb(Verb::GetCmEvent, what(), err));
        }
        // SAFETY: `ev` is a valid event until acknowledged; the union member read is the one
        // librdmacm fills for this identifier's port space (`ud` for UD identifiers, `conn` for
        // RC ones: `self.ud`, set from the port space the identifier, or the listener of a
        // request's, was created with; device tests cm_ud.rs and cm.rs read both); its private
        // data (if any) is `private_data_len` bytes, copied before the ack.
        let event = unsafe {
            let e = &*ev;
            let (data, len, depths, ud) = if self.ud {
                let p = e.param.ud;
                let ud = UdParam { ah_attr: p.ah_attr, qp_num: p.qp_num, qkey: p.qkey };
                (p.private_data, p.private_data_len, (0, 0), Some(ud))
            } else {
                let p = e.param.conn;
                (p.private_data, p.private_data_len, (p.responder_resources, p.initiator_depth), None)
            };
            let private_data = if data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len)).to_vec()
            };
            let event = Event {
                kind: CmEvent::from_raw(e.event),
                status: e.status,
                id: e.id,
                private_data,
                responder_resources: depths.0,
                initiator_depth: depths.1,
                ud,
            };
            sys::rdma_ack_cm_event(ev);
            event
        };
        Ok(Some(event))
    }

    /// Waits at most `timeout` for the next event, copies what it carried and acknowledges it.
    fn next_event(&self, timeout: Duration, what: impl Fn() -> String) -> Result<Event> {
        self.next_with(timeout, &what, || self.try_event(&what))
    }

    /// Waits at most `timeout` for the channel to give what `try_one` makes of its next event
    /// (`None`: no event pending yet), sleeping in `poll` between tries.
    fn next_with<R>(
        &self,
        timeout: Duration,
        what: &impl Fn() -> String,
        try_one: impl Fn() -> Result<Option<R>>,
    ) -> Result<R> {
        // Saturating: a timeout too long for an `Instant` (e.g. `Duration::MAX`) does not panic.
        let deadline = crate::scope::deadline_after(Instant::now(), timeout);
        loop {
            if let Some(r) = try_one()? {
                return Ok(r);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout { what: what(), after: timeout });
            }
            crate::channel::poll_readable(self.fd(), left).map_err(|e| Error::verb(Verb::GetCmEvent, what(), e))?;
        }
    }

    /// An async step's check, before its librdmacm call: a tokio runtime to wait in, with
    /// I/O (its reactor, for the channel's descriptor). Without them the step fails before it
    /// asks anything of the CM (an accept would otherwise be sent, and the peer connected,
    /// before the wait fails). Tokio offers no question for the I/O driver, so the channel's
    /// descriptor is registered (and the registration dropped): [`RawId::register`].
    #[cfg(feature = "tokio")]
    fn runtime_check(&self, what: impl FnOnce() -> String) -> Result<()> {
        self.register(what).map(drop)
    }

    /// A duplicate of the channel's descriptor registered with the current tokio runtime's
    /// reactor; outside a runtime, or in one without I/O, the error (`channel::register_readable`).
    #[cfg(feature = "tokio")]
    fn register(&self, what: impl FnOnce() -> String) -> Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
        crate::channel::register_readable(self.borrowed_fd())
            .map_err(|(doing, e)| Error::verb(Verb::GetCmEvent, format!("{}: {doing}", what()), e))
    }

    /// The asynchronous [`next_event`](Self::next_event): waits for the channel's descriptor
    /// with tokio's reactor. Cancel-safe: an event is read (and acknowledged) only in the poll
    /// that resolves the future, and the caller handles it in that same poll.
    /// The descriptor is registered with the reactor of the runtime whose task polls the
    /// future, again if a task of another runtime polls it (`channel::Readable`).
    #[cfg(feature = "tokio")]
    async fn next_event_async(&self, what: impl Fn() -> String) -> Result<Event> {
        self.next_async_with(&what, || self.try_event(&what)).await
    }

    /// The asynchronous [`next_with`](Self::next_with), cancel-safe as
    /// [`next_event_async`](Self::next_event_async): `try_one` runs in the poll that resolves
    /// the future.
    #[cfg(feature = "tokio")]
    async fn next_async_with<R>(
        &self,
        what: &impl Fn() -> String,
        try_one: impl Fn() -> Result<Option<R>>,
    ) -> Result<R> {
        let mut readable = crate::channel::Readable::default();
        let fail = |doing, e| Error::verb(Verb::GetCmEvent, format!("{}: {doing}", what()), e);
        std::future::poll_fn(|cx| readable.poll_read(self.borrowed_fd(), cx, &try_one, fail)).await
    }

    /// Waits for `want`, the outcome of `step`: any other event is an error.
    fn expect(&self, step: Verb, want: CmEvent, timeout: Duration) -> Result<Event> {
        expected(step, want, self.next_event(timeout, || format!("{step}: the {want:?} event"))?)
    }

    /// The asynchronous [`expect`](Self::expect).
    #[cfg(feature = "tokio")]
    async fn expect_async(&self, step: Verb, want: CmEvent) -> Result<Event> {
        expected(step, want, self.next_event_async(|| format!("{step}: the {want:?} event")).await?)
    }

    /// The CM's attributes for moving a QP to `state` (`rdma_init_qp_attr`).
    fn qp_attr(&self, state: sys::ibv_qp_state) -> Result<CmAttr> {
        let mut attr = sys::ibv_qp_attr { qp_state: state, ..Default::default() };
        let mut mask = 0i32;
        // SAFETY: the identifier is alive; both out-pointers are valid.
        let ret = unsafe { sys::rdma_init_qp_attr(self.ptr(), &mut attr, &mut mask) };
        check(ret, Verb::InitQpAttr, || format!("the attributes of QP state {state}"))?;
        Ok(CmAttr { attr, mask: mask as u32 })
    }

    /// Moves `qp` (of the identifier's device) RESET → INIT with the CM's attributes, granting
    /// `access` (`qp_access_flags` bits), for `verb` (`rdma_connect` or `rdma_accept`: what a
    /// QP of another device is refused as).
    fn qp_to_init(&self, verb: &'static str, qp: Qp<RC, RESET>, access: u32) -> Result<Qp<RC, INIT>> {
        self.check_device(verb, qp.device())?;
        let mut init = self.qp_attr(sys::IBV_QPS_INIT)?;
        init.attr.qp_access_flags = access;
        init.mask |= sys::IBV_QP_ACCESS_FLAGS;
        Ok(qp.cm_modify(&init)?)
    }

    /// Moves `qp` RESET → INIT → RTR with the CM's attributes, granting `access`.
    fn qp_to_rtr(&self, qp: Qp<RC, RESET>, access: u32, param: &ConnParam) -> Result<Qp<RC, RTR>> {
        // The device's limit is needed (and queried) only for the CM's value.
        let max = if param.responder_resources == u8::MAX { qp.device_attr().max_qp_rd_atom() } else { 0 };
        let qp = self.qp_to_init("rdma_accept", qp, access)?;
        let mut rtr = self.qp_attr(sys::IBV_QPS_RTR)?;
        // Before `rdma_accept` the kernel's value is the request's initiator depth; the accept
        // tells the peer it may have `responder_resources` outstanding (the peer's QP takes
        // that from the REP), so the QP must take exactly that many, as librdmacm's own
        // `rdma_accept` sets it. `RDMA_MAX_RESP_RES` (255) asks for the kernel's value, at
        // most what the device takes (librdmacm caps it so, and tells the peer the same).
        if rtr.mask & sys::IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
            let asked = param.responder_resources;
            rtr.attr.max_dest_rd_atomic = passive_dest_rd_atomic(asked, rtr.attr.max_dest_rd_atomic, max);
        }
        Ok(qp.cm_modify(&rtr)?)
    }

    /// Moves `qp` RTR → RTS with the CM's attributes, issuing at most `initiator_depth` RDMA
    /// READ/atomic requests at once (255, `RDMA_MAX_INIT_DEPTH`: the CM's value).
    ///
    /// The CM's value is the peer's responder resources (the REQ's on the passive side, before
    /// the accept; the REP's on the active side): never above it, so the peer's QP has room
    /// for every request this one issues, and never above this side's own initiator depth,
    /// which the accept or connect told the peer.
    ///
    /// On failure the QP is [flushed] (receives may be posted on it).
    fn qp_to_rts(&self, qp: Qp<RC, RTR>, initiator_depth: u8) -> Result<Qp<RC, RTS>> {
        let mut rts = or_flush!(self.qp_attr(sys::IBV_QPS_RTS), qp);
        if rts.mask & sys::IBV_QP_MAX_QP_RD_ATOMIC != 0 {
            // The device's limit is needed (and queried) only for the CM's value.
            let max = if initiator_depth == u8::MAX { qp.device_attr().max_qp_init_rd_atom() } else { 0 };
            rts.attr.max_rd_atomic = rts_rd_atomic(initiator_depth, rts.attr.max_rd_atomic, max);
        }
        qp.cm_modify(&rts).map_err(|e| flushed(e.qp, e.error))
    }

    /// Refuses an object (a QP, a PD) of another device than the one the identifier is bound
    /// to, as `verb` (the verb the program called): `device` is the object's.
    fn check_device(&self, verb: &'static str, device: &ContextInner) -> Result<()> {
        same_device(verb, self.device_identity(), device)
    }

    /// Which device the identifier is bound to, if any yet, and its name: by the kernel's index
    /// of the device where it reports one, as a context's
    /// ([`ContextInner::identity`](crate::device::ContextInner)), so a device created anew under
    /// the name of an earlier one is another device.
    fn device_identity(&self) -> Option<(DeviceIdentity, String)> {
        let (dev, name) = self.device()?;
        // SAFETY: `dev` is the bound device, alive as long as the identifier (`RawId::device`).
        let index = unsafe { sys::ibv_get_device_index(dev.as_ptr()) };
        Some((DeviceIdentity::of(index, &name), name))
    }

    /// The Q_Key the CM gives UD QPs of this identifier (`rdma_init_qp_attr` to INIT:
    /// `RDMA_UDP_QKEY` for `RDMA_PS_UDP`), which the peer's sends carry.
    fn qkey(&self) -> Result<u32> {
        let init = self.qp_attr(sys::IBV_QPS_INIT)?;
        if init.mask & sys::IBV_QP_QKEY == 0 {
            return Err(Error::invalid("rdma_init_qp_attr", "the connection manager gave no Q_Key"));
        }
        Ok(init.attr.qkey)
    }

    /// Moves a UD `qp` (of the identifier's device) RESET → INIT with the CM's port, P_Key
    /// index and Q_Key, then RTR and RTS (send PSN 0), as librdmacm readies the UD QPs it
    /// creates itself.
    fn ud_qp_to_rts(&self, qp: Qp<UD, RESET>) -> Result<Qp<UD, RTS>> {
        self.check_device("rdma_init_qp_attr", qp.device())?;
        let init = self.qp_attr(sys::IBV_QPS_INIT)?;
        let qp: Qp<UD, INIT> = qp.cm_modify(&init)?;
        let qp = qp.to_rtr(&UdRtr)?;
        Ok(qp.to_rts(&SqPsn { sq_psn: 0 })?)
    }
}

/// `e` if it is `want`, the outcome of `step`; otherwise the typed error of the event that came
/// instead: [`Error::Rejected`] with the peer's private data, or [`Error::Cm`].
fn expected(step: Verb, want: CmEvent, e: Event) -> Result<Event> {
    if e.kind == want {
        return Ok(e);
    }
    Err(match e.kind {
        CmEvent::Rejected => Error::Rejected { status: e.status, private_data: e.private_data },
        kind => Error::Cm { step, event: kind, status: e.status },
    })
}

/// A QP held by a CM step that has not finished (`Connecting`, `Accepting`, an async step's
/// future), or by a `Connection`: moved to ERR if it is dropped unfinished (or undisconnected),
/// so owned requests posted on it come back flushed (as after a failed step) instead of
/// waiting on a QP in INIT or RTR, or on a connection nobody serves, forever.
struct FlushOnDrop<S: crate::transport::QpState>(Option<Qp<RC, S>>);

impl<S: crate::transport::QpState> FlushOnDrop<S> {
    fn take(mut self) -> Qp<RC, S> {
        self.0.take().expect("taken once")
    }

    fn qp(&self) -> &Qp<RC, S> {
        self.0.as_ref().expect("held until taken")
    }

    fn qp_mut(&mut self) -> &mut Qp<RC, S> {
        self.0.as_mut().expect("held until taken")
    }
}

impl<S: crate::transport::QpState> Drop for FlushOnDrop<S> {
    fn drop(&mut self) {
        if let Some(qp) = self.0.take() {
            drop(qp.to_error());
        }
    }
}

/// A socket address as librdmacm takes it (`struct sockaddr_in` / `sockaddr_in6`).
enum RawAddr {
    V4(sys::sockaddr_in),
    V6(sys::sockaddr_in6),
}

impl RawAddr {
    fn new(a: SocketAddr) -> Self {
        match a {
            SocketAddr::V4(a) => RawAddr::V4(sys::sockaddr_in {
                sin_family: sys::AF_INET as u16,
                sin_port: a.port().to_be(),
                sin_addr: sys::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => {
                let mut s = sys::sockaddr_in6 {
                    sin6_family: sys::AF_INET6 as u16,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_scope_id: a.scope_id(),
                    ..Default::default()
                };
                s.sin6_addr.__in6_u.__u6_addr8 = a.ip().octets();
                RawAddr::V6(s)
            }
        }
    }

    fn as_mut_ptr(&mut self) -> *mut sys::sockaddr {
        match self {
            RawAddr::V4(s) => (s as *mut sys::sockaddr_in).cast(),
            RawAddr::V6(s) => (s as *mut sys::sockaddr_in6).cast(),
        }
    }
}

/// A CM timeout in milliseconds, as librdmacm takes it.
fn millis(t: Duration) -> i32 {
    i32::try_from(t.as_millis()).unwrap_or(i32::MAX)
}

/// The identifier's state: a new identifier.
#[derive(Debug)]
pub struct Idle;
/// The identifier's state: its destination address resolved to a local RDMA device.
#[derive(Debug)]
pub struct AddrResolved;
/// The identifier's state: the route to the destination resolved; ready to connect.
#[derive(Debug)]
pub struct RouteResolved;

/// An RDMA CM identifier (`struct rdma_cm_id`) in state `S`, of an `RC` connection being set
/// up (port space `RDMA_PS_TCP`, [`CmId::new`]) or of a `UD` peer being resolved
/// (`RDMA_PS_UDP`, [`CmId::new_ud`]). Destroyed on drop (`rdma_destroy_id`), with its event
/// channel.
pub struct CmId<S, T: CmTransport = RC> {
    raw: RawId,
    _state: PhantomData<(S, T)>,
}

impl<S, T: CmTransport> fmt::Debug for CmId<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("transport", &T::NAME)
            .field("state", &std::any::type_name::<S>())
            .field("device", &self.raw.device_name())
            .finish()
    }
}

/// What each side asks of the connection (`struct rdma_conn_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data for the peer: at most 56 bytes with a connect, 196 with an accept, 148 with
    /// a reject (the IB CM's limits, which the RoCE CM shares).
    pub private_data: Vec<u8>,
    /// RDMA READ and atomic requests this side accepts from the peer at once. 255
    /// (`RDMA_MAX_RESP_RES`) takes the CM's value, capped at the device's `max_qp_rd_atom`: on
    /// the passive side what the request's initiator depth asks.
    pub responder_resources: u8,
    /// RDMA READ and atomic requests this side issues at once. 255 (`RDMA_MAX_INIT_DEPTH`)
    /// takes the CM's value (the peer's responder resources), capped at the device's
    /// `max_qp_init_rd_atom`.
    pub initiator_depth: u8,
    /// Retries of a request the peer does not acknowledge (0..=7; active side).
    pub retry_count: u8,
    /// Retries after a receiver-not-ready NAK (0..=7; 7 = forever; active side).
    pub rnr_retry_count: u8,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

impl ConnParam {
    /// The raw parameters of a connect or accept of `qp`, checked; `max` is the limit of the
    /// private data. They say whether `qp` takes its receives from a shared receive queue
    /// (`srq`, rdma_connect(3), rdma_accept(3): librdmacm reads it off a QP created on the
    /// identifier, and takes the parameter's for any other QP, as the library's are).
    pub(crate) fn raw_for<S: crate::transport::QpState>(
        &self,
        qp: &Qp<RC, S>,
        max: usize,
        verb: &'static str,
    ) -> Result<sys::rdma_conn_param> {
        let mut raw = self.raw(qp.qp_num(), max, verb)?;
        raw.srq = u8::from(qp.shared.srq.is_some());
        Ok(raw)
    }

    /// The raw parameters naming `qp_num`, checked; `max` is the limit of the private data.
    pub(crate) fn raw(&self, qp_num: u32, max: usize, verb: &'static str) -> Result<sys::rdma_conn_param> {
        if self.private_data.len() > max {
            return Err(Error::invalid(
                verb,
                format!("{} bytes of private data; at most {max}", self.private_data.len()),
            ));
        }
        if self.retry_count > 7 || self.rnr_retry_count > 7 {
            return Err(Error::invalid(verb, "retry_count and rnr_retry_count are 0..=7"));
        }
        Ok(sys::rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                std::ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            private_data_len: self.private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num,
        })
    }
}

/// The largest private data of a connect, an accept and a reject (IBTA CM REQ, REP, REJ).
pub(crate) const CONNECT_PRIVATE: usize = 56;
pub(crate) const ACCEPT_PRIVATE: usize = 196;
pub(crate) const REJECT_PRIVATE: usize = 148;

impl CmId<Idle, RC> {
    /// `rdma_create_event_channel` and `rdma_create_id` (`RDMA_PS_TCP`): a new identifier for
    /// an RC connection.
    ///
    /// # Errors
    /// [`Error::Verb`] with `rdma_create_event_channel` or `rdma_create_id` and its errno.
    ///
    /// See rdma_create_id(3).
    #[doc(alias = "rdma_create_id")]
    pub fn new() -> Result<Self> {
        Ok(CmId { raw: RawId::new::<RC>()?, _state: PhantomData })
    }
}

impl CmId<Idle, UD> {
    /// `rdma_create_event_channel` and `rdma_create_id` (`RDMA_PS_UDP`): a new identifier that
    /// resolves a UD service at an IP address and port to its QP number and Q_Key
    /// ([`CmId::resolve_peer`]).
    ///
    /// # Errors
    /// [`Error::Verb`] with `rdma_create_event_channel` or `rdma_create_id` and its errno.
    ///
    /// See rdma_create_id(3).
    #[doc(alias = "rdma_create_id")]
    pub fn new_ud() -> Result<Self> {
        Ok(CmId { raw: RawId::new::<UD>()?, _state: PhantomData })
    }
}

impl<T: CmTransport> CmId<Idle, T> {
    /// `rdma_resolve_addr`: resolves `dst` (and `src`, if given) to a local RDMA device and
    /// waits at most `timeout` (plus a second) for the outcome.
    ///
    /// # Errors
    /// [`Error::Cm`] with `ADDR_ERROR` and its status (no route, no RDMA device for the
    /// address); [`Error::Timeout`]; [`Error::Verb`] with `rdma_resolve_addr`.
    ///
    /// See rdma_resolve_addr(3).
    #[doc(alias = "rdma_resolve_addr")]
    pub fn resolve_addr(
        self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<CmId<AddrResolved, T>> {
        self.start_resolve_addr(src, dst, timeout)?;
        self.raw.expect(Verb::ResolveAddr, CmEvent::AddrResolved, timeout.saturating_add(Duration::from_secs(1)))?;
        Ok(CmId { raw: self.raw, _state: PhantomData })
    }

    /// `rdma_resolve_addr`, awaited: the asynchronous [`resolve_addr`](Self::resolve_addr) (`tokio`
    /// feature): the CM reports the outcome within `timeout` (`ADDR_ERROR` after it). Dropping the
    /// future destroys the identifier.
    ///
    /// # Errors
    /// As [`resolve_addr`](Self::resolve_addr) (no [`Error::Timeout`]: bound it with
    /// `tokio::time::timeout`), and [`Error::Verb`] with `rdma_get_cm_event` outside a tokio
    /// runtime.
    ///
    /// See rdma_resolve_addr(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_resolve_addr")]
    pub async fn resolve_addr_async(
        self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<CmId<AddrResolved, T>> {
        self.raw.runtime_check(|| format!("{}: the AddrResolved event", Verb::ResolveAddr))?;
        self.start_resolve_addr(src, dst, timeout)?;
        self.raw.expect_async(Verb::ResolveAddr, CmEvent::AddrResolved).await?;
        Ok(CmId { raw: self.raw, _state: PhantomData })
    }

    fn start_resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr, timeout: Duration) -> Result<()> {
        let mut src = src.map(RawAddr::new);
        let mut dst_raw = RawAddr::new(dst);
        let src_ptr = src.as_mut().map_or(std::ptr::null_mut(), RawAddr::as_mut_ptr);
        // SAFETY: the identifier is alive; the addresses are valid sockaddrs for the call
        // (librdmacm copies them).
        let ret = unsafe { sys::rdma_resolve_addr(self.raw.ptr(), src_ptr, dst_raw.as_mut_ptr(), millis(timeout)) };
        check(ret, Verb::ResolveAddr, || format!("{dst}"))
    }
}

impl<T: CmTransport> CmId<AddrResolved, T> {
    /// The name of the RDMA device the address resolved to: create the QP there.
    pub fn device_name(&self) -> Option<String> {
        self.raw.device_name()
    }

    /// `rdma_resolve_route`: resolves the route to the destination, waiting at most `timeout`
    /// (plus a second).
    ///
    /// # Errors
    /// [`Error::Cm`] with `ROUTE_ERROR`; [`Error::Timeout`]; [`Error::Verb`] with
    /// `rdma_resolve_route`.
    ///
    /// See rdma_resolve_route(3).
    #[doc(alias = "rdma_resolve_route")]
    pub fn resolve_route(self, timeout: Duration) -> Result<CmId<RouteResolved, T>> {
        self.start_resolve_route(timeout)?;
        self.raw.expect(Verb::ResolveRoute, CmEvent::RouteResolved, timeout.saturating_add(Duration::from_secs(1)))?;
        Ok(CmId { raw: self.raw, _state: PhantomData })
    }

    /// `rdma_resolve_route`, awaited: the asynchronous [`resolve_route`](Self::resolve_route)
    /// (`tokio` feature): the CM reports the outcome within `timeout`. Dropping the future destroys
    /// the identifier.
    ///
    /// # Errors
    /// As [`resolve_route`](Self::resolve_route), without [`Error::Timeout`].
    ///
    /// See rdma_resolve_route(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_resolve_route")]
    pub async fn resolve_route_async(self, timeout: Duration) -> Result<CmId<RouteResolved, T>> {
        self.raw.runtime_check(|| format!("{}: the RouteResolved event", Verb::ResolveRoute))?;
        self.start_resolve_route(timeout)?;
        self.raw.expect_async(Verb::ResolveRoute, CmEvent::RouteResolved).await?;
        Ok(CmId { raw: self.raw, _state: PhantomData })
    }

    fn start_resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: the identifier is alive, its address resolved.
        let ret = unsafe { sys::rdma_resolve_route(self.raw.ptr(), millis(timeout)) };
        check(ret, Verb::ResolveRoute, || "the route".into())
    }
}

impl<T: CmTransport> CmId<RouteResolved, T> {
    /// The name of the RDMA device the route goes through: create the QP there.
    pub fn device_name(&self) -> Option<String> {
        self.raw.device_name()
    }

    /// The port of that device the route leaves from.
    pub fn port_num(&self) -> u8 {
        self.raw.port_num()
    }
}

impl CmId<RouteResolved, RC> {
    /// `rdma_init_qp_attr` and `ibv_modify_qp`: moves `qp` (the program's own, on
    /// [`CmId::device_name`]'s device) to INIT with the CM's attributes, granting `access`:
    /// receives may be posted on it now ([`Connecting::qp`], owned receives), before
    /// [`Connecting::connect`] asks the peer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a QP of another device; [`Error::Verb`] with
    /// `rdma_init_qp_attr` or `ibv_modify_qp`. The QP is dropped with an error.
    ///
    /// See rdma_init_qp_attr(3).
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn prepare<A: AccessSet>(self, qp: impl CmReadies<RC>, access: A) -> Result<Connecting> {
        let qp = self.raw.qp_to_init("rdma_connect", qp.into_reset(), qp_access_flags(access))?;
        Ok(Connecting { raw: self.raw, qp: FlushOnDrop(Some(qp)) })
    }

    /// `rdma_connect` of the program's own `qp`: [`CmId::prepare`] then [`Connecting::connect`].
    ///
    /// # Errors
    /// As those two.
    ///
    /// See rdma_connect(3).
    #[doc(alias = "rdma_connect")]
    pub fn connect<A: AccessSet>(
        self,
        qp: impl CmReadies<RC>,
        access: A,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<Connection> {
        self.prepare(qp, access)?.connect(param, timeout)
    }

    /// `rdma_connect` of the program's own `qp`, awaited: [`CmId::prepare`] then
    /// [`Connecting::connect_async`] (`tokio` feature).
    ///
    /// # Errors
    /// As those two.
    ///
    /// See rdma_connect(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_connect")]
    pub async fn connect_async<A: AccessSet>(
        self,
        qp: impl CmReadies<RC>,
        access: A,
        param: &ConnParam,
    ) -> Result<Connection> {
        self.prepare(qp, access)?.connect_async(param).await
    }
}

/// The states in which an identifier is bound to a device ([`AddrResolved`],
/// [`RouteResolved`]): where a UD QP can be readied with the CM's attributes. Sealed.
pub trait Bound: sealed::Sealed {}
impl sealed::Sealed for AddrResolved {}
impl Bound for AddrResolved {}
impl sealed::Sealed for RouteResolved {}
impl Bound for RouteResolved {}

impl<S: Bound> CmId<S, UD> {
    /// `rdma_init_qp_attr` and `ibv_modify_qp` for a UD QP: moves `qp` (the program's own, on
    /// [`CmId::device_name`]'s device) RESET → INIT with the CM's port, P_Key index and Q_Key, then
    /// RTR and RTS: ready to receive the service's (or the multicast group's) datagrams and to send
    /// once [`CmId::resolve_peer`] (or [`CmId::join_multicast`]) has the address. One UD QP may
    /// serve any number of peers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a QP of another device; [`Error::Verb`] with
    /// `rdma_init_qp_attr` or `ibv_modify_qp`. The QP is dropped with an error.
    ///
    /// See rdma_init_qp_attr(3).
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn ready_qp(&self, qp: impl CmReadies<UD>) -> Result<Qp<UD, RTS>> {
        self.raw.ud_qp_to_rts(qp.into_reset())
    }

    /// `rdma_init_qp_attr`: the Q_Key the CM gives this identifier's UD QPs (`RDMA_UDP_QKEY`),
    /// as [`CmId::ready_qp`] sets it.
    ///
    /// # Errors
    /// [`Error::Verb`] with `rdma_init_qp_attr`.
    ///
    /// See rdma_init_qp_attr(3).
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn qkey(&self) -> Result<u32> {
        self.raw.qkey()
    }
}

impl CmId<AddrResolved, UD> {
    /// `rdma_join_multicast`: joins the multicast group `group` (the address this identifier
    /// resolved, `resolve_addr(Some(local address), group, ..)`), waits at most `timeout` for
    /// the join (`MULTICAST_JOIN`), attaches `qp` to the group (`ibv_attach_mcast`: the group's
    /// datagrams are delivered to its receive queue) and creates in `pd` the address handle
    /// that sends to the group ([`McGroup::peer`]: QP number `0xFFFFFF`, the group's Q_Key).
    ///
    /// The membership borrows the QP: it cannot be dropped or moved while attached. Dropping
    /// the [`McGroup`] (or [`McGroup::leave`]) detaches it and leaves the group.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for an address that is not multicast, a QP or PD of
    ///   another device, a QP whose Q_Key is not the group's (its datagrams would be
    ///   dropped: ready it with [`CmId::ready_qp`]), or a QP on another port of the device
    ///   than the identifier's (the group's datagrams arrive on the identifier's port);
    /// - [`Error::Cm`] with `MULTICAST_ERROR` and its status, or another event;
    /// - [`Error::Timeout`];
    /// - [`Error::Verb`] with `rdma_join_multicast`, `ibv_query_qp`, `ibv_attach_mcast` or
    ///   `ibv_create_ah` and its errno.
    ///
    /// See rdma_join_multicast(3), ibv_attach_mcast(3).
    #[doc(alias = "rdma_join_multicast")]
    #[doc(alias = "ibv_attach_mcast")]
    pub fn join_multicast<'q>(
        self,
        group: IpAddr,
        qp: &'q impl ReadyUd,
        pd: &Pd,
        timeout: Duration,
    ) -> Result<McGroup<'q>> {
        let qp = qp.ready_ud();
        let (membership, qkey) = self.start_join(group, qp, pd)?;
        let e = membership.raw.expect(Verb::JoinMulticast, CmEvent::MulticastJoin, timeout)?;
        finish_join(membership, qkey, e, qp, pd)
    }

    /// `rdma_join_multicast`, awaited: the asynchronous [`join_multicast`](Self::join_multicast)
    /// (`tokio` feature): waits for the `MULTICAST_JOIN` event with tokio's reactor. Cancel-safe in
    /// the sense of the other async waits (an event is read only in the poll that resolves the
    /// future); dropping the future while it waits leaves the group and destroys the identifier.
    /// Bound it with `tokio::time::timeout`.
    ///
    /// # Errors
    /// As [`join_multicast`](Self::join_multicast), without [`Error::Timeout`], and
    /// [`Error::Verb`] with `rdma_get_cm_event` outside a tokio runtime (checked before the
    /// join is asked for).
    ///
    /// See rdma_join_multicast(3), ibv_attach_mcast(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_join_multicast")]
    #[doc(alias = "ibv_attach_mcast")]
    pub async fn join_multicast_async<'q>(self, group: IpAddr, qp: &'q impl ReadyUd, pd: &Pd) -> Result<McGroup<'q>> {
        let qp = qp.ready_ud();
        self.raw.runtime_check(|| format!("{}: joining {group}", Verb::JoinMulticast))?;
        let (membership, qkey) = self.start_join(group, qp, pd)?;
        let e = membership.raw.expect_async(Verb::JoinMulticast, CmEvent::MulticastJoin).await?;
        finish_join(membership, qkey, e, qp, pd)
    }

    /// The checks and `rdma_join_multicast`; the membership leaves the group when dropped.
    /// With it, the QP's Q_Key (compared with the group's once the join's event tells it).
    fn start_join(self, group: IpAddr, qp: &Qp<UD, RTS>, pd: &Pd) -> Result<(Membership, u32)> {
        if !group.is_multicast() {
            return Err(Error::invalid("rdma_join_multicast", format!("{group} is not a multicast address")));
        }
        self.raw.check_device("rdma_join_multicast", qp.device())?;
        self.raw.check_device("rdma_join_multicast", pd.device())?;
        let (qkey, port) = qp.qkey_and_port()?;
        same_port("rdma_join_multicast", qp.qp_num(), port, self.raw.port_num())?;
        let mut addr = RawAddr::new(SocketAddr::new(group, 0));
        // SAFETY: the identifier is alive and bound (its address resolved); the address is
        // valid for the call (librdmacm copies it); no context pointer.
        let ret = unsafe { sys::rdma_join_multicast(self.raw.ptr(), addr.as_mut_ptr(), std::ptr::null_mut()) };
        check(ret, Verb::JoinMulticast, || format!("{group}"))?;
        // From here on, any failure leaves the group (the membership's drop).
        Ok((Membership { raw: self.raw, group: addr, joined: true }, qkey))
    }
}

/// `device` (the context of an object given to the CM) is of the device the identifier is bound
/// to (`bound`: its identity and name, if it is bound to one yet).
pub(crate) fn same_device(
    verb: &'static str,
    bound: Option<(DeviceIdentity, String)>,
    device: &ContextInner,
) -> Result<()> {
    match bound {
        Some((identity, _)) if identity == device.identity => Ok(()),
        found => Err(Error::invalid(
            verb,
            format!(
                "the QP or PD is of device {}, the identifier's address is on {}",
                device.name,
                found.map_or_else(|| "no device".to_owned(), |(_, name)| name)
            ),
        )),
    }
}

/// A UD QP serves an identifier only on the identifier's port: datagrams addressed to the
/// identifier (a SIDR reply's peer, a multicast group joined through the port) arrive there, and
/// a QP of another port of the same device would receive none of them.
fn same_port(verb: &'static str, qp_num: u32, qp_port: u8, id_port: u8) -> Result<()> {
    if qp_port == id_port {
        return Ok(());
    }
    Err(Error::invalid(
        verb,
        format!("QP {qp_num:#x} is on port {qp_port}, the identifier's address on port {id_port} of the device"),
    ))
}

/// The rest of a join once its `MULTICAST_JOIN` event `e` arrived: the check of the QP's Q_Key
/// `ours` against the group's, the address handle, the QP attached.
fn finish_join<'q>(membership: Membership, ours: u32, e: Event, qp: &'q Qp<UD, RTS>, pd: &Pd) -> Result<McGroup<'q>> {
    let ud = e.ud.as_ref().ok_or_else(|| Error::invalid("rdma_get_cm_event", "a join event without its address"))?;
    let (gid, lid, qkey) =
        (AddressVector::from_raw(&ud.ah_attr).grh.map(|g| g.dgid).unwrap_or_default(), ud.ah_attr.dlid, ud.qkey);
    if ours != qkey {
        return Err(Error::invalid(
            "rdma_join_multicast",
            format!("QP {:#x} takes Q_Key {ours:#x}, the group's datagrams carry {qkey:#x}", qp.qp_num()),
        ));
    }
    let peer = peer(pd, e)?;
    // Last, so that nothing fails once the QP is attached.
    qp.attach_mcast(gid, lid)?;
    Ok(McGroup { membership, qp, gid, lid, attached: true, peer })
}

/// A joined group, left once (`rdma_leave_multicast`) by [`Membership::leave`] or on drop,
/// before its identifier is destroyed.
struct Membership {
    raw: RawId,
    group: RawAddr,
    joined: bool,
}

impl Membership {
    fn leave(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.joined) {
            return Ok(());
        }
        // SAFETY: the identifier is alive and joined the group at `self.group` (a valid
        // sockaddr for the call), and has not left it (`joined`).
        let ret = unsafe { sys::rdma_leave_multicast(self.raw.ptr(), self.group.as_mut_ptr()) };
        check(ret, Verb::LeaveMulticast, || "the group".into())
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        // Errors cannot be reported here; `McGroup::leave` reports them.
        let _ = self.leave();
    }
}

/// A UD QP's membership of a multicast group ([`CmId::join_multicast`]): the QP attached to
/// the group, and the address that sends to it. Dropping it detaches the QP
/// (`ibv_detach_mcast`) and leaves the group (`rdma_leave_multicast`), then destroys the
/// identifier.
pub struct McGroup<'q> {
    membership: Membership,
    qp: &'q Qp<UD, RTS>,
    gid: crate::device::Gid,
    lid: u16,
    /// Whether the QP is still attached.
    attached: bool,
    peer: UdPeer,
}

impl fmt::Debug for McGroup<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McGroup").field("qp", &self.qp.qp_num()).field("gid", &self.gid).finish()
    }
}

impl McGroup<'_> {
    /// The group as a destination: its address handle, QP number (`0xFFFFFF`, the multicast
    /// QPN) and Q_Key, what a send to every member names.
    pub fn peer(&self) -> &UdPeer {
        &self.peer
    }

    /// The group's GID (the multicast address, IPv4-mapped on RoCE).
    pub fn gid(&self) -> crate::device::Gid {
        self.gid
    }

    /// `ibv_detach_mcast` and `rdma_leave_multicast`: detaches the QP and leaves the group, saying
    /// whether both succeeded (dropping the membership does the same and ignores failures).
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_detach_mcast` or `rdma_leave_multicast` and its errno.
    ///
    /// See rdma_leave_multicast(3), ibv_detach_mcast(3).
    #[doc(alias = "rdma_leave_multicast")]
    #[doc(alias = "ibv_detach_mcast")]
    pub fn leave(mut self) -> Result<()> {
        let detached = self.detach();
        let left = self.membership.leave();
        detached.and(left)
    }

    fn detach(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.attached) {
            return Ok(());
        }
        self.qp.detach_mcast(self.gid, self.lid)
    }
}

impl Drop for McGroup<'_> {
    fn drop(&mut self) {
        // Errors cannot be reported here; `leave` reports them. The membership (a field)
        // leaves the group after this.
        let _ = self.detach();
    }
}

impl CmId<RouteResolved, UD> {
    /// `rdma_connect` on a UD identifier (a service ID resolution, SIDR): asks the service at
    /// the resolved address for its QP number and Q_Key, sending `private_data` (at most 180
    /// bytes), waits at most `timeout` for the answer (`ESTABLISHED`), and creates in `pd` the
    /// address handle towards it. The identifier is done with then and destroyed.
    ///
    /// # Errors
    /// - [`Error::Cm`] with `UNREACHABLE` and its status (the service rejected the request, or
    ///   nothing listens on the port), or another event;
    /// - [`Error::Timeout`];
    /// - [`Error::InvalidArgument`] for a PD of another device or private data above 180 bytes;
    /// - [`Error::Verb`] with `rdma_connect` or `ibv_create_ah` and its errno.
    ///
    /// See rdma_connect(3).
    #[doc(alias = "rdma_connect")]
    pub fn resolve_peer(self, pd: &Pd, private_data: &[u8], timeout: Duration) -> Result<UdPeer> {
        self.start_resolve_peer(pd, private_data)?;
        peer(pd, self.raw.expect(Verb::Connect, CmEvent::Established, timeout)?)
    }

    /// `rdma_connect` to a UD service, awaited: the asynchronous
    /// [`resolve_peer`](Self::resolve_peer) (`tokio` feature). Dropping the future destroys the
    /// identifier.
    ///
    /// # Errors
    /// As [`resolve_peer`](Self::resolve_peer), without [`Error::Timeout`] (the CM gives up
    /// on an unanswered request by itself, `UNREACHABLE`; bound it with
    /// `tokio::time::timeout`).
    ///
    /// See rdma_connect(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_connect")]
    pub async fn resolve_peer_async(self, pd: &Pd, private_data: &[u8]) -> Result<UdPeer> {
        self.raw.runtime_check(|| format!("{}: the Established event", Verb::Connect))?;
        self.start_resolve_peer(pd, private_data)?;
        peer(pd, self.raw.expect_async(Verb::Connect, CmEvent::Established).await?)
    }

    fn start_resolve_peer(&self, pd: &Pd, private_data: &[u8]) -> Result<()> {
        self.raw.check_device("rdma_connect", pd.device())?;
        let mut raw = ud_param(private_data, 0, UD_CONNECT_PRIVATE, "rdma_connect")?;
        // SAFETY: the identifier is alive, its route resolved; `raw` and the private data it
        // points at live across the call (librdmacm copies them).
        let ret = unsafe { sys::rdma_connect(self.raw.ptr(), &mut raw) };
        check(ret, Verb::Connect, || "a UD service (SIDR request)".into())
    }
}

/// The peer a UD `ESTABLISHED` event names, with an address handle towards it in `pd`.
fn peer(pd: &Pd, e: Event) -> Result<UdPeer> {
    let ud = e.ud.ok_or_else(|| Error::invalid("rdma_get_cm_event", "a UD ESTABLISHED event without its address"))?;
    let ah = pd.create_ah(&AddressVector::from_raw(&ud.ah_attr))?;
    Ok(UdPeer { ah, qp_num: ud.qp_num, qkey: ud.qkey, private_data: e.private_data })
}

/// The raw parameters of a UD connect or accept: `private_data` (at most `max` bytes) and the
/// QP number the accept tells the peer.
pub(crate) fn ud_param(
    private_data: &[u8],
    qp_num: u32,
    max: usize,
    verb: &'static str,
) -> Result<sys::rdma_conn_param> {
    if private_data.len() > max {
        return Err(Error::invalid(verb, format!("{} bytes of private data; at most {max}", private_data.len())));
    }
    Ok(sys::rdma_conn_param {
        private_data: if private_data.is_empty() { std::ptr::null() } else { private_data.as_ptr().cast() },
        private_data_len: private_data.len() as u8,
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        srq: 0,
        qp_num,
    })
}

/// A UD service that [`CmId::resolve_peer`] resolved: the address handle towards it, its QP
/// number and Q_Key, what a UD send to it names (`.to(peer.ah(), peer.qp_num(), peer.qkey())`),
/// and the private data it answered with.
#[derive(Debug, Clone)]
pub struct UdPeer {
    ah: Ah,
    qp_num: u32,
    qkey: u32,
    private_data: Vec<u8>,
}

impl UdPeer {
    /// The address handle towards the service (in the PD given to [`CmId::resolve_peer`]).
    pub fn ah(&self) -> &Ah {
        &self.ah
    }

    /// The service's QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// The Q_Key the service's QP takes.
    pub fn qkey(&self) -> u32 {
        self.qkey
    }

    /// The private data the service answered with.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }
}

/// The peer's (responder resources, initiator depth) from a `CONNECT_REQUEST` event's
/// `responder_resources` and `initiator_depth` fields, which are the recipient's view
/// (rdma_get_cm_event(3)): the event's responder resources are the peer's initiator depth, and
/// its initiator depth the peer's responder resources.
pub(crate) fn peer_depths(event_responder_resources: u8, event_initiator_depth: u8) -> (u8, u8) {
    (event_initiator_depth, event_responder_resources)
}

/// The largest private data of a UD connect (SIDR REQ, 216 bytes, less the CM's 36-byte
/// header) and of a UD accept or reject (SIDR REP).
pub(crate) const UD_CONNECT_PRIVATE: usize = 180;
pub(crate) const UD_ACCEPT_PRIVATE: usize = 136;

/// The active side between [`CmId::prepare`] and [`Connecting::connect`]: the QP in INIT,
/// where receives may be posted before the peer can send. Dropped without connecting, it moves
/// the QP to ERR (receives posted on it come back flushed) and destroys the identifier.
pub struct Connecting {
    /// Flushed if the connection is dropped unmade (before the identifier is destroyed).
    qp: FlushOnDrop<INIT>,
    raw: RawId,
}

impl fmt::Debug for Connecting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connecting").field("qp", self.qp.qp()).finish()
    }
}

impl Connecting {
    /// The QP, in INIT: post receives on it ([`Qp::post_recv_owned`]; they stay posted
    /// through the connection's transitions).
    pub fn qp(&self) -> &Qp<RC, INIT> {
        self.qp.qp()
    }

    /// `rdma_connect`: asks the peer to connect, and on its acceptance moves the QP to RTR
    /// and RTS with the CM's attributes and completes the connection (`rdma_establish`);
    /// waits at most `timeout` for the peer's answer.
    ///
    /// # Errors
    /// - [`Error::Rejected`] with the peer's private data (the peer rejected, or nobody
    ///   listens on the port);
    /// - [`Error::Cm`] with `UNREACHABLE`, `CONNECT_ERROR` or another event, and its status;
    /// - [`Error::Timeout`];
    /// - [`Error::InvalidArgument`] for private data above 56 bytes or retry counts above 7;
    /// - [`Error::Verb`] with `rdma_connect`, `rdma_init_qp_attr`, `ibv_modify_qp` or
    ///   `rdma_establish` and its errno.
    ///
    /// With an error the QP is moved to ERR (receives posted on it complete flushed, their
    /// tokens hand the buffers back) and dropped.
    ///
    /// See rdma_connect(3), rdma_establish(3).
    #[doc(alias = "rdma_connect")]
    #[doc(alias = "rdma_establish")]
    pub fn connect(self, param: &ConnParam, timeout: Duration) -> Result<Connection> {
        let Connecting { raw: id, qp } = self;
        let qp = qp.take();
        or_flush!(Self::start(&id, &qp, param), qp);
        let reply = or_flush!(id.expect(Verb::Connect, CmEvent::ConnectResponse, timeout), qp);
        Self::finish(id, qp, param, reply)
    }

    /// `rdma_connect`, awaited: the asynchronous [`connect`](Self::connect) (`tokio` feature): the
    /// CM gives up on a peer that does not answer by itself (`UNREACHABLE` or `CONNECT_ERROR`);
    /// bound it with `tokio::time::timeout`. Dropping the future before it is done (while it waits,
    /// or before it was ever polled) moves the QP to ERR (receives posted on it come back flushed)
    /// and destroys the identifier.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), without [`Error::Timeout`].
    ///
    /// See rdma_connect(3), rdma_establish(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_connect")]
    pub async fn connect_async(self, param: &ConnParam) -> Result<Connection> {
        // The QP is in its guard when the future exists: an unpolled future dropped flushes it
        // too (device `cm_hostile::async_waits::connect_and_accept_futures_dropped_before_their_first_poll_hand_the_receives_back_flushed`).
        // `self` is kept whole until the wait is over: its fields drop in their order, the QP
        // moved to ERR before the identifier is destroyed.
        let check = self.raw.runtime_check(|| format!("{}: the ConnectResponse event", Verb::Connect));
        or_flush!(check, self.qp.take());
        or_flush!(Self::start(&self.raw, self.qp.qp(), param), self.qp.take());
        let reply = self.raw.expect_async(Verb::Connect, CmEvent::ConnectResponse).await;
        let Connecting { raw: id, qp: held } = self;
        let qp = held.take();
        let reply = or_flush!(reply, qp);
        Self::finish(id, qp, param, reply)
    }

    /// `rdma_connect` with `param` naming `qp`.
    fn start(id: &RawId, qp: &Qp<RC, INIT>, param: &ConnParam) -> Result<()> {
        let mut raw = param.raw_for(qp, CONNECT_PRIVATE, "rdma_connect")?;
        // SAFETY: the identifier is alive, its route resolved; `raw` and the private data it
        // points at live across the call (librdmacm copies them).
        let ret = unsafe { sys::rdma_connect(id.ptr(), &mut raw) };
        check(ret, Verb::Connect, || format!("QP {:#x}", qp.qp_num()))
    }

    /// On the peer's `reply`: the QP to RTR and RTS, and `rdma_establish`.
    fn finish(id: RawId, qp: Qp<RC, INIT>, param: &ConnParam, reply: Event) -> Result<Connection> {
        let mut rtr = or_flush!(id.qp_attr(sys::IBV_QPS_RTR), qp);
        if rtr.mask & sys::IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
            rtr.attr.max_dest_rd_atomic = rtr.attr.max_dest_rd_atomic.min(param.responder_resources);
        }
        let qp: Qp<RC, RTR> = qp.cm_modify(&rtr).map_err(|e| flushed(e.qp, e.error))?;
        let qp = id.qp_to_rts(qp, param.initiator_depth)?;
        // SAFETY: the identifier is alive and got its connect response.
        let ret = unsafe { sys::rdma_establish(id.ptr()) };
        or_flush!(check(ret, Verb::Establish, || format!("QP {:#x}", qp.qp_num())), qp);
        Ok(Connection { raw: id, qp: FlushOnDrop(Some(qp)), private_data: reply.private_data })
    }
}

/// A listening RDMA CM identifier (`rdma_bind_addr` + `rdma_listen`): the passive side, for
/// `RC` connections ([`CmListener::bind`]) or `UD` service resolutions
/// ([`CmListener::bind_ud`]). Destroyed on drop.
pub struct CmListener<T: CmTransport = RC> {
    raw: RawId,
    /// Held from reading a request's event to its identifier's migration to a channel of its
    /// own ([`CmListener::try_request`]): until then the new identifier's events come to this
    /// channel, where another thread's read would take them.
    reading: std::sync::Mutex<()>,
    _transport: PhantomData<T>,
}

impl<T: CmTransport> fmt::Debug for CmListener<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmListener").field("transport", &T::NAME).field("port", &self.port()).finish()
    }
}

impl CmListener<RC> {
    /// `rdma_bind_addr` and `rdma_listen`: listens on `addr` (port 0: a port the system
    /// chooses, [`CmListener::port`]) with a backlog of `backlog` pending requests.
    ///
    /// # Errors
    /// [`Error::Verb`] with `rdma_create_id`, `rdma_bind_addr` (e.g. `EADDRINUSE`, or
    /// `EADDRNOTAVAIL` for an address of no RDMA device) or `rdma_listen` and its errno.
    ///
    /// See rdma_bind_addr(3), rdma_listen(3).
    #[doc(alias = "rdma_listen")]
    #[doc(alias = "rdma_bind_addr")]
    pub fn bind(addr: SocketAddr, backlog: u16) -> Result<CmListener> {
        Self::listen(addr, backlog)
    }
}

impl CmListener<UD> {
    /// `rdma_bind_addr` and `rdma_listen` on a UD identifier (`RDMA_PS_UDP`): answers service
    /// ID resolutions of UD peers ([`CmId::resolve_peer`]) on `addr` (port 0: a port the
    /// system chooses), with a backlog of `backlog` pending requests.
    ///
    /// # Errors
    /// As [`CmListener::bind`].
    ///
    /// See rdma_bind_addr(3), rdma_listen(3).
    #[doc(alias = "rdma_listen")]
    #[doc(alias = "rdma_bind_addr")]
    pub fn bind_ud(addr: SocketAddr, backlog: u16) -> Result<CmListener<UD>> {
        Self::listen(addr, backlog)
    }
}

impl<T: CmTransport> CmListener<T> {
    fn listen(addr: SocketAddr, backlog: u16) -> Result<CmListener<T>> {
        let raw = RawId::new::<T>()?;
        let mut a = RawAddr::new(addr);
        // SAFETY: the identifier is alive; the address is valid for the call.
        let ret = unsafe { sys::rdma_bind_addr(raw.ptr(), a.as_mut_ptr()) };
        check(ret, Verb::BindAddr, || format!("{addr}"))?;
        // SAFETY: the identifier is alive and bound.
        let ret = unsafe { sys::rdma_listen(raw.ptr(), i32::from(backlog)) };
        check(ret, Verb::Listen, || format!("{addr}, backlog {backlog}"))?;
        Ok(CmListener { raw, reading: std::sync::Mutex::new(()), _transport: PhantomData })
    }

    /// `rdma_get_src_port`: the local port it listens on (in host byte order).
    ///
    /// See rdma_get_src_port(3).
    #[doc(alias = "rdma_get_src_port")]
    pub fn port(&self) -> u16 {
        // SAFETY: the identifier is alive and bound; the port comes in network byte order.
        u16::from_be(unsafe { sys::rdma_get_src_port(self.raw.ptr()) })
    }

    /// `rdma_get_cm_event`, bounded: waits at most `timeout` for the next connection request.
    /// Threads (and tasks) may wait on one listener together: each request goes to one of
    /// them, with its identifier moved to a channel of its own before another reads the
    /// listener's.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::Cm`] for another event on the listener (e.g.
    /// `DEVICE_REMOVAL`); [`Error::Verb`] with `rdma_get_cm_event` or `rdma_migrate_id`.
    ///
    /// See rdma_get_cm_event(3).
    #[doc(alias = "rdma_get_cm_event")]
    pub fn next_request(&self, timeout: Duration) -> Result<ConnRequest<T>> {
        self.raw.next_with(timeout, &Self::what, || self.try_request())
    }

    /// `rdma_get_cm_event`, awaited: the asynchronous [`next_request`](Self::next_request) (`tokio`
    /// feature): cancel-safe (a request is read only in the poll that resolves the future, and
    /// adopted in that poll), so it may race a timeout or a shutdown signal in `tokio::select!`.
    ///
    /// # Errors
    /// As [`next_request`](Self::next_request), without [`Error::Timeout`].
    ///
    /// See rdma_get_cm_event(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_get_cm_event")]
    pub async fn next_request_async(&self) -> Result<ConnRequest<T>> {
        self.raw.next_async_with(&Self::what, || self.try_request()).await
    }

    fn what() -> String {
        format!("{}: the {:?} event", Verb::Listen, CmEvent::ConnectRequest)
    }

    /// The next request, if an event is pending: read, and its identifier moved to a channel
    /// of its own, under `reading`, so that no other thread reads this channel in between
    /// (where the new identifier's first events still arrive; its migration moves those not
    /// read yet). Never blocks but on that lock, whose holders do not block either.
    fn try_request(&self) -> Result<Option<ConnRequest<T>>> {
        let _reading = self.reading.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(e) = self.raw.try_event(&Self::what)? else { return Ok(None) };
        self.request(expected(Verb::Listen, CmEvent::ConnectRequest, e)?).map(Some)
    }

    /// The request a `CONNECT_REQUEST` event carried.
    fn request(&self, e: Event) -> Result<ConnRequest<T>> {
        // SAFETY: a CONNECT_REQUEST's identifier is new and ours to accept, reject or destroy;
        // it has the listener's port space.
        let raw = unsafe { RawId::adopt(e.id, self.raw.ud) }?;
        Ok(ConnRequest {
            raw,
            private_data: e.private_data,
            peer_depths: peer_depths(e.responder_resources, e.initiator_depth),
            _transport: PhantomData,
        })
    }
}

/// A request a listener received (a connection request on `RC`, a service ID resolution on
/// `UD`): its private data, and its identifier, which [`ConnRequest::accept`] or
/// [`ConnRequest::reject`] answers. Dropping it destroys the identifier without an answer (the
/// peer's connect then fails).
pub struct ConnRequest<T: CmTransport = RC> {
    raw: RawId,
    private_data: Vec<u8>,
    /// The peer's (responder resources, initiator depth) ([`peer_depths`]).
    peer_depths: (u8, u8),
    _transport: PhantomData<T>,
}

impl<T: CmTransport> fmt::Debug for ConnRequest<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnRequest")
            .field("transport", &T::NAME)
            .field("device", &self.raw.device_name())
            .field("private_data", &self.private_data.len())
            .finish()
    }
}

impl<T: CmTransport> ConnRequest<T> {
    /// The private data the peer sent with its connect.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The name of the RDMA device the request arrived on: create the QP there.
    pub fn device_name(&self) -> Option<String> {
        self.raw.device_name()
    }

    /// The port of that device the request arrived on.
    pub fn port_num(&self) -> u8 {
        self.raw.port_num()
    }

    /// `rdma_reject`: refuses the request, sending `private_data` (at most 148 bytes on `RC`,
    /// 136 on `UD`) to the peer, whose connect fails: with [`Error::Rejected`] carrying it on
    /// `RC`, with [`Error::Cm`] (`UNREACHABLE`) on `UD`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for private data above the limit; [`Error::Verb`] with
    /// `rdma_reject`.
    ///
    /// See rdma_reject(3).
    #[doc(alias = "rdma_reject")]
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        let max = if self.raw.ud { UD_ACCEPT_PRIVATE } else { REJECT_PRIVATE };
        if private_data.len() > max {
            return Err(Error::invalid(
                "rdma_reject",
                format!("{} bytes of private data; at most {max}", private_data.len()),
            ));
        }
        let ptr = if private_data.is_empty() { std::ptr::null() } else { private_data.as_ptr().cast() };
        // SAFETY: the identifier is alive; the private data is valid for the call.
        let ret = unsafe { sys::rdma_reject(self.raw.ptr(), ptr, private_data.len() as u8) };
        check(ret, Verb::Reject, || "a connection request".into())
    }
}

impl ConnRequest<UD> {
    /// `rdma_init_qp_attr` and `ibv_modify_qp` for a UD QP: moves `qp` (the program's own, on
    /// the request's device) RESET → INIT with the CM's port, P_Key index and Q_Key, then RTR
    /// and RTS, as [`CmId::ready_qp`]: a QP to [accept](ConnRequest::accept) this request and
    /// any later one with.
    ///
    /// # Errors
    /// As [`CmId::ready_qp`].
    ///
    /// See rdma_init_qp_attr(3).
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn ready_qp(&self, qp: impl CmReadies<UD>) -> Result<Qp<UD, RTS>> {
        self.raw.ud_qp_to_rts(qp.into_reset())
    }

    /// `rdma_init_qp_attr`: the Q_Key the CM gives UD QPs for this request (`RDMA_UDP_QKEY`),
    /// which the peer's sends carry and the accept tells it: the `remote_qkey` of replies to the
    /// peer.
    ///
    /// # Errors
    /// [`Error::Verb`] with `rdma_init_qp_attr`.
    ///
    /// See rdma_init_qp_attr(3).
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn qkey(&self) -> Result<u32> {
        self.raw.qkey()
    }

    /// `rdma_accept` on a UD request (a SIDR reply): tells the peer `qp`'s number and the
    /// CM's Q_Key, with `private_data` (at most 136 bytes). The peer's address is not in the
    /// request: a UD service answers a datagram with an address handle made from it
    /// ([`Pd::create_ah_from_wc`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a QP of another device than the request's, a QP on
    /// another port of it than the request's, a QP whose Q_Key is not the CM's (the peer's
    /// datagrams would be dropped: ready it with [`ConnRequest::ready_qp`]) or private data
    /// above 136 bytes; [`Error::Verb`] with
    /// `ibv_query_qp`, `rdma_init_qp_attr` or `rdma_accept`.
    ///
    /// See rdma_accept(3).
    #[doc(alias = "rdma_accept")]
    pub fn accept(self, qp: &impl ReadyUd, private_data: &[u8]) -> Result<()> {
        let qp = qp.ready_ud();
        self.raw.check_device("rdma_accept", qp.device())?;
        let (theirs, (ours, port)) = (self.raw.qkey()?, qp.qkey_and_port()?);
        if theirs != ours {
            return Err(Error::invalid(
                "rdma_accept",
                format!("QP {:#x} takes Q_Key {ours:#x}, the peer will send with the CM's {theirs:#x}", qp.qp_num()),
            ));
        }
        same_port("rdma_accept", qp.qp_num(), port, self.raw.port_num())?;
        let mut raw = ud_param(private_data, qp.qp_num(), UD_ACCEPT_PRIVATE, "rdma_accept")?;
        // SAFETY: the identifier is alive (a request's); `raw` and its private data live
        // across the call (librdmacm copies them).
        let ret = unsafe { sys::rdma_accept(self.raw.ptr(), &mut raw) };
        check(ret, Verb::Accept, || format!("a UD request with QP {:#x}", qp.qp_num()))
    }
}

impl ConnRequest<RC> {
    /// The RDMA READ / atomic depths the peer asked for: (its responder resources, its
    /// initiator depth), as it gave them to its `rdma_connect`. Its initiator depth is how many
    /// it may have outstanding towards this side at once: what [`ConnParam::responder_resources`]
    /// of 255 takes.
    pub fn peer_depths(&self) -> (u8, u8) {
        self.peer_depths
    }

    /// `rdma_init_qp_attr` and `ibv_modify_qp`: moves `qp` (the program's own, on the request's
    /// device) to INIT, granting `access`, and RTR with the CM's attributes (taking as many
    /// READ/atomic requests of the peer at once as `param`'s responder resources, which the accept
    /// tells the peer): receives may be posted on it now ([`Accepting::qp`], owned receives),
    /// before [`Accepting::accept`] lets the peer send.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a QP of another device; [`Error::Verb`] with
    /// `rdma_init_qp_attr` or `ibv_modify_qp` (depths of 255: the CM's value, capped at the
    /// device's limits). The QP is dropped with an error, and the request unanswered (the
    /// peer's connect fails).
    ///
    /// See rdma_init_qp_attr(3).
    #[doc(alias = "rdma_init_qp_attr")]
    pub fn prepare<A: AccessSet>(self, qp: impl CmReadies<RC>, access: A, param: ConnParam) -> Result<Accepting> {
        let qp = self.raw.qp_to_rtr(qp.into_reset(), qp_access_flags(access), &param)?;
        Ok(Accepting { raw: self.raw, qp: FlushOnDrop(Some(qp)), param, private_data: self.private_data })
    }

    /// `rdma_accept` on the program's own `qp`: [`ConnRequest::prepare`] then
    /// [`Accepting::accept`].
    ///
    /// # Errors
    /// As those two.
    ///
    /// See rdma_accept(3).
    #[doc(alias = "rdma_accept")]
    pub fn accept<A: AccessSet>(
        self,
        qp: impl CmReadies<RC>,
        access: A,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<Connection> {
        self.prepare(qp, access, param.clone())?.accept(timeout)
    }

    /// `rdma_accept` on the program's own `qp`, awaited: [`ConnRequest::prepare`] then
    /// [`Accepting::accept_async`] (`tokio` feature).
    ///
    /// # Errors
    /// As those two.
    ///
    /// See rdma_accept(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_accept")]
    pub async fn accept_async<A: AccessSet>(
        self,
        qp: impl CmReadies<RC>,
        access: A,
        param: &ConnParam,
    ) -> Result<Connection> {
        self.prepare(qp, access, param.clone())?.accept_async().await
    }
}

/// The passive side between [`ConnRequest::prepare`] and [`Accepting::accept`]: the QP in RTR,
/// where receives may be posted before the peer can send (sends wait for the connection).
/// Dropped without accepting, it moves the QP to ERR (receives posted on it come back flushed)
/// and destroys the request's identifier (the peer's connect fails).
pub struct Accepting {
    /// Flushed if the request is dropped unaccepted (before the identifier is destroyed).
    qp: FlushOnDrop<RTR>,
    raw: RawId,
    param: ConnParam,
    private_data: Vec<u8>,
}

impl fmt::Debug for Accepting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Accepting").field("qp", self.qp.qp()).finish()
    }
}

impl Accepting {
    /// The QP, in RTR: post receives on it ([`Qp::post_recv_owned`]; they stay posted through
    /// the connection's transitions).
    pub fn qp(&self) -> &Qp<RC, RTR> {
        self.qp.qp()
    }

    /// `rdma_accept`: moves the QP to RTS, accepts with the parameters given to
    /// [`ConnRequest::prepare`], and waits at most `timeout` for the connection to be
    /// established.
    ///
    /// # Errors
    /// - [`Error::Cm`] with the event that came instead of `ESTABLISHED`;
    /// - [`Error::Timeout`];
    /// - [`Error::InvalidArgument`] for private data above 196 bytes;
    /// - [`Error::Verb`] with `rdma_init_qp_attr`, `ibv_modify_qp` or `rdma_accept`.
    ///
    /// With an error the QP is moved to ERR (receives posted on it complete flushed, their
    /// tokens hand the buffers back) and dropped.
    ///
    /// See rdma_accept(3).
    #[doc(alias = "rdma_accept")]
    pub fn accept(self, timeout: Duration) -> Result<Connection> {
        let (id, qp, private_data) = self.start()?;
        or_flush!(id.expect(Verb::Accept, CmEvent::Established, timeout), qp);
        Ok(Connection { raw: id, qp: FlushOnDrop(Some(qp)), private_data })
    }

    /// `rdma_accept`, awaited: the asynchronous [`accept`](Self::accept) (`tokio` feature); bound
    /// it with `tokio::time::timeout`. Dropping the future before it is done (while it waits, or
    /// before it was ever polled) moves the QP to ERR (receives posted on it come back flushed) and
    /// destroys the identifier (an unanswered request is refused).
    ///
    /// # Errors
    /// As [`accept`](Self::accept), without [`Error::Timeout`].
    ///
    /// See rdma_accept(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_accept")]
    pub async fn accept_async(self) -> Result<Connection> {
        // In its guard when the future exists, kept whole as in `Connecting::connect_async`;
        // then `held`, declared after `id`, drops before it.
        or_flush!(self.raw.runtime_check(|| format!("{}: the Established event", Verb::Accept)), self.qp.take());
        let (id, qp, private_data) = Self::start(self)?;
        let held = FlushOnDrop(Some(qp));
        let established = id.expect_async(Verb::Accept, CmEvent::Established).await;
        let qp = held.take();
        or_flush!(established, qp);
        Ok(Connection { raw: id, qp: FlushOnDrop(Some(qp)), private_data })
    }

    /// The QP to RTS and `rdma_accept` (the QP flushed on failure).
    fn start(self) -> Result<(RawId, Qp<RC, RTS>, Vec<u8>)> {
        let Accepting { raw: id, qp, param, private_data } = self;
        let qp = qp.take();
        let mut raw = or_flush!(param.raw_for(&qp, ACCEPT_PRIVATE, "rdma_accept"), qp);
        let qp = id.qp_to_rts(qp, param.initiator_depth)?;
        // SAFETY: the identifier is alive (a connection request's); `raw` and its private data
        // live across the call.
        let ret = unsafe { sys::rdma_accept(id.ptr(), &mut raw) };
        or_flush!(check(ret, Verb::Accept, || format!("QP {:#x}", qp.qp_num())), qp);
        Ok((id, qp, private_data))
    }
}

/// How the peer ended a connection ([`Connection::wait_disconnected`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerEnded {
    /// `RDMA_CM_EVENT_DISCONNECTED`: the peer disconnected (or its identifier was destroyed)
    /// after it saw the connection established.
    Disconnected,
    /// `RDMA_CM_EVENT_REJECTED` on the established connection: the peer went away before it
    /// saw the connection established (its side was still accepting).
    Rejected {
        /// The reject reason (28: the consumer's, i.e. the peer's identifier destroyed).
        status: i32,
    },
}

/// An established RC connection: the connected QP and the connection's identifier.
///
/// The QP is the program's: post on it with scopes, lanes and owned tokens ([`Connection::qp`],
/// [`Connection::qp_mut`]). [`Connection::wait_disconnected`] sees the peer's disconnect;
/// [`Connection::disconnect`] ends the connection and hands the QP back in ERR, its outstanding
/// requests flushed. Dropping it destroys the identifier, which disconnects, and moves the QP
/// to ERR before dropping it: owned requests still outstanding on it (their tokens keep the QP
/// alive) come back flushed instead of waiting on a connection nobody serves.
pub struct Connection {
    raw: RawId,
    qp: FlushOnDrop<RTS>,
    private_data: Vec<u8>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection").field("qp", self.qp.qp()).finish()
    }
}

impl Connection {
    /// The connected QP.
    pub fn qp(&self) -> &Qp<RC, RTS> {
        self.qp.qp()
    }

    /// The connected QP, exclusively (for lanes). A QP put in its place (`mem::swap`,
    /// `mem::replace`) becomes the connection's: [`disconnect`](Self::disconnect) and the drop
    /// then move that one to ERR, and the QP taken out stays connected as it is, a QP of the
    /// program's like any other.
    pub fn qp_mut(&mut self) -> &mut Qp<RC, RTS> {
        self.qp.qp_mut()
    }

    /// The private data the peer sent: with its accept (active side) or its connect (passive
    /// side).
    pub fn peer_private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// `rdma_get_cm_event`, bounded: waits at most `timeout` for the peer to end the connection,
    /// and says how: `RDMA_CM_EVENT_DISCONNECTED` (its `rdma_disconnect`, or its identifier
    /// destroyed, e.g. with its process, after it saw the connection established), or
    /// `REJECTED` (a peer that went away before it saw the connection established, which this
    /// side already had).
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::Cm`] for another event (e.g. `DEVICE_REMOVAL`);
    /// [`Error::Verb`] with `rdma_get_cm_event`.
    ///
    /// See rdma_get_cm_event(3).
    #[doc(alias = "rdma_get_cm_event")]
    pub fn wait_disconnected(&self, timeout: Duration) -> Result<PeerEnded> {
        Self::ended(self.raw.next_event(timeout, || "the peer's disconnect".into())?)
    }

    /// `rdma_get_cm_event`, awaited: the asynchronous [`wait_disconnected`](Self::wait_disconnected)
    /// (`tokio` feature): cancel-safe (dropping the future loses no event). Bound it with
    /// `tokio::time::timeout`.
    ///
    /// # Errors
    /// As [`wait_disconnected`](Self::wait_disconnected), without [`Error::Timeout`].
    ///
    /// See rdma_get_cm_event(3).
    #[cfg(feature = "tokio")]
    #[doc(alias = "rdma_get_cm_event")]
    pub async fn wait_disconnected_async(&self) -> Result<PeerEnded> {
        Self::ended(self.raw.next_event_async(|| "the peer's disconnect".into()).await?)
    }

    fn ended(e: Event) -> Result<PeerEnded> {
        match e.kind {
            CmEvent::Disconnected => Ok(PeerEnded::Disconnected),
            CmEvent::Rejected => Ok(PeerEnded::Rejected { status: e.status }),
            kind => Err(Error::Cm { step: Verb::Disconnect, event: kind, status: e.status }),
        }
    }

    /// `rdma_disconnect`, then the QP moved to ERR (its outstanding requests complete with
    /// `IBV_WC_WR_FLUSH_ERR`) and handed back; the identifier is destroyed.
    ///
    /// # Errors
    /// [`Error::Verb`] with `rdma_disconnect` or `ibv_modify_qp`.
    ///
    /// See rdma_disconnect(3).
    #[doc(alias = "rdma_disconnect")]
    pub fn disconnect(self) -> Result<Qp<RC, crate::transport::ERR>> {
        // SAFETY: the identifier is alive and connected (or disconnected by the peer, which
        // rdma_disconnect accepts).
        let ret = unsafe { sys::rdma_disconnect(self.raw.ptr()) };
        let Connection { raw, qp, .. } = self;
        let qp = qp.take();
        let disconnected = check(ret, Verb::Disconnect, || format!("QP {:#x}", qp.qp_num()));
        let qp = qp.to_error()?;
        drop(raw);
        disconnected.map(|()| qp)
    }
}

#[cfg(test)]
mod tests {
    use super::{passive_dest_rd_atomic, rts_rd_atomic, same_port};
    use crate::test_util::assert_refused;

    /// A UD QP on another port of the identifier's device is refused, naming the verb, the QP
    /// and both ports (Soft-RoCE devices have one port each: the device tests reach only the
    /// accepted case).
    #[test]
    fn a_ud_qp_on_another_port_than_the_identifiers_is_refused() {
        assert!(same_port("rdma_accept", 0x11, 1, 1).is_ok());
        assert_refused(
            same_port("rdma_join_multicast", 0x11, 2, 1),
            "rdma_join_multicast",
            "QP 0x11 is on port 2, the identifier's address on port 1",
        );
    }

    /// The CM's value (255 asked) is the peer's offer up to the device's limit; an explicit
    /// value is taken as asked (RTR, passive: what the accept tells the peer) or caps the
    /// CM's (RTS). Uncapped, a peer's 200 on a device that takes 128 would be refused by
    /// `ibv_modify_qp`.
    #[test]
    fn the_cms_depths_are_capped_at_the_devices_limits() {
        assert_eq!(passive_dest_rd_atomic(255, 200, 128), 128);
        assert_eq!(passive_dest_rd_atomic(255, 16, 128), 16);
        assert_eq!(passive_dest_rd_atomic(255, 200, 1000), 200, "a limit beyond a u8 caps nothing");
        assert_eq!(passive_dest_rd_atomic(4, 200, 0), 4, "an explicit value is what the accept tells the peer");
        assert_eq!(rts_rd_atomic(255, 200, 128), 128);
        assert_eq!(rts_rd_atomic(255, 3, 128), 3);
        assert_eq!(rts_rd_atomic(4, 200, 0), 4);
        assert_eq!(rts_rd_atomic(4, 1, 0), 1, "never above the peer's responder resources");
    }
}
