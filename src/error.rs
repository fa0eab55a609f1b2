//! The one error type of the crate.
//!
//! Every failure of a C verb becomes [`Error::Verb`], which names the verb, carries its errno as
//! a [`std::io::Error`] and a short context (device, QP number, attribute). Checks this library
//! makes before calling into the provider have their own variants, so that a bad argument is
//! reported as what it is instead of an `EINVAL` from the driver.

use std::fmt;
use std::io;
use std::time::Duration;

/// A C verb, named as in libibverbs, for error messages.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each variant is the C function of the same name
pub enum Verb {
    GetDeviceList,
    OpenDevice,
    QueryDevice,
    QueryDeviceEx,
    QueryPort,
    QueryGid,
    AllocPd,
    CreateAh,
    /// `ibv_init_ah_from_wc` (the address of `ibv_create_ah_from_wc`).
    InitAhFromWc,
    AllocMw,
    BindMw,
    RegMr,
    DeregMr,
    CreateCq,
    PollCq,
    CreateQp,
    ModifyQp,
    QueryQp,
    PostSend,
    PostRecv,
    CreateCompChannel,
    ReqNotifyCq,
    GetCqEvent,
    GetAsyncEvent,
    CreateSrq,
    ModifySrq,
    PostSrqRecv,
    AdviseMr,
    /// `madvise` (the pages of an On-Demand Paging region).
    Madvise,
    /// `ibv_reg_dmabuf_mr`.
    RegDmabufMr,
    /// Making a dma-buf over host memory (`memfd_create`, `/dev/udmabuf`, `UDMABUF_CREATE`).
    UdmabufCreate,
    /// `rdma_create_event_channel` (librdmacm, as the ones below).
    CreateEventChannel,
    CreateId,
    BindAddr,
    Listen,
    ResolveAddr,
    ResolveRoute,
    InitQpAttr,
    Connect,
    Establish,
    Accept,
    Reject,
    Disconnect,
    GetCmEvent,
    MigrateId,
    JoinMulticast,
    LeaveMulticast,
    /// `ibv_attach_mcast`.
    AttachMcast,
    /// `ibv_detach_mcast`.
    DetachMcast,
}

impl Verb {
    /// The C name of the verb, e.g. `"ibv_post_send"`.
    pub const fn name(self) -> &'static str {
        match self {
            Verb::GetDeviceList => "ibv_get_device_list",
            Verb::OpenDevice => "ibv_open_device",
            Verb::QueryDevice => "ibv_query_device",
            Verb::QueryDeviceEx => "ibv_query_device_ex",
            Verb::QueryPort => "ibv_query_port",
            Verb::QueryGid => "ibv_query_gid",
            Verb::AllocPd => "ibv_alloc_pd",
            Verb::CreateAh => "ibv_create_ah",
            Verb::InitAhFromWc => "ibv_init_ah_from_wc",
            Verb::AllocMw => "ibv_alloc_mw",
            Verb::BindMw => "ibv_bind_mw",
            Verb::RegMr => "ibv_reg_mr",
            Verb::DeregMr => "ibv_dereg_mr",
            Verb::CreateCq => "ibv_create_cq",
            Verb::PollCq => "ibv_poll_cq",
            Verb::CreateQp => "ibv_create_qp",
            Verb::ModifyQp => "ibv_modify_qp",
            Verb::QueryQp => "ibv_query_qp",
            Verb::PostSend => "ibv_post_send",
            Verb::PostRecv => "ibv_post_recv",
            Verb::CreateSrq => "ibv_create_srq",
            Verb::ModifySrq => "ibv_modify_srq",
            Verb::PostSrqRecv => "ibv_post_srq_recv",
            Verb::AdviseMr => "ibv_advise_mr",
            Verb::Madvise => "madvise",
            Verb::RegDmabufMr => "ibv_reg_dmabuf_mr",
            Verb::UdmabufCreate => "ioctl(UDMABUF_CREATE)",
            Verb::CreateEventChannel => "rdma_create_event_channel",
            Verb::CreateId => "rdma_create_id",
            Verb::BindAddr => "rdma_bind_addr",
            Verb::Listen => "rdma_listen",
            Verb::ResolveAddr => "rdma_resolve_addr",
            Verb::ResolveRoute => "rdma_resolve_route",
            Verb::InitQpAttr => "rdma_init_qp_attr",
            Verb::Connect => "rdma_connect",
            Verb::Establish => "rdma_establish",
            Verb::Accept => "rdma_accept",
            Verb::Reject => "rdma_reject",
            Verb::Disconnect => "rdma_disconnect",
            Verb::GetCmEvent => "rdma_get_cm_event",
            Verb::MigrateId => "rdma_migrate_id",
            Verb::JoinMulticast => "rdma_join_multicast",
            Verb::LeaveMulticast => "rdma_leave_multicast",
            Verb::AttachMcast => "ibv_attach_mcast",
            Verb::DetachMcast => "ibv_detach_mcast",
            Verb::CreateCompChannel => "ibv_create_comp_channel",
            Verb::ReqNotifyCq => "ibv_req_notify_cq",
            Verb::GetCqEvent => "ibv_get_cq_event",
            Verb::GetAsyncEvent => "ibv_get_async_event",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Errno values the library classifies (libc's, which differ between architectures).
pub(crate) mod errno {
    /// The provider or the kernel driver lacks the feature: `EOPNOTSUPP` or `EPROTONOSUPPORT`.
    pub fn means_unsupported(e: &std::io::Error) -> bool {
        matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT))
    }
}

/// Everything that can go wrong in this crate.
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// A C verb failed; `source` holds its errno.
    Verb {
        /// The verb that failed.
        verb: Verb,
        /// What it was asked to do (device name, QP number, transition, attribute).
        context: String,
        /// The errno the verb reported.
        source: io::Error,
    },
    /// No RDMA device of that name exists on this machine.
    DeviceNotFound {
        /// The name that was asked for.
        name: String,
        /// The devices that do exist.
        available: Vec<String>,
    },
    /// An argument was rejected before anything was handed to the provider.
    InvalidArgument {
        /// The verb (or library call) that would have been made.
        verb: &'static str,
        /// What is wrong with the argument.
        reason: String,
    },
    /// The device does not support what was asked for.
    Unsupported {
        /// The verb that reported it (or that would have been called).
        verb: Verb,
        /// What is not supported, e.g. "XRC_SEND queue pairs".
        what: String,
        /// The errno, when the provider reported one.
        source: Option<io::Error>,
    },
    /// An inline payload is larger than the QP's `max_inline_data`.
    InlineTooLarge {
        /// The QP number.
        qp_num: u32,
        /// The payload length.
        len: usize,
        /// The QP's `max_inline_data`, as granted at creation.
        max: u32,
    },
    /// A work request's scatter/gather list has more entries than its queue was created with
    /// (`max_send_sge`, `max_recv_sge`, an SRQ's `max_sge`).
    TooManySges {
        /// `"send"`, `"receive"` or `"shared receive"`.
        queue: &'static str,
        /// The QP number (0 for a shared receive queue).
        qp_num: u32,
        /// The entries of the request (those of zero bytes left out).
        n: u32,
        /// The queue's maximum, as granted at creation.
        max: u32,
    },
    /// A work queue has no room for another work request until completions are consumed.
    QueueFull {
        /// `"send"` or `"receive"`.
        queue: &'static str,
        /// The QP number.
        qp_num: u32,
        /// The depth of the queue, as the provider granted it.
        depth: u32,
    },
    /// A bounded wait ran out before the event it waited for.
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// A work request completed with an error status.
    Completion(crate::wc::CompletionError),
    /// The connection manager reported `event` where the step `step` expected another one
    /// (e.g. `ADDR_ERROR` for an address resolution, `UNREACHABLE` for a connection).
    Cm {
        /// The step: the librdmacm call whose outcome the event reports.
        step: Verb,
        /// The event the CM reported.
        event: crate::cm::CmEvent,
        /// The event's status (a negative errno, or a transport-specific reason).
        status: i32,
    },
    /// The peer rejected the connection (`RDMA_CM_EVENT_REJECTED`), with its private data.
    Rejected {
        /// The reject reason the CM reported (for InfiniBand CM: the IBTA reject reason; 28 is
        /// "consumer reject", the peer's `rdma_reject`; 8 is "invalid service ID", nobody
        /// listening).
        status: i32,
        /// The private data the peer sent with its reject (empty if none).
        private_data: Vec<u8>,
    },
    /// The QP refuses posts: the library moved it out of the state its type names (to RESET by
    /// a scope that could not drain it, to ERR by [`Scope::flush`](crate::scope::Scope::flush)),
    /// or its CQ reported an error. It must be reset (and reconnected) before it is used again.
    QpBroken {
        /// The QP number.
        qp_num: u32,
    },
    /// An awaited request completes on a CQ that reports to no completion channel (or, for a
    /// shared receive queue, on no CQ yet), so nothing could wake its future: create the CQ
    /// with [`Context::create_cq_with_channel`](crate::device::Context::create_cq_with_channel).
    NoCompletionChannel {
        /// The request.
        what: String,
    },
}

/// Stops the process: the device may still reach memory that is about to be released, and no
/// continuation is sound. Prints `message()` to stderr first, if it can: nothing here unwinds
/// (a failed write, to a closed or full stderr, and a panic while formatting are ignored, its
/// payload leaked), so the abort follows the write (a write that blocks, to a full pipe nobody
/// reads, blocks the thread: it frees nothing either).
#[cold]
#[inline(never)]
pub(crate) fn abort_process(message: impl FnOnce() -> String) -> ! {
    let printed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        use std::io::Write;
        let _ = writeln!(io::stderr().lock(), "typed-verbs: {}", message());
    }));
    // A payload whose drop panicked would unwind from here.
    std::mem::forget(printed);
    std::process::abort()
}

impl Error {
    pub(crate) fn verb(verb: Verb, context: impl Into<String>, source: io::Error) -> Self {
        Error::Verb { verb, context: context.into(), source }
    }

    /// An error from a verb that returns `-1` and sets `errno` (or returns NULL and sets it).
    pub(crate) fn last_os(verb: Verb, context: impl Into<String>) -> Self {
        let e = io::Error::last_os_error();
        // A provider that fails without setting errno leaves 0 ("Success"): say so instead.
        let e = if e.raw_os_error() == Some(0) { io::Error::other("failed without setting errno") } else { e };
        Self::verb(verb, context, e)
    }

    /// An error from a verb that returns the errno value itself.
    pub(crate) fn from_ret(verb: Verb, context: impl Into<String>, ret: i32) -> Self {
        // (`i32::MIN` has no positive counterpart: kept as it is, an errno no system has.)
        let errno = if ret < 0 { ret.checked_neg().unwrap_or(ret) } else { ret };
        Self::verb(verb, context, io::Error::from_raw_os_error(errno))
    }

    pub(crate) fn invalid(verb: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument { verb, reason: reason.into() }
    }

    /// The errno behind this error, when a verb reported one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verb { source, .. } => source.raw_os_error(),
            Error::Unsupported { source: Some(s), .. } => s.raw_os_error(),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Verb { verb, context, source } => write!(f, "{verb} failed ({context}): {source}"),
            Error::DeviceNotFound { name, available } => {
                write!(f, "ibv_get_device_list: no RDMA device named {name:?}")?;
                if available.is_empty() {
                    write!(f, " (no RDMA device is present at all)")
                } else {
                    write!(f, " (present: {})", available.join(", "))
                }
            }
            Error::InvalidArgument { verb, reason } => {
                write!(f, "{verb}: invalid argument: {reason}")
            }
            Error::Unsupported { verb, what, source } => match source {
                Some(s) => write!(f, "{verb}: {what} not supported by this device: {s}"),
                None => write!(f, "{verb}: {what} not supported by this device"),
            },
            Error::InlineTooLarge { qp_num, len, max } => {
                write!(f, "ibv_post_send: inline data of {len} bytes exceeds max_inline_data {max} of QP {qp_num:#x}")
            }
            Error::TooManySges { queue, qp_num, n, max } => write!(
                f,
                "{}: {n} scatter/gather entries exceed the {queue} queue's maximum of {max} (QP {qp_num:#x})",
                if *queue == "send" {
                    "ibv_post_send"
                } else if *queue == "receive" {
                    "ibv_post_recv"
                } else {
                    "ibv_post_srq_recv"
                }
            ),
            Error::QueueFull { queue, qp_num, depth } => write!(
                f,
                "the {queue} queue of QP {qp_num:#x} is full ({depth} work requests outstanding); \
                 consume completions first"
            ),
            Error::Timeout { what, after } => {
                write!(f, "timed out after {after:?} waiting for {what}")
            }
            Error::Completion(e) => write!(f, "{e}"),
            Error::Cm { step, event, status } => {
                write!(f, "{step}: the connection manager reported {event:?} (status {status})")
            }
            Error::Rejected { status, private_data } => write!(
                f,
                "rdma_connect: the peer rejected the connection (reason {status}, {} bytes of private data)",
                private_data.len()
            ),
            Error::QpBroken { qp_num } => {
                write!(
                    f,
                    "QP {qp_num:#x} refuses posts: a scope's drain or flush moved it to RESET or ERR, or its CQ reported an error; reset and reconnect it"
                )
            }
            Error::NoCompletionChannel { what } => write!(
                f,
                "ibv_req_notify_cq: {what} completes on a CQ without a completion channel, so it cannot be awaited \
                 (create the CQ with Context::create_cq_with_channel)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Verb { source, .. } => Some(source),
            Error::Unsupported { source: Some(s), .. } => Some(s),
            Error::Completion(e) => Some(e),
            _ => None,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
