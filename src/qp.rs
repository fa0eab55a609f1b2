//! Queue pairs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_destroy_qp`, and the raw posting that
//! the [scope](crate::scope) builds on.
//!
//! [`Qp<T, S>`] carries its transport `T` and its state `S` as types. Transitions consume the
//! QP and return it in the new state, or give it back unchanged with the error:
//!
//! ```text
//!   create ─▶ RESET ──to_init──▶ INIT ──to_rtr──▶ RTR ──to_rts──▶ RTS
//!               ▲                  │                │               │
//!               └──────── reset() from any state (also after ERR) ──┘
//! ```
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use typed_verbs_sys as sys;

use crate::access::{qp_access_flags, AccessSet};
use crate::ah::AddressVector;
use crate::cq::{Cq, CqShared};
use crate::device::{Gid, Mtu};
use crate::error::{Error, Result, Verb};
use crate::pd::{Pd, PdInner};
use crate::queue::{TrackedQueue, RECV_BIT};
use crate::srq::{Srq, SrqShared};
use crate::transport::{self, IsInit, IsReset, IsRtr, QpState, Transport, RC, RESET, UC, UD};
use crate::wc::Completion;

/// Queue sizes requested at creation (`struct ibv_qp_cap`). The provider may grant more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive request.
    pub max_recv_sge: u32,
    /// Largest inline payload, in bytes.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
    }
}

/// What [`Pd::create_qp`] needs: the completion queues and the queue sizes.
#[derive(Debug, Clone)]
pub struct QpConfig<'a> {
    /// Where send completions go.
    pub send_cq: &'a Cq,
    /// Where receive completions go (may be the same CQ).
    pub recv_cq: &'a Cq,
    /// Queue sizes.
    pub caps: QpCaps,
    /// Take receives from this shared receive queue instead of a receive queue of its own.
    pub srq: Option<&'a Srq>,
}

impl<'a> QpConfig<'a> {
    /// Both queues complete on `cq`, default sizes.
    pub fn new(cq: &'a Cq) -> Self {
        QpConfig { send_cq: cq, recv_cq: cq, caps: QpCaps::default(), srq: None }
    }

    /// Sets the queue sizes.
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.caps = caps;
        self
    }

    /// Takes receives from `srq` (ibv_create_srq(3)).
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }
}

/// `ibv_post_send` as the provider implements it (`struct verbs_context_ops::post_send`).
pub(crate) type PostSendFn =
    unsafe extern "C" fn(*mut sys::ibv_qp, *mut sys::ibv_send_wr, *mut *mut sys::ibv_send_wr) -> i32;
/// `ibv_post_recv` as the provider implements it (`struct verbs_context_ops::post_recv`).
pub(crate) type PostRecvFn =
    unsafe extern "C" fn(*mut sys::ibv_qp, *mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> i32;

/// A queue pair of transport `T` in state `S`: `struct ibv_qp`.
///
/// Destroyed on drop; the CQs and the PD it uses stay alive as long as it does.
pub struct Qp<T: Transport, S: QpState> {
    pub(crate) shared: Arc<QpShared>,
    _type: PhantomData<fn() -> (T, S)>,
}

pub(crate) struct QpShared {
    /// Itself: what a type 2 window bound through the QP keeps ([`QpShared::arc`]).
    me: std::sync::Weak<QpShared>,
    qp: NonNull<sys::ibv_qp>,
    /// The provider's `ibv_post_send` and `ibv_post_recv` (`qp->context->ops`), looked up once:
    /// what verbs.h's inline verbs read on every call.
    pub(crate) post_send_fn: PostSendFn,
    pub(crate) post_recv_fn: PostRecvFn,
    qp_num: u32,
    caps: QpCaps,
    pub(crate) send_cq: Arc<CqShared>,
    pub(crate) recv_cq: Arc<CqShared>,
    pd: Arc<PdInner>,
    pub(crate) sq: TrackedQueue,
    pub(crate) rq: TrackedQueue,
    /// The shared receive queue receives come from, if any (then `rq` is unused).
    pub(crate) srq: Option<Arc<SrqShared>>,
    /// The transport (`IBV_QPT_*`) the QP is counted under on `srq`, set once
    /// [`SrqShared::attach_transport`] counted it ([`QpShared::attach_srq`]); the QP's destroy
    /// takes it off.
    srq_transport: std::sync::OnceLock<u32>,
    broken: AtomicBool,
    /// The peer the QP's address vector names is on the QP's own device (its destination GID
    /// is one of the device's, or its LID the port's), or could not be told apart from it:
    /// set by every transition that sets the address vector (`QpShared::modify`). A
    /// SEND_WITH_INV to such a peer invalidates a window of this device
    /// (`crate::mw::claim_remote_invalidation`).
    peer_on_device: AtomicBool,
    /// What the QP reserved on its send CQ and on its receive CQ (all on the receive CQ when
    /// they are one), freed once its completions are off them; [`NOT_REGISTERED`] on a CQ
    /// where its registration did not happen or was refused (it has no route there, and is
    /// not recorded there when destroyed).
    reserved: [AtomicU64; 2],
    /// The multicast groups the QP is attached to (GID, LID) and how many memberships hold
    /// each: the kernel attaches a QP to a group once (a second `ibv_attach_mcast` is a no-op)
    /// and the first `ibv_detach_mcast` detaches it, so the verbs are called on the first
    /// attach and the last detach only.
    mcast: std::sync::Mutex<Vec<(Gid, u16, usize)>>,
}

// SAFETY: QPs may be used from any thread (libibverbs is thread-safe); our book-keeping is
// behind mutexes and an atomic.
unsafe impl Send for QpShared {}
// SAFETY: as above.
unsafe impl Sync for QpShared {}

/// [`QpShared::reserved`] on a CQ where the QP is not registered.
const NOT_REGISTERED: u64 = u64::MAX;

impl Drop for QpShared {
    fn drop(&mut self) {
        // The CQs' lists of destroyed QPs are held across the destroy (in address order, when
        // there are two), so that no new QP can be registered on them between the destroy and
        // the record: `CqShared::register` then drains this QP's stale completions first.
        let (send, recv) = (&self.send_cq, &self.recv_cq);
        let two = !Arc::ptr_eq(send, recv);
        let (first_cq, second_cq) = if Arc::as_ptr(send) <= Arc::as_ptr(recv) { (send, recv) } else { (recv, send) };
        let mut first = first_cq.retired();
        let mut second = two.then(|| second_cq.retired());
        // SAFETY: the QP is valid and destroyed once. Work requests that borrow memory are
        // only posted inside a scope that holds a borrow of the `Qp`, so none is outstanding
        // with memory the caller can still free; owned buffers of dropped tokens are kept in
        // the queues' graves, released below only if the destroy succeeded. (`verbs` is
        // libibverbs' for every context the library opens.)
        let ret = unsafe { (self.pd.ctx.verbs.destroy_qp)(self.qp.as_ptr()) };
        if ret != 0 {
            // The device may still reach every buffer the QP's queues keep: they are leaked,
            // never freed (DESIGN.md §6, the release rule).
            self.sq.leak_graves();
            self.rq.leak_graves();
            return;
        }
        // Recorded only where it was registered: a QP refused at its registration (another
        // live QP completing there has its number) has no completion there, and a record
        // under that number would take the other QP's for it.
        let retired = |on: &Arc<CqShared>| {
            let i = usize::from(Arc::ptr_eq(on, recv));
            let reserved = self.reserved[i].load(Ordering::Relaxed);
            (reserved != NOT_REGISTERED).then(|| crate::cq::Retired {
                qp_num: Some(self.qp_num),
                srq: self.srq.as_ref().map(Arc::downgrade),
                reserved,
            })
        };
        if let Some(second) = second.as_mut() {
            second.extend(retired(second_cq));
        }
        first.extend(retired(first_cq));
        drop((first, second));
        // Destroyed, the QP consumes no receive of its SRQ any more. The SRQ's transports are
        // locked with no lock of the QP's held (a post of an ODP receive locks them first, then
        // the SRQ's queue).
        if let (Some(srq), Some(&qp_type)) = (&self.srq, self.srq_transport.get()) {
            srq.detach_transport(qp_type);
        }
    }
}

impl<T: Transport, S: QpState> fmt::Debug for Qp<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("transport", &T::NAME)
            .field("state", &S::NAME)
            .field("qp_num", &format_args!("{:#x}", self.shared.qp_num))
            .finish()
    }
}

impl Pd {
    /// `ibv_create_qp`: a new queue pair of transport `T`, in RESET.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for queue sizes of 0 or above the device limits, for CQs
    ///   of another device context or an SRQ of another PD, for an SRQ that holds receives into
    ///   On-Demand Paging memory verified for another transport than `T`, and when a CQ has no
    ///   room left for the queue depths that complete on it (the send depth on the send CQ, the
    ///   receive depth, or the SRQ's depth the first time it is attached, on the receive CQ): a
    ///   CQ holds as many completions as every queue completing on it can have outstanding, so
    ///   it can never overrun;
    /// - [`Error::Unsupported`] when the device does not support transport `T` (e.g.
    ///   XRC_SEND or RAW_PACKET on Soft-RoCE). An XRC_SEND or RAW_PACKET QP, where the device
    ///   creates one, stays in RESET: those transports have no transitions
    ///   ([`crate::transport`], "What exists for each transport");
    /// - [`Error::Verb`] with `ibv_poll_cq` when the completions that destroyed QPs left in a
    ///   CQ cannot be taken off it (a failed poll: the QP could reuse a destroyed one's number,
    ///   and be handed them; they are taken off by the next QP creation on that CQ);
    /// - [`Error::Verb`] with `ibv_create_qp` and its errno otherwise.
    ///
    /// See ibv_create_qp(3).
    #[doc(alias = "ibv_create_qp")]
    pub fn create_qp<T: Transport>(&self, config: &QpConfig<'_>) -> Result<Qp<T, RESET>> {
        let dev = self.inner.ctx.attr();
        let c = config.caps;
        // With a shared receive queue the QP has no receive queue of its own: its sizes may be 0
        // (libibverbs ignores them).
        let has_srq = config.srq.is_some();
        for (what, v, max, zero_ok) in [
            ("max_send_wr", c.max_send_wr, dev.max_qp_wr(), false),
            ("max_recv_wr", c.max_recv_wr, dev.max_qp_wr(), has_srq),
            ("max_send_sge", c.max_send_sge, dev.max_sge(), false),
            ("max_recv_sge", c.max_recv_sge, dev.max_sge(), has_srq),
        ] {
            if (v == 0 && !zero_ok) || v > max {
                return Err(Error::invalid("ibv_create_qp", format!("{what} = {v}; the device allows 1..={max}")));
            }
        }
        // Objects of another device context (or PD) are refused before the provider sees them:
        // the kernel resolves CQ and SRQ handles in the caller's context, where the same
        // number may name another object (two contexts of one device number their objects
        // alike), and the library would route the QP's completions to the wrong books.
        for (what, cq) in [("send_cq", config.send_cq), ("recv_cq", config.recv_cq)] {
            if !Arc::ptr_eq(&cq.inner.ctx, &self.inner.ctx) {
                return Err(Error::invalid(
                    "ibv_create_qp",
                    format!("{what} belongs to another device context than the protection domain"),
                ));
            }
        }
        if let Some(srq) = config.srq {
            if !Arc::ptr_eq(&srq.shared.pd, &self.inner) {
                return Err(Error::invalid(
                    "ibv_create_qp",
                    "the shared receive queue belongs to another protection domain (or device context) than the QP",
                ));
            }
        }
        if T::QP_TYPE == sys::IBV_QPT_XRC_SEND && dev.device_cap_flags() & sys::IBV_DEVICE_XRC == 0 {
            return Err(Error::Unsupported {
                verb: Verb::CreateQp,
                what: "XRC_SEND queue pairs (no IBV_DEVICE_XRC)".into(),
                source: None,
            });
        }
        let mut init = sys::ibv_qp_init_attr {
            send_cq: config.send_cq.as_ptr(),
            recv_cq: config.recv_cq.as_ptr(),
            cap: sys::ibv_qp_cap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
            qp_type: T::QP_TYPE,
            srq: config.srq.map_or(std::ptr::null_mut(), |s| s.as_ptr()),
            // Completions are requested per work request; unsignaled ones are tracked.
            sq_sig_all: 0,
            ..Default::default()
        };
        // The provider's `post_send` and `post_recv`, which every post calls as verbs.h's
        // inline verbs do. (libibverbs gives every context a full table of operations; a
        // provider without them would make a post call a null pointer, so no QP is created.)
        // SAFETY: the PD's context is open (the PD holds it); the provider's operations are set
        // when it is opened and never change.
        let ops = unsafe { &(*self.inner.ctx.ctx.as_ptr()).ops };
        let (Some(post_send_fn), Some(post_recv_fn)) = (ops.post_send, ops.post_recv) else {
            return Err(crate::device::provider_lacks(Verb::CreateQp, "post_send or post_recv", &self.inner.ctx.name));
        };
        // SAFETY: the PD and both CQs are alive (borrowed, and kept alive by the Arcs stored
        // below); `init` is a valid, fully initialised attribute struct.
        let qp = unsafe { sys::ibv_create_qp(self.as_ptr(), &mut init) };
        let Some(qp) = NonNull::new(qp) else {
            let e = std::io::Error::last_os_error();
            let unsupported = crate::error::errno::means_unsupported(&e)
                || (T::QP_TYPE != sys::IBV_QPT_RC
                    && T::QP_TYPE != sys::IBV_QPT_UC
                    && T::QP_TYPE != sys::IBV_QPT_UD
                    && e.raw_os_error() == Some(libc::EINVAL));
            if unsupported {
                return Err(Error::Unsupported {
                    verb: Verb::CreateQp,
                    what: format!("{} queue pairs", T::NAME),
                    source: Some(e),
                });
            }
            return Err(Error::verb(Verb::CreateQp, format!("{} QP on {}", T::NAME, self.inner.ctx.name), e));
        };
        // SAFETY: `qp` is a valid QP just created.
        let qp_num = unsafe { (*qp.as_ptr()).qp_num };
        let granted = QpCaps {
            max_send_wr: init.cap.max_send_wr.max(c.max_send_wr),
            max_recv_wr: init.cap.max_recv_wr.max(c.max_recv_wr),
            max_send_sge: init.cap.max_send_sge.max(c.max_send_sge),
            max_recv_sge: init.cap.max_recv_sge.max(c.max_recv_sge),
            max_inline_data: init.cap.max_inline_data.max(c.max_inline_data),
        };
        let shared = Arc::new_cyclic(|me| QpShared {
            me: me.clone(),
            qp,
            post_send_fn,
            post_recv_fn,
            qp_num,
            caps: granted,
            send_cq: Arc::clone(&config.send_cq.inner),
            recv_cq: Arc::clone(&config.recv_cq.inner),
            pd: Arc::clone(&self.inner),
            // Track against what we asked for: never more than the queue can hold.
            sq: TrackedQueue::new(c.max_send_wr, Some(qp_num)),
            rq: TrackedQueue::new(c.max_recv_wr, None),
            srq: config.srq.map(|s| Arc::clone(&s.shared)),
            srq_transport: std::sync::OnceLock::new(),
            broken: AtomicBool::new(false),
            peer_on_device: AtomicBool::new(false),
            reserved: [AtomicU64::new(NOT_REGISTERED), AtomicU64::new(NOT_REGISTERED)],
            mcast: std::sync::Mutex::new(Vec::new()),
        });
        // Room on the CQs for every completion the queues can have outstanding (their depths,
        // as the library counts them), or a typed error: a CQ cannot overrun (DESIGN.md §6).
        // On an error, dropping `shared` destroys the QP, frees what was reserved and takes its
        // transport off its SRQ if it was counted there. The
        // futures a registration wakes (its drain of destroyed QPs' completions, an SRQ's
        // attach) are woken once this returns, after every reservation is recorded here: a
        // waker that panics cannot leave one unrecorded (never freed).
        let _wakes = crate::queue::DeferWakes::new();
        let sq_need = u64::from(c.max_send_wr);
        let rq_need = if has_srq { 0 } else { u64::from(c.max_recv_wr) };
        let two = !Arc::ptr_eq(&shared.send_cq, &shared.recv_cq);
        if two {
            shared.send_cq.register(qp_num, Arc::downgrade(&shared), None, sq_need)?;
            shared.reserved[0].store(sq_need, Ordering::Relaxed);
        }
        let recv_need = if two { rq_need } else { sq_need + rq_need };
        let srq = shared.srq.as_ref().map(Arc::downgrade);
        let register =
            |srq_need: u64| shared.recv_cq.register(qp_num, Arc::downgrade(&shared), srq.clone(), recv_need + srq_need);
        shared.attach_srq(T::QP_TYPE, T::NAME, register)?;
        shared.reserved[1].store(recv_need, Ordering::Relaxed);
        // A queue whose CQ reports to a completion channel can be awaited: its room for wakers
        // and stored completions is reserved now, so that its futures allocate nothing later.
        if shared.send_cq.channel.is_some() {
            shared.sq.reserve_for_futures();
        }
        if shared.recv_cq.channel.is_some() && !has_srq {
            shared.rq.reserve_for_futures();
        }
        Ok(Qp { shared, _type: PhantomData })
    }
}

/// A failed state transition: the error, and the QP back in the state it was in.
pub struct TransitionError<Q> {
    /// What went wrong.
    pub error: Error,
    /// The QP, unchanged.
    pub qp: Q,
}

impl<Q> fmt::Debug for TransitionError<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitionError").field("error", &self.error).finish_non_exhaustive()
    }
}

impl<Q> fmt::Display for TransitionError<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<Q> std::error::Error for TransitionError<Q> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<Q> From<TransitionError<Q>> for Error {
    fn from(e: TransitionError<Q>) -> Self {
        e.error
    }
}

/// The result of a transition: the QP in its new state, or the error and the QP unchanged.
pub type TransitionResult<T, From, To> = std::result::Result<Qp<T, To>, TransitionError<Qp<T, From>>>;

mod sealed {
    sealed_trait!();
}

/// The attributes of one state transition of one transport.
///
/// Sealed; implemented by the attribute structs of this module.
pub trait TransitionAttr: sealed::Sealed {
    /// Fills `attr` and returns the `IBV_QP_*` mask, after validating ranges.
    #[doc(hidden)]
    fn fill(&self, attr: &mut sys::ibv_qp_attr) -> Result<u32>;
    /// The port whose MTU bounds `path_mtu`, if the transition sets one.
    #[doc(hidden)]
    fn mtu_check(&self) -> Option<(u8, Mtu)> {
        None
    }
}

/// The attribute types of each transition, per transport. Every transport with transitions
/// has a receive queue ([`HasRecvQueue`](crate::transport::HasRecvQueue)).
#[diagnostic::on_unimplemented(
    message = "`{Self}` queue pairs have no state transitions in this library",
    label = "a `{Self}` queue pair stays in RESET",
    note = "RC, UC and UD queue pairs move through INIT, RTR and RTS (`to_init`, `to_rtr`, `to_rts`); XRC_SEND has no request carrying the remote SRQ number it needs and RAW_PACKET no flow steering, so neither is ever connected (DESIGN.md §4)"
)]
pub trait Transitions: crate::transport::HasRecvQueue {
    /// RESET → INIT.
    type InitAttr: TransitionAttr;
    /// INIT → RTR.
    type RtrAttr: TransitionAttr;
    /// RTR → RTS.
    type RtsAttr: TransitionAttr;
}

/// Refuses `v` (the field `what` of verb `verb`'s attributes) when it does not fit in `bits`
/// bits, as the wire's fields (QP numbers, PSNs) and the timers' encodings.
#[inline(always)]
pub(crate) fn check_bits(verb: &'static str, what: &'static str, v: u32, bits: u32) -> Result<()> {
    if v >> bits != 0 {
        return Err(too_wide(verb, what, v, bits));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn too_wide(verb: &'static str, what: &str, v: u32, bits: u32) -> Error {
    Error::invalid(verb, format!("{what} = {v:#x} does not fit in {bits} bits"))
}

/// RESET → INIT of RC and UC QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectedInit {
    /// The local port (from 1).
    pub port: u8,
    /// The P_Key index.
    pub pkey_index: u16,
    /// `qp_access_flags`: the remote rights of the access set given to
    /// [`ConnectedInit::new`] ([the queue-pair rule](crate::access#queue-pairs)).
    access: u32,
}

impl ConnectedInit {
    /// Port `port`, P_Key index 0, granting the peer the remote rights of `access` (the
    /// [`access`](crate::access) values regions are registered with: `access::REMOTE_RW`,
    /// `Access::NONE.remote_write()`, `Access::NONE` for none). REMOTE_WRITE, REMOTE_READ and
    /// REMOTE_ATOMIC become `qp_access_flags`; LOCAL_WRITE and MW_BIND mean nothing to a QP and
    /// are left out ([the queue-pair rule](crate::access#queue-pairs)). A UC QP's transition
    /// sets REMOTE_WRITE alone (UC has no RDMA READ and no atomics).
    pub fn new<A: AccessSet>(port: u8, access: A) -> Self {
        ConnectedInit { port, pkey_index: 0, access: qp_access_flags(access) }
    }

    /// The `qp_access_flags` this transition sets on an RC QP: `IBV_ACCESS_REMOTE_*` bits (on a
    /// UC QP, their REMOTE_WRITE alone).
    pub fn qp_access_flags(&self) -> u32 {
        self.access
    }
}

impl sealed::Sealed for ConnectedInit {}

/// The INIT attributes of a UC QP: of the remote rights, only REMOTE_WRITE is set (UC has no
/// RDMA READ and no atomics, ibv_post_send(3)), so an access set with more (`REMOTE_ALL`) does
/// not grant rights the transport has no operation for, nor fail on a device without atomics.
struct RemoteWriteOnly<'a>(&'a dyn TransitionAttr);

impl sealed::Sealed for RemoteWriteOnly<'_> {}
impl TransitionAttr for RemoteWriteOnly<'_> {
    fn fill(&self, a: &mut sys::ibv_qp_attr) -> Result<u32> {
        let mask = self.0.fill(a)?;
        a.qp_access_flags &= sys::IBV_ACCESS_REMOTE_WRITE;
        Ok(mask)
    }
    fn mtu_check(&self) -> Option<(u8, Mtu)> {
        self.0.mtu_check()
    }
}
impl TransitionAttr for ConnectedInit {
    fn fill(&self, a: &mut sys::ibv_qp_attr) -> Result<u32> {
        a.port_num = self.port;
        a.pkey_index = self.pkey_index;
        a.qp_access_flags = self.access;
        Ok(sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS)
    }
}

/// RESET → INIT of UD QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdInit {
    /// The local port (from 1).
    pub port: u8,
    /// The P_Key index.
    pub pkey_index: u16,
    /// The Q_Key incoming datagrams must carry.
    pub qkey: u32,
}

impl sealed::Sealed for UdInit {}
impl TransitionAttr for UdInit {
    fn fill(&self, a: &mut sys::ibv_qp_attr) -> Result<u32> {
        a.port_num = self.port;
        a.pkey_index = self.pkey_index;
        a.qkey = self.qkey;
        Ok(sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_QKEY)
    }
}

/// INIT → RTR of an RC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcRtr {
    /// The path MTU (at most the port's active MTU).
    pub path_mtu: Mtu,
    /// The remote QP number (24 bits).
    pub dest_qp_num: u32,
    /// The first PSN expected from the peer (24 bits).
    pub rq_psn: u32,
    /// RDMA READ/atomic requests the peer may have outstanding towards us.
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer code (0..=31).
    pub min_rnr_timer: u8,
    /// How to reach the peer.
    pub av: AddressVector,
}

impl RcRtr {
    /// Towards `dest_qp_num` at `av`, expecting PSN `rq_psn`; MTU 1024, one outstanding
    /// READ/atomic, RNR timer code 12 (as the rdma-core pingpong examples use).
    pub fn new(av: AddressVector, dest_qp_num: u32, rq_psn: u32) -> Self {
        RcRtr { path_mtu: Mtu::Mtu1024, dest_qp_num, rq_psn, max_dest_rd_atomic: 1, min_rnr_timer: 12, av }
    }
}

impl sealed::Sealed for RcRtr {}
impl TransitionAttr for RcRtr {
    fn fill(&self, a: &mut sys::ibv_qp_attr) -> Result<u32> {
        check_bits("ibv_modify_qp", "dest_qp_num", self.dest_qp_num, 24)?;
        check_bits("ibv_modify_qp", "rq_psn", self.rq_psn, 24)?;
        check_bits("ibv_modify_qp", "min_rnr_timer", self.min_rnr_timer.into(), 5)?;
        a.path_mtu = self.path_mtu.to_raw();
        a.dest_qp_num = self.dest_qp_num;
        a.rq_psn = self.rq_psn;
        a.max_dest_rd_atomic = self.max_dest_rd_atomic;
        a.min_rnr_timer = self.min_rnr_timer;
        a.ah_attr = self.av.to_raw();
        Ok(sys::IBV_QP_AV
            | sys::IBV_QP_PATH_MTU
            | sys::IBV_QP_DEST_QPN
            | sys::IBV_QP_RQ_PSN
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::IBV_QP_MIN_RNR_TIMER)
    }
    fn mtu_check(&self) -> Option<(u8, Mtu)> {
        Some((self.av.port, self.path_mtu))
    }
}

/// INIT → RTR of a UC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UcRtr {
    /// The path MTU (at most the port's active MTU).
    pub path_mtu: Mtu,
    /// The remote QP number (24 bits).
    pub dest_qp_num: u32,
    /// The first PSN expected from the peer (24 bits).
    pub rq_psn: u32,
    /// How to reach the peer.
    pub av: AddressVector,
}

impl UcRtr {
    /// Towards `dest_qp_num` at `av`, expecting PSN `rq_psn`, MTU 1024.
    pub fn new(av: AddressVector, dest_qp_num: u32, rq_psn: u32) -> Self {
        UcRtr { path_mtu: Mtu::Mtu1024, dest_qp_num, rq_psn, av }
    }
}

impl sealed::Sealed for UcRtr {}
impl TransitionAttr for UcRtr {
    fn fill(&self, a: &mut sys::ibv_qp_attr) -> Result<u32> {
        check_bits("ibv_modify_qp", "dest_qp_num", self.dest_qp_num, 24)?;
        check_bits("ibv_modify_qp", "rq_psn", self.rq_psn, 24)?;
        a.path_mtu = self.path_mtu.to_raw();
        a.dest_qp_num = self.dest_qp_num;
        a.rq_psn = self.rq_psn;
        a.ah_attr = self.av.to_raw();
        Ok(sys::IBV_QP_AV | sys::IBV_QP_PATH_MTU | sys::IBV_QP_DEST_QPN | sys::IBV_QP_RQ_PSN)
    }
    fn mtu_check(&self) -> Option<(u8, Mtu)> {
        Some((self.av.port, self.path_mtu))
    }
}

/// INIT → RTR of a UD QP: nothing to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdRtr;

impl sealed::Sealed for UdRtr {}
impl TransitionAttr for UdRtr {
    fn fill(&self, _: &mut sys::ibv_qp_attr) -> Result<u32> {
        Ok(0)
    }
}

/// RTR → RTS of an RC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcRts {
    /// The first PSN this side sends (24 bits).
    pub sq_psn: u32,
    /// The local ACK timeout code (0..=31; 4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries before RETRY_EXC_ERR (0..=7).
    pub retry_cnt: u8,
    /// RNR retries before RNR_RETRY_EXC_ERR (0..=7; 7 = infinite).
    pub rnr_retry: u8,
    /// RDMA READ/atomic requests this side may have outstanding.
    pub max_rd_atomic: u8,
}

impl RcRts {
    /// Sending from PSN `sq_psn`; timeout 14, retry 7, RNR retry 7, one outstanding
    /// READ/atomic (as the rdma-core pingpong examples use).
    pub fn new(sq_psn: u32) -> Self {
        RcRts { sq_psn, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 }
    }
}

impl sealed::Sealed for RcRts {}
impl TransitionAttr for RcRts {
    fn fill(&self, a: &mut sys::ibv_qp_attr) -> Result<u32> {
        check_bits("ibv_modify_qp", "sq_psn", self.sq_psn, 24)?;
        check_bits("ibv_modify_qp", "timeout", self.timeout.into(), 5)?;
        check_bits("ibv_modify_qp", "retry_cnt", self.retry_cnt.into(), 3)?;
        check_bits("ibv_modify_qp", "rnr_retry", self.rnr_retry.into(), 3)?;
        a.sq_psn = self.sq_psn;
        a.timeout = self.timeout;
        a.retry_cnt = self.retry_cnt;
        a.rnr_retry = self.rnr_retry;
        a.max_rd_atomic = self.max_rd_atomic;
        Ok(sys::IBV_QP_SQ_PSN
            | sys::IBV_QP_TIMEOUT
            | sys::IBV_QP_RETRY_CNT
            | sys::IBV_QP_RNR_RETRY
            | sys::IBV_QP_MAX_QP_RD_ATOMIC)
    }
}

/// RTR → RTS of UC and UD QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqPsn {
    /// The first PSN this side sends (24 bits).
    pub sq_psn: u32,
}

impl sealed::Sealed for SqPsn {}
impl TransitionAttr for SqPsn {
    fn fill(&self, a: &mut sys::ibv_qp_attr) -> Result<u32> {
        check_bits("ibv_modify_qp", "sq_psn", self.sq_psn, 24)?;
        a.sq_psn = self.sq_psn;
        Ok(sys::IBV_QP_SQ_PSN)
    }
}

impl Transitions for RC {
    type InitAttr = ConnectedInit;
    type RtrAttr = RcRtr;
    type RtsAttr = RcRts;
}
impl Transitions for UC {
    type InitAttr = ConnectedInit;
    type RtrAttr = UcRtr;
    type RtsAttr = SqPsn;
}
impl Transitions for UD {
    type InitAttr = UdInit;
    type RtrAttr = UdRtr;
    type RtsAttr = SqPsn;
}

/// A QP state as reported by `ibv_query_qp` (`enum ibv_qp_state`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObservedState {
    /// `IBV_QPS_RESET`.
    Reset,
    /// `IBV_QPS_INIT`.
    Init,
    /// `IBV_QPS_RTR`.
    Rtr,
    /// `IBV_QPS_RTS`.
    Rts,
    /// `IBV_QPS_SQD`.
    Sqd,
    /// `IBV_QPS_SQE`.
    Sqe,
    /// `IBV_QPS_ERR`.
    Err,
    /// A value this library does not know, preserved.
    Unknown(u32),
}

impl ObservedState {
    fn from_raw(v: sys::ibv_qp_state) -> Self {
        match v {
            sys::IBV_QPS_RESET => ObservedState::Reset,
            sys::IBV_QPS_INIT => ObservedState::Init,
            sys::IBV_QPS_RTR => ObservedState::Rtr,
            sys::IBV_QPS_RTS => ObservedState::Rts,
            sys::IBV_QPS_SQD => ObservedState::Sqd,
            sys::IBV_QPS_SQE => ObservedState::Sqe,
            sys::IBV_QPS_ERR => ObservedState::Err,
            other => ObservedState::Unknown(other),
        }
    }
}

/// What a peer needs to connect to a QP: its number, the port's LID, a GID and the first PSN.
/// This is what the rdma-core pingpong examples exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The LID of the port (0 on RoCE).
    pub lid: u16,
    /// The QP number (24 bits).
    pub qp_num: u32,
    /// The first PSN (24 bits).
    pub psn: u32,
    /// The GID to address (all zero when not using a GRH).
    pub gid: Gid,
}

impl<T: Transport, S: QpState> Qp<T, S> {
    fn cast<S2: QpState>(self) -> Qp<T, S2> {
        Qp { shared: self.shared, _type: PhantomData }
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.shared.qp_num
    }

    /// The queue sizes in force.
    pub fn caps(&self) -> QpCaps {
        self.shared.caps
    }

    /// `ibv_query_port` and `ibv_query_gid`: this side's [`Endpoint`] on `port`, using GID
    /// `gid_index` (as [`Link::gid_index`]), starting at `psn`.
    ///
    /// # Errors
    /// As [`Context::query_port`](crate::device::Context::query_port) and
    /// [`Context::query_gid`](crate::device::Context::query_gid).
    ///
    /// See ibv_query_port(3), ibv_query_gid(3).
    #[doc(alias = "ibv_query_gid")]
    pub fn endpoint(&self, port: u8, gid_index: u8, psn: u32) -> Result<Endpoint> {
        let ctx = crate::device::Context { inner: Arc::clone(&self.shared.pd.ctx) };
        let lid = ctx.query_port(port)?.lid();
        let gid = ctx.query_gid(port, gid_index)?;
        Ok(Endpoint { lid, qp_num: self.shared.qp_num, psn: psn & 0xff_ffff, gid })
    }

    fn modify<To: QpState>(self, attr: &dyn TransitionAttr) -> TransitionResult<T, S, To> {
        match self.shared.modify(To::STATE, attr, S::NAME, To::NAME) {
            Ok(()) => Ok(self.cast()),
            Err(error) => Err(TransitionError { error, qp: self }),
        }
    }

    /// `ibv_query_qp`: the state the QP is really in. The type `S` records the last state this
    /// library moved it to; an error completion moves a QP to ERR behind the type's back, and
    /// this is how to observe it (recover with [`Qp::reset`]).
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_query_qp` and its errno.
    ///
    /// See ibv_query_qp(3).
    #[doc(alias = "ibv_query_qp")]
    pub fn query_state(&self) -> Result<ObservedState> {
        Ok(ObservedState::from_raw(self.query(sys::IBV_QP_STATE)?.qp_state))
    }

    /// `ibv_query_qp` of the attributes `mask` names.
    fn query(&self, mask: u32) -> Result<sys::ibv_qp_attr> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: the QP is alive; both out-pointers are valid.
        let ret = unsafe { sys::ibv_query_qp(self.shared.qp.as_ptr(), &mut attr, mask as i32, &mut init) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::QueryQp, format!("QP {:#x}", self.shared.qp_num), ret));
        }
        Ok(attr)
    }

    /// `ibv_modify_qp` to RESET, allowed from every state (also after the QP went to ERR).
    /// Outstanding work requests are gone from the device afterwards.
    ///
    /// On a QP that takes its receives from a shared receive queue, a receive the QP had
    /// taken from the SRQ (a message arriving) and not completed may get no completion when the
    /// QP is reset from RTR or RTS: it stays counted in the SRQ's depth, and its buffer held,
    /// until the SRQ is destroyed. Move the QP to ERR first ([`Qp::to_error`]) and wait for
    /// [`AsyncEvent::LastWqeReached`](crate::event::AsyncEvent::LastWqeReached) and the flushes it
    /// announces.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_modify_qp`; the QP is handed back in its old state.
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn reset(self) -> TransitionResult<T, S, RESET> {
        let r = self.modify::<RESET>(&StateOnly);
        if let Ok(qp) = &r {
            qp.shared.after_reset();
        }
        r
    }

    /// `ibv_modify_qp` to ERR: outstanding work requests complete with `IBV_WC_WR_FLUSH_ERR`.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_modify_qp`; the QP is handed back in its old state.
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn to_error(self) -> TransitionResult<T, S, transport::ERR> {
        self.modify(&StateOnly)
    }
}

impl<S: QpState> Qp<UD, S> {
    /// `ibv_query_qp` of `IBV_QP_QKEY`: the Q_Key datagrams to this QP must carry (what a
    /// peer puts in its sends' `remote_qkey`).
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_query_qp` and its errno.
    ///
    /// See ibv_query_qp(3).
    #[doc(alias = "ibv_query_qp")]
    pub fn qkey(&self) -> Result<u32> {
        Ok(self.query(sys::IBV_QP_QKEY)?.qkey)
    }

    /// `ibv_query_qp` of `IBV_QP_QKEY` and `IBV_QP_PORT` in one call: the Q_Key and the port
    /// of a UD QP (what the connection manager compares with its identifier's).
    pub(crate) fn qkey_and_port(&self) -> Result<(u32, u8)> {
        let a = self.query(sys::IBV_QP_QKEY | sys::IBV_QP_PORT)?;
        Ok((a.qkey, a.port_num))
    }

    /// `ibv_attach_mcast`: datagrams to the multicast group `gid` (`lid` on InfiniBand, 0 on
    /// RoCE) are delivered to this QP's receive queue. Done and undone by the connection
    /// manager's group membership ([`McGroup`](crate::cm::McGroup)), which keeps the QP
    /// borrowed while it is attached. Counted: the QP stays attached until as many
    /// [`detach_mcast`](Self::detach_mcast) calls as attaches (two memberships of one QP in one
    /// group, device `cm_hostile::a_qp_that_joined_one_group_twice_stays_attached_until_its_last_membership_leaves`).
    pub(crate) fn attach_mcast(&self, gid: Gid, lid: u16) -> Result<()> {
        let mut groups = self.shared.mcast.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = groups.iter_mut().find(|g| (g.0, g.1) == (gid, lid)) {
            g.2 += 1;
            return Ok(());
        }
        let raw = gid.to_raw();
        // SAFETY: the QP is alive; `raw` is a valid GID for the call (the verb copies it).
        let ret = unsafe { sys::ibv_attach_mcast(self.shared.qp.as_ptr(), &raw, lid) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::AttachMcast, format!("QP {:#x} to group {gid:?}", self.qp_num()), ret));
        }
        groups.push((gid, lid, 1));
        Ok(())
    }

    /// `ibv_detach_mcast`: undoes [`attach_mcast`](Self::attach_mcast); the verb is called by
    /// the last detach of the group only (its entry is gone afterwards even if the verb fails,
    /// so that a later attach attaches again).
    pub(crate) fn detach_mcast(&self, gid: Gid, lid: u16) -> Result<()> {
        let mut groups = self.shared.mcast.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = groups.iter().position(|g| (g.0, g.1) == (gid, lid)) else {
            return Err(Error::invalid(
                "ibv_detach_mcast",
                format!("QP {:#x} is not attached to {gid:?}", self.qp_num()),
            ));
        };
        if groups[i].2 > 1 {
            groups[i].2 -= 1;
            return Ok(());
        }
        groups.swap_remove(i);
        let raw = gid.to_raw();
        // SAFETY: the QP is alive; `raw` is a valid GID for the call.
        let ret = unsafe { sys::ibv_detach_mcast(self.shared.qp.as_ptr(), &raw, lid) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::DetachMcast, format!("QP {:#x} from group {gid:?}", self.qp_num()), ret));
        }
        Ok(())
    }
}

/// Attributes the connection manager computed for a transition (`rdma_init_qp_attr`), applied
/// as they are (the caller adjusts the fields the program chose, e.g. INIT's access flags).
pub(crate) struct CmAttr {
    pub(crate) attr: sys::ibv_qp_attr,
    pub(crate) mask: u32,
}
impl sealed::Sealed for CmAttr {}
impl TransitionAttr for CmAttr {
    fn fill(&self, a: &mut sys::ibv_qp_attr) -> Result<u32> {
        let state = a.qp_state;
        *a = self.attr;
        a.qp_state = state;
        Ok(self.mask & !sys::IBV_QP_STATE)
    }
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// The transition to `To` with attributes from the connection manager.
    pub(crate) fn cm_modify<To: QpState>(self, attr: &CmAttr) -> TransitionResult<T, S, To> {
        self.modify(attr)
    }

    /// The context the QP was created in.
    pub(crate) fn device(&self) -> &crate::device::ContextInner {
        &self.shared.pd.ctx
    }

    /// The attributes of the device the QP was created on (as read when its context was
    /// opened).
    pub(crate) fn device_attr(&self) -> &crate::device::DeviceAttr {
        self.shared.pd.ctx.attr()
    }
}

/// Where a connected QP talks from: its port and the GID index of its address (the source GID
/// of its address vector, what [`Qp::endpoint`] sends the peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The local port (from 1).
    pub port: u8,
    /// The GID index on that port: a `u8`, as everywhere the library names a GID index
    /// ([`Grh::sgid_index`](crate::ah::Grh::sgid_index),
    /// [`Context::query_gid`](crate::device::Context::query_gid)), because it ends up as
    /// `sgid_index` of `struct ibv_global_route`, a `uint8_t`: an entry above 255 cannot be the
    /// source of a GRH.
    pub gid_index: u8,
}

impl Link {
    /// `ibv_query_gid_ex` and `ibv_query_port`: port `port` of `ctx` with its default GID index
    /// ([`Context::default_gid_index`](crate::device::Context::default_gid_index): the RoCE v2
    /// GID of the interface's IPv4 address on RoCE, the port GID on InfiniBand).
    ///
    /// # Errors
    /// As [`Context::default_gid_index`](crate::device::Context::default_gid_index).
    ///
    /// See ibv_query_gid_ex(3), ibv_query_port(3).
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn default_for(ctx: &crate::device::Context, port: u8) -> Result<Link> {
        Ok(Link { port, gid_index: ctx.default_gid_index(port)? })
    }
}

/// A random 24-bit packet sequence number, different from run to run and from call to call
/// (std's randomly keyed SipHash over the process, the time and a counter), as the initial
/// PSN of a connection.
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    (h.finish() as u32) & 0xff_ffff
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// `ibv_query_port` and `ibv_query_gid`: this side's endpoint on `link` with a
    /// [random initial PSN](random_psn): what the peer needs to connect (send it over any side
    /// channel).
    ///
    /// # Errors
    /// As [`Qp::endpoint`].
    ///
    /// See ibv_query_port(3), ibv_query_gid(3).
    #[doc(alias = "ibv_query_gid")]
    pub fn local_endpoint(&self, link: Link) -> Result<Endpoint> {
        self.endpoint(link.port, link.gid_index, random_psn())
    }

    /// The path MTU towards a peer from `port`: the port's active MTU.
    fn path_mtu(&self, port: u8) -> Result<Mtu> {
        let ctx = crate::device::Context { inner: Arc::clone(&self.shared.pd.ctx) };
        ctx.query_port(port)?
            .active_mtu()
            .ok_or_else(|| Error::invalid("ibv_modify_qp", format!("port {port} reports no active MTU")))
    }
}

/// Where a connected QP's packets go (what INIT → RTR sets besides the peer's QP number and
/// PSN): the address vector towards the peer and the path MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerPath {
    /// How to reach the peer.
    pub av: AddressVector,
    /// The path MTU (at most the port's active MTU).
    pub mtu: Mtu,
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// `ibv_query_port`: the path towards `peer` from `link`, as [`Qp::<RC, RESET>::connect`]
    /// takes it: a GRH from `link`'s GID index (hop limit 64) to the peer's GID, the peer's LID,
    /// and the port's active MTU.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a port without an active MTU;
    /// [`Error::Verb`] with `ibv_query_port`.
    ///
    /// See ibv_query_port(3).
    #[doc(alias = "ibv_query_port")]
    pub fn path_to(&self, link: Link, peer: &Endpoint) -> Result<PeerPath> {
        Ok(PeerPath { av: link_av(link, peer), mtu: self.path_mtu(link.port)? })
    }
}

impl Qp<RC, RESET> {
    /// `ibv_modify_qp`, RESET → INIT → RTR → RTS towards `peer`, from `me` (this QP's endpoint on
    /// `link`, from [`Qp::local_endpoint`]), granting the peer `access`: the transitions every RC
    /// program writes, along [`Qp::path_to`]'s path (the port's active MTU, a GRH from `link`'s
    /// GID), with [`Qp::<RC, INIT>::connect_path`]'s timers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `me` is not this QP's endpoint, or for out-of-range
    /// attributes; [`Error::Verb`] with `ibv_query_port` or `ibv_modify_qp`. The QP is dropped
    /// with an error.
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn connect(
        self,
        link: Link,
        access: impl AccessSet,
        me: &Endpoint,
        peer: &Endpoint,
    ) -> Result<Qp<RC, transport::RTS>> {
        self.check_endpoint(me)?;
        let path = self.path_to(link, peer)?;
        self.to_init(&ConnectedInit::new(link.port, access))?.connect_path(me, peer, &path)
    }
}

impl Qp<RC, transport::INIT> {
    /// `ibv_modify_qp`, INIT → RTR → RTS towards `peer` along `path`, from `me` (this QP's
    /// endpoint): the attributes the rdma-core examples use, one outstanding RDMA READ/atomic each
    /// way, RNR NAK timer code 12, ACK timeout code 14, 7 retries and 7 RNR retries. For a QP whose
    /// receives were posted in INIT, before the endpoints were exchanged (as the pingpong tools
    /// do), or a path of the program's choosing (`-g`, `-m`, `-l` of the C tools).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `me` is not this QP's endpoint, or for out-of-range
    /// attributes; [`Error::Verb`] with `ibv_modify_qp`. The QP is dropped with an error.
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn connect_path(self, me: &Endpoint, peer: &Endpoint, path: &PeerPath) -> Result<Qp<RC, transport::RTS>> {
        self.check_endpoint(me)?;
        let rtr = RcRtr { path_mtu: path.mtu, ..RcRtr::new(path.av, peer.qp_num, peer.psn) };
        Ok(self.to_rtr(&rtr)?.to_rts(&RcRts::new(me.psn))?)
    }
}

impl Qp<UC, RESET> {
    /// `ibv_modify_qp`, RESET → INIT → RTR → RTS towards `peer`, as [`Qp::<RC, RESET>::connect`]
    /// for UC (no acknowledgements, so no timeouts or retries).
    ///
    /// # Errors
    /// As [`Qp::<RC, RESET>::connect`].
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn connect(
        self,
        link: Link,
        access: impl AccessSet,
        me: &Endpoint,
        peer: &Endpoint,
    ) -> Result<Qp<UC, transport::RTS>> {
        self.check_endpoint(me)?;
        let path = self.path_to(link, peer)?;
        self.to_init(&ConnectedInit::new(link.port, access))?.connect_path(me, peer, &path)
    }
}

impl Qp<UC, transport::INIT> {
    /// `ibv_modify_qp`, INIT → RTR → RTS towards `peer` along `path`, as
    /// [`Qp::<RC, INIT>::connect_path`] for UC.
    ///
    /// # Errors
    /// As [`Qp::<RC, INIT>::connect_path`].
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn connect_path(self, me: &Endpoint, peer: &Endpoint, path: &PeerPath) -> Result<Qp<UC, transport::RTS>> {
        self.check_endpoint(me)?;
        let rtr = UcRtr { path_mtu: path.mtu, ..UcRtr::new(path.av, peer.qp_num, peer.psn) };
        Ok(self.to_rtr(&rtr)?.to_rts(&SqPsn { sq_psn: me.psn })?)
    }
}

impl<T: Transport, S: QpState> Qp<T, S> {
    fn check_endpoint(&self, me: &Endpoint) -> Result<()> {
        if me.qp_num != self.shared.qp_num {
            return Err(Error::invalid(
                "ibv_modify_qp",
                format!("the endpoint names QP {:#x}, not this QP {:#x}", me.qp_num, self.shared.qp_num),
            ));
        }
        Ok(())
    }
}

/// The address vector towards `peer` from `link`: a GRH from `link`'s GID index.
fn link_av(link: Link, peer: &Endpoint) -> AddressVector {
    let mut av = AddressVector::global(link.port, peer.gid, link.gid_index);
    av.dlid = peer.lid;
    av
}

struct StateOnly;
impl sealed::Sealed for StateOnly {}
impl TransitionAttr for StateOnly {
    fn fill(&self, _: &mut sys::ibv_qp_attr) -> Result<u32> {
        Ok(0)
    }
}

// `T: Transitions` on each method, not on the block: a transport without transitions then
// fails with the trait's message (E0277), not "method exists but its bounds were not satisfied".
impl<T: Transport, S: QpState> Qp<T, S> {
    /// `ibv_modify_qp` RESET → INIT with the transport's INIT attributes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for out-of-range attributes, [`Error::Verb`] with
    /// `ibv_modify_qp`; the QP is handed back in RESET.
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn to_init(self, attr: &T::InitAttr) -> TransitionResult<T, S, transport::INIT>
    where
        T: Transitions,
        S: IsReset,
    {
        if T::QP_TYPE == sys::IBV_QPT_UC {
            return self.modify(&RemoteWriteOnly(attr));
        }
        self.modify(attr)
    }

    /// `ibv_modify_qp` INIT → RTR with the transport's RTR attributes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for out-of-range attributes or a path MTU above the port's
    /// active MTU, [`Error::Verb`] with `ibv_modify_qp`; the QP is handed back in INIT.
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn to_rtr(self, attr: &T::RtrAttr) -> TransitionResult<T, S, transport::RTR>
    where
        T: Transitions,
        S: IsInit,
    {
        if let Some((port, mtu)) = attr.mtu_check() {
            let ctx = crate::device::Context { inner: Arc::clone(&self.shared.pd.ctx) };
            let active = ctx.query_port(port).map(|p| p.active_mtu());
            let err = match active {
                Err(e) => Some(e),
                Ok(Some(active)) if mtu > active => Some(Error::invalid(
                    "ibv_modify_qp",
                    format!("path MTU {} is above port {port}'s active MTU {}", mtu.bytes(), active.bytes()),
                )),
                Ok(_) => None,
            };
            if let Some(error) = err {
                return Err(TransitionError { error, qp: self });
            }
        }
        self.modify(attr)
    }

    /// `ibv_modify_qp` RTR → RTS with the transport's RTS attributes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for out-of-range attributes, [`Error::Verb`] with
    /// `ibv_modify_qp`; the QP is handed back in RTR.
    ///
    /// See ibv_modify_qp(3).
    #[doc(alias = "ibv_modify_qp")]
    pub fn to_rts(self, attr: &T::RtsAttr) -> TransitionResult<T, S, transport::RTS>
    where
        T: Transitions,
        S: IsRtr,
    {
        self.modify(attr)
    }
}

impl QpShared {
    /// The `struct ibv_qp`, alive as long as `self`.
    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_qp {
        self.qp.as_ptr()
    }

    pub(crate) fn qp_num(&self) -> u32 {
        self.qp_num
    }

    pub(crate) fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The QP's PD.
    pub(crate) fn pd_id(&self) -> crate::pd::PdId {
        self.pd.id()
    }

    /// The entries of a receive into `buf`, with the checks that need no device: every entry's
    /// region in the QP's PD, ODP support of receives on transport `T` (for ODP regions) and
    /// the entries' placement on the device's ODP write path, at most `max_recv_sge` entries.
    #[inline(always)]
    pub(crate) fn recv_sges<T: Transport, L: crate::sgl::Scatter>(
        &self,
        buf: &L,
    ) -> Result<crate::sgl::Collected<L::Sges>> {
        let c = buf.collect("ibv_post_recv")?;
        c.odp.check(T::QP_TYPE, T::NAME, sys::IBV_ODP_SUPPORT_RECV)?;
        if let Some(pd) = c.pd {
            self.check_pd("ibv_post_recv", "the receive buffer", pd)?;
        }
        crate::sgl::check_count("receive", self.qp_num(), c.num_sge, self.caps.max_recv_sge)?;
        Ok(c)
    }

    /// The id of the device context the QP belongs to ([`ContextInner::id`](crate::device::ContextInner)).
    #[inline(always)]
    pub(crate) fn context_id(&self) -> u64 {
        self.pd.ctx.id
    }

    /// A new handle of the QP (alive: `self` is borrowed from one).
    pub(crate) fn arc(&self) -> Option<Arc<QpShared>> {
        self.me.upgrade()
    }

    /// Registers the QP on its receive CQ with `register`, given what its SRQ, if it has one,
    /// needs there ([`SrqShared::attach_cq`]), after counting its transport `qp_type` (`name`)
    /// on the SRQ ([`SrqShared::attach_transport`]): the count lasts until the QP is destroyed,
    /// whether this fails after it or not.
    fn attach_srq(&self, qp_type: u32, name: &str, register: impl FnOnce(u64) -> Result<()>) -> Result<()> {
        let Some(srq) = &self.srq else { return register(0) };
        srq.attach_transport(qp_type, name)?;
        // Set once, by the QP's creation: the transport is taken off when the QP is destroyed.
        let _ = self.srq_transport.set(qp_type);
        srq.attach_cq(&self.recv_cq, register)
    }

    /// Refuses an atomic request, a window bind granting remote atomics or remote atomic
    /// access on a device without atomic operations ([`ContextInner::check_atomics`](crate::device::ContextInner::check_atomics)).
    #[inline(always)]
    pub(crate) fn check_atomics(&self, verb: crate::Verb, wants: bool) -> Result<()> {
        self.pd.ctx.check_atomics(verb, wants)
    }

    /// Refuses an object of another protection domain (and so of another device context)
    /// before the provider sees it: the kernel resolves keys and handles in the QP's own
    /// context, where the foreign object's number may name something else (DESIGN.md §5).
    #[inline(always)]
    pub(crate) fn check_pd(&self, verb: &'static str, what: &str, pd: crate::pd::PdId) -> Result<()> {
        if pd != self.pd_id() {
            return Err(self.foreign_pd(verb, what));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn foreign_pd(&self, verb: &'static str, what: &str) -> Error {
        Error::invalid(verb, format!("{what} belongs to another protection domain than QP {:#x}", self.qp_num))
    }

    pub(crate) fn modify(
        &self,
        state: sys::ibv_qp_state,
        attr: &dyn TransitionAttr,
        from: &str,
        to: &str,
    ) -> Result<()> {
        let mut a = sys::ibv_qp_attr { qp_state: state, ..Default::default() };
        let mask = attr.fill(&mut a)? | sys::IBV_QP_STATE;
        // A QP granting remote atomics (a program's access set or the CM's) on a device without
        // them: refused here, the one place every transition goes through.
        let atomic_access =
            mask & sys::IBV_QP_ACCESS_FLAGS != 0 && a.qp_access_flags & sys::IBV_ACCESS_REMOTE_ATOMIC != 0;
        self.check_atomics(Verb::ModifyQp, atomic_access)?;
        self.check_device_limits(&a, mask)?;
        // SAFETY: the QP is alive; `a` is initialised and `mask` names only fields we set;
        // `verbs.modify_qp` is `ibv_modify_qp` (a test's fake of its type on the fake device).
        let ret = unsafe { (self.pd.ctx.verbs.modify_qp)(self.qp.as_ptr(), &mut a, mask as i32) };
        if ret != 0 {
            return Err(Error::from_ret(
                Verb::ModifyQp,
                format!("QP {:#x} {from} -> {to}, mask {mask:#x}", self.qp_num),
                ret,
            ));
        }
        if mask & sys::IBV_QP_AV != 0 {
            self.peer_on_device.store(self.pd.ctx.may_be_own_address(&a.ah_attr), Ordering::Release);
        }
        Ok(())
    }

    /// The attributes of a transition that the device bounds, checked before the provider
    /// sees them (a typed `InvalidArgument`, not whatever the provider and kernel make of
    /// them): the port (`IBV_QP_PORT`, and
    /// an address vector's), the P_Key index, the address vector's source GID index and the
    /// widths of its service level, source path bits and flow label and its static rate (a
    /// value of `enum ibv_rate`), and the RDMA READ/atomic depths against
    /// `max_qp_init_rd_atom` and `max_qp_rd_atom`.
    fn check_device_limits(&self, a: &sys::ibv_qp_attr, mask: u32) -> Result<()> {
        let bounded = sys::IBV_QP_PORT
            | sys::IBV_QP_PKEY_INDEX
            | sys::IBV_QP_AV
            | sys::IBV_QP_MAX_QP_RD_ATOMIC
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC;
        if mask & bounded == 0 {
            return Ok(());
        }
        let dev = self.pd.ctx.attr();
        let invalid = |what: String| Error::invalid("ibv_modify_qp", format!("QP {:#x}: {what}", self.qp_num));
        if mask & sys::IBV_QP_PORT != 0 {
            let p = device_port(&self.pd.ctx, a.port_num, &invalid)?;
            if mask & sys::IBV_QP_PKEY_INDEX != 0 && u32::from(a.pkey_index) >= u32::from(p.pkey_tbl_len()) {
                return Err(invalid(format!(
                    "P_Key index {} is outside port {}'s table of {}",
                    a.pkey_index,
                    a.port_num,
                    p.pkey_tbl_len()
                )));
            }
        }
        if mask & sys::IBV_QP_AV != 0 {
            check_address_vector(&self.pd.ctx, &a.ah_attr, &invalid)?;
        }
        if mask & sys::IBV_QP_MAX_QP_RD_ATOMIC != 0 && u32::from(a.max_rd_atomic) > dev.max_qp_init_rd_atom() {
            return Err(invalid(format!(
                "max_rd_atomic {} is above the device's max_qp_init_rd_atom {}",
                a.max_rd_atomic,
                dev.max_qp_init_rd_atom()
            )));
        }
        if mask & sys::IBV_QP_MAX_DEST_RD_ATOMIC != 0 && u32::from(a.max_dest_rd_atomic) > dev.max_qp_rd_atom() {
            return Err(invalid(format!(
                "max_dest_rd_atomic {} is above the device's max_qp_rd_atom {}",
                a.max_dest_rd_atomic,
                dev.max_qp_rd_atom()
            )));
        }
        Ok(())
    }

    /// Whether the QP's peer is (or may be) on the QP's own device.
    #[inline(always)]
    pub(crate) fn peer_on_device(&self) -> bool {
        self.peer_on_device.load(Ordering::Acquire)
    }

    /// The tag of the QP's device ([`ContextInner::tag`](crate::device::ContextInner)).
    #[inline(always)]
    pub(crate) fn device_tag(&self) -> u16 {
        self.pd.ctx.tag
    }

    /// Moves the QP to ERR (flushes: `Scope::flush`, a scope's drain) or RESET (quiesce).
    ///
    /// Either leaves the QP refusing posts (`broken`) until the program resets it itself (a
    /// failed move to ERR leaves the mark as it was: the QP is still in its state). It holds
    /// both queues' locks across the transition, and the posting paths check `broken` under
    /// them: no post is in flight during the transition, and every post after it is refused
    /// before the provider sees it. (Lanes post without these locks, but a lane lives
    /// inside its scope's closure, and a forced reset happens in the scope's drain, after it.)
    pub(crate) fn force_state(&self, state: sys::ibv_qp_state) -> Result<()> {
        if state != sys::IBV_QPS_RESET {
            let (_sq, _rq) = (self.sq.lock(), self.rq.lock());
            let was = self.broken.swap(true, Ordering::AcqRel);
            let moved = self.modify(state, &StateOnly, "(draining)", "ERR");
            if moved.is_err() {
                self.broken.store(was, Ordering::Release);
            }
            return moved;
        }
        // As in `after_reset`: woken once the flush is done.
        let _wakes = crate::queue::DeferWakes::new();
        let (mut sq, mut rq) = (self.sq.lock(), self.rq.lock());
        self.broken.store(true, Ordering::Release);
        self.modify(state, &StateOnly, "(draining)", "RESET")?;
        self.sq.flush_book(&mut sq, self.qp_num);
        self.rq.flush_book(&mut rq, self.qp_num);
        drop((sq, rq));
        self.flush_lanes_and_graves();
        Ok(())
    }

    /// After a reset the device no longer touches any buffer of the QP's own queues (the
    /// receives of a shared receive queue stay posted there): every outstanding request is
    /// complete, and the buffers of dropped tokens are released.
    fn flush_books(&self) {
        self.sq.flush_book(&mut self.sq.lock(), self.qp_num);
        self.rq.flush_book(&mut self.rq.lock(), self.qp_num);
        self.flush_lanes_and_graves();
    }

    /// The lanes' part of a reset's flush, and the graves. A lane's book is written by pollers
    /// under the CQ's routing lock, one completion at a time (`LaneBook::complete` loads, then
    /// stores `done`): the flush takes the same lock, or a completion being recorded could
    /// store its `done` after the flush's and move it back below `posted` (the interleaving
    /// the loom model, `queue::loom_model`, explores).
    fn flush_lanes_and_graves(&self) {
        self.send_cq.with_routing_lock(|| self.sq.lane_flushed());
        self.recv_cq.with_routing_lock(|| self.rq.lane_flushed());
        self.sq.release_graves();
        self.rq.release_graves();
        // The completions the device produced before the reset, now stale, off the CQs: the
        // queues take their whole depth again, and the CQs were sized for that.
        self.send_cq.drain_after_reset();
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.drain_after_reset();
        }
    }

    /// The QP refuses posts until the program resets it (its CQ reported an error).
    pub(crate) fn mark_broken(&self) {
        self.broken.store(true, Ordering::Release);
    }

    /// The program reset the QP (it owned the `Qp`, so nothing posts meanwhile).
    fn after_reset(&self) {
        // The futures the flush wakes are woken at the end (`DeferWakes`): a waker that panics
        // cannot cut the reset's clean-up short, and its panic comes out afterwards.
        let _wakes = crate::queue::DeferWakes::new();
        self.flush_books();
        self.broken.store(false, Ordering::Release);
    }

    /// Routes a polled completion to its work queue.
    pub(crate) fn route(&self, seq: u64, is_recv: bool, c: Completion) {
        match (is_recv, &self.srq) {
            (false, _) => self.sq.complete(seq, c),
            (true, None) => self.rq.complete(seq, c),
            (true, Some(srq)) => srq.rq.complete(seq, c),
        }
    }

    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.broken.load(Ordering::Acquire) {
            return Err(Error::QpBroken { qp_num: self.qp_num });
        }
        Ok(())
    }

    /// `ibv_post_send` of one work request, recorded as the next sequence number of the send
    /// queue.
    ///
    /// # Safety
    /// Every scatter/gather entry of `wr` must name registered memory that stays valid, and is
    /// not written by the program while the device reads it (nor accessed at all while the
    /// device writes it), until the returned sequence number has completed or the QP has been
    /// reset. The objects `wr` points at (the UD address handle; a type 2 bind's window and
    /// region) must stay alive until then too, and `sg_list` for the duration of the call.
    /// (`wr.next` and `wr.wr_id` are overwritten here: exactly one request is posted.)
    #[inline(always)]
    pub(crate) unsafe fn post_send(&self, wr: &mut sys::ibv_send_wr, owner: u64) -> std::result::Result<u64, Refused> {
        let mut sq = self.sq.lock();
        // The send queue's book has one kind (`TrackedQueue::new`): matched once, and the
        // reference held across the provider call (which the compiler cannot see through).
        let Some(book) = sq.as_send() else {
            return Err(self.unusable(sq.depth()));
        };
        // Checked under the queue's lock: a forced reset sets `broken` before it resets the QP
        // and flushes the book under this lock afterwards (`force_state`).
        if self.broken.load(Ordering::Acquire) {
            return Err(self.unusable(book.depth()));
        }
        // The lane's requests are 0 here whenever the types hold (a lane holds its QP `&mut`
        // for the scope, whose drain empties it): counted all the same, a second guard of the
        // depth the owners' ring and the CQ's reservation rely on.
        let Some(seq) = book.next_beside(self.sq.lane.outstanding()) else {
            return Err(self.unusable(book.depth()));
        };
        if wr.send_flags & sys::IBV_SEND_SIGNALED == 0 && book.must_signal(0) {
            wr.send_flags |= sys::IBV_SEND_SIGNALED;
        }
        wr.wr_id = seq;
        wr.next = std::ptr::null_mut();
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is alive and `post_send_fn` its provider's `ibv_post_send`; `wr` is a
        // single valid request whose memory the caller guarantees; `bad` is a valid out-pointer.
        let ret = unsafe { (self.post_send_fn)(self.qp.as_ptr(), wr, &mut bad) };
        if ret != 0 {
            // Only `bad_wr` naming the request proves it was not queued; NULL or any other
            // pointer (a provider's mistake) proves nothing.
            let named = std::ptr::eq(bad, wr);
            return Err(self.send_refused(book, wr, ret, named, owner));
        }
        Ok(book.push_owned(wr.send_flags & sys::IBV_SEND_SIGNALED != 0, owner))
    }

    /// Why the send queue takes no request now: the QP is broken, or the queue is full.
    #[cold]
    #[inline(never)]
    fn unusable(&self, depth: u32) -> Refused {
        if let Err(e) = self.check_usable() {
            return e.into();
        }
        Error::QueueFull { queue: "send", qp_num: self.qp_num, depth }.into()
    }

    /// The provider refused `wr` (`ret`); `named`: `bad_wr` names `wr`, which proves it was
    /// not queued. Otherwise (NULL, or a pointer that is not the request) nothing is proved, so
    /// the request is recorded as posted and uncovered under `owner`.
    #[cold]
    #[inline(never)]
    fn send_refused(
        &self,
        sq: &mut crate::queue::SendBook,
        wr: &sys::ibv_send_wr,
        ret: i32,
        named: bool,
        owner: u64,
    ) -> Refused {
        let error = Error::from_ret(Verb::PostSend, format!("QP {:#x}, opcode {}", self.qp_num, wr.opcode), ret);
        let kept = (!named).then(|| sq.push_owned(false, owner));
        Refused { error, kept }
    }

    /// `ibv_post_send` of `wrs` chained into one list, recorded as consecutive sequence
    /// numbers of the send queue. Requests asking to be unsignaled are signaled where needed so
    /// the queue never fills with unsignaled requests. Returns the sequence numbers of the
    /// requests the provider accepted (a prefix of the list) and the error that stopped it.
    ///
    /// # Safety
    /// As for [`QpShared::post_send`], for every request of the list.
    pub(crate) unsafe fn post_send_list(&self, wrs: &mut [sys::ibv_send_wr], owner: u64) -> (Vec<u64>, Option<Error>) {
        // The provider walks the list from its head: an empty list has no head to give it.
        if wrs.is_empty() {
            return (Vec::new(), Some(Error::invalid("ibv_post_send", "an empty post list")));
        }
        let mut sq = self.sq.lock();
        if let Err(e) = self.check_usable() {
            return (Vec::new(), Some(e));
        }
        let Some(base) = sq.next_seq_beside(wrs.len(), self.sq.lane.outstanding()) else {
            let e = Error::QueueFull { queue: "send", qp_num: self.qp_num, depth: sq.depth() };
            return (Vec::new(), Some(e));
        };
        let n = wrs.len();
        let mut ahead = 0;
        for (i, wr) in wrs.iter_mut().enumerate() {
            if wr.send_flags & sys::IBV_SEND_SIGNALED == 0 {
                if sq.must_signal(ahead) {
                    wr.send_flags |= sys::IBV_SEND_SIGNALED;
                    ahead = 0;
                } else {
                    ahead += 1;
                }
            } else {
                ahead = 0;
            }
            wr.wr_id = base + i as u64;
        }
        let first: *mut sys::ibv_send_wr = wrs.as_mut_ptr();
        for i in 0..n {
            // SAFETY: `i` and `i + 1` are in bounds (or the last `next` is null).
            unsafe { (*first.add(i)).next = if i + 1 < n { first.add(i + 1) } else { std::ptr::null_mut() } };
        }
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is alive and `post_send_fn` its provider's `ibv_post_send`; the list is
        // valid and terminated; the memory it names is valid per the caller; `bad` is a valid
        // out-pointer.
        let ret = unsafe { (self.post_send_fn)(self.qp.as_ptr(), first, &mut bad) };
        // ibv_post_send(3) returns the failing request in `bad_wr`; rxe (rdma-core 44) leaves it
        // NULL when its doorbell fails after the requests were queued. Then nothing says what
        // was queued: every request is treated as posted, and none as covered (no completion
        // is expected; a later signaled one, a flush or a reset settles them), so its memory
        // stays reserved until then, which is always safe.
        // A `bad_wr` that is not one of the list's requests names none: treated as NULL. (Its
        // position is computed from the addresses, without assuming it points into `wrs`.)
        let named = (bad as usize).checked_sub(first as usize).and_then(|off| {
            let size = std::mem::size_of::<sys::ibv_send_wr>();
            (off % size == 0 && off / size < n).then_some(off / size)
        });
        let (accepted, covered) = match (ret, named) {
            (0, _) => (n, true),
            (_, Some(i)) => (i, true),
            (_, None) => (n, false),
        };
        let seqs = wrs[..accepted]
            .iter()
            .map(|wr| sq.push_owned(covered && wr.send_flags & sys::IBV_SEND_SIGNALED != 0, owner))
            .collect();
        let err = (ret != 0).then(|| {
            let opcode = wrs.get(accepted).map_or(u32::MAX, |w| w.opcode);
            Error::from_ret(
                Verb::PostSend,
                format!("QP {:#x}, request {accepted} of {n} (opcode {opcode})", self.qp_num),
                ret,
            )
        });
        (seqs, err)
    }

    /// `ibv_bind_mw` of a type 1 window, recorded as the next sequence number of the send
    /// queue (the provider posts it as a BIND_MW work request).
    ///
    /// # Safety
    /// `mw` must be a valid window and `bind.bind_info.mr` null or a valid region, both alive
    /// until the request completes or the QP is reset.
    pub(crate) unsafe fn bind_mw(
        &self,
        mw: *mut sys::ibv_mw,
        bind: &mut sys::ibv_mw_bind,
        owner: u64,
    ) -> std::result::Result<u64, Refused> {
        let mut sq = self.sq.lock();
        self.check_usable()?;
        let Some(seq) = sq.next_seq_beside(1, self.sq.lane.outstanding()) else {
            return Err(Error::QueueFull { queue: "send", qp_num: self.qp_num, depth: sq.depth() }.into());
        };
        bind.wr_id = seq;
        bind.send_flags |= sys::IBV_SEND_SIGNALED;
        // SAFETY: QP alive; `mw`/`bind` valid per the caller.
        let ret = unsafe { sys::ibv_bind_mw(self.qp.as_ptr(), mw, bind) };
        if ret != 0 {
            let error = Error::from_ret(Verb::BindMw, format!("QP {:#x}", self.qp_num), ret);
            // `ibv_bind_mw` has no `bad_wr`: a refusal does not prove the bind was not queued.
            return Err(Refused { error, kept: Some(sq.push_owned(false, owner)) });
        }
        Ok(sq.push_owned(true, owner))
    }

    /// `ibv_post_recv` of one work request, recorded as the next sequence number of the
    /// receive queue.
    ///
    /// # Safety
    /// As for [`QpShared::post_send`]: the memory of every scatter/gather entry must stay valid
    /// and untouched by the program until the request completes or the QP is reset.
    #[inline(always)]
    pub(crate) unsafe fn post_recv(&self, wr: &mut sys::ibv_recv_wr, owner: u64) -> std::result::Result<u64, Refused> {
        if self.srq.is_some() {
            return Err(self.recv_unusable());
        }
        let mut rq = self.rq.lock();
        if self.broken.load(Ordering::Acquire) || self.rq.lane.is_open() {
            return Err(self.recv_unusable());
        }
        let Some(seq) = rq.next_seq_beside(1, self.rq.lane.outstanding()) else {
            return Err(self.recv_unusable());
        };
        wr.wr_id = seq | RECV_BIT;
        wr.next = std::ptr::null_mut();
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as in `post_send` (`post_recv_fn` is the provider's `ibv_post_recv`).
        let ret = unsafe { (self.post_recv_fn)(self.qp.as_ptr(), wr, &mut bad) };
        if ret != 0 {
            // As for a send: only `bad_wr` naming the receive proves it was not queued.
            let named = std::ptr::eq(bad, wr);
            return Err(self.recv_refused(&mut rq, ret, named, owner));
        }
        Ok(rq.push_owned(true, owner))
    }

    /// Why the receive queue takes no request now: the QP's receives come from a shared
    /// receive queue, the QP is broken, a receive lane is open, or the queue is full.
    #[cold]
    #[inline(never)]
    fn recv_unusable(&self) -> Refused {
        if self.srq.is_some() {
            return Error::invalid(
                "ibv_post_recv",
                format!("QP {:#x} takes its receives from a shared receive queue; post to the SRQ", self.qp_num),
            )
            .into();
        }
        if let Err(e) = self.check_usable() {
            return e.into();
        }
        if self.rq.lane.is_open() {
            return Error::invalid(
                "ibv_post_recv",
                format!("a receive lane is open on QP {:#x}: post its receives through the lane", self.qp_num),
            )
            .into();
        }
        Error::QueueFull { queue: "receive", qp_num: self.qp_num, depth: self.rq.depth() }.into()
    }

    /// The provider refused a receive (`ret`); unless `bad_wr` names it (`named`), the
    /// request is recorded as posted and uncovered under `owner` (as for a send).
    #[cold]
    #[inline(never)]
    fn recv_refused(&self, rq: &mut crate::queue::Book, ret: i32, named: bool, owner: u64) -> Refused {
        let error = Error::from_ret(Verb::PostRecv, format!("QP {:#x}", self.qp_num), ret);
        let kept = (!named).then(|| rq.push_owned(false, owner));
        Refused { error, kept }
    }

    pub(crate) fn outstanding(&self) -> (u32, u32) {
        (self.sq.outstanding(), self.rq.outstanding())
    }
}

/// Port `n` of `ctx`'s device, refused with `invalid` when the device has no such port.
fn device_port(
    ctx: &Arc<crate::device::ContextInner>,
    n: u8,
    invalid: &dyn Fn(String) -> Error,
) -> Result<crate::device::PortAttr> {
    if let Some(why) = ctx.missing_port(n) {
        return Err(invalid(why));
    }
    crate::device::Context { inner: Arc::clone(ctx) }.query_port(n)
}

/// An address vector's fields within their widths on the wire and its static rate a value of
/// `enum ibv_rate` ([`check_av_fields`]), its port, and with a global route its source GID
/// index, checked against `ctx`'s device before a provider indexes its tables by them
/// (`ibv_modify_qp`'s `IBV_QP_AV`, `ibv_create_ah`); refused with `invalid`.
pub(crate) fn check_address_vector(
    ctx: &Arc<crate::device::ContextInner>,
    av: &sys::ibv_ah_attr,
    invalid: &dyn Fn(String) -> Error,
) -> Result<()> {
    check_av_fields(av, invalid)?;
    let p = device_port(ctx, av.port_num, invalid)?;
    check_sgid_index(av, p.gid_tbl_len(), invalid)
}

/// The fields of an address vector that the packet headers carry in fewer bits than their C
/// types: the service level (4 bits, IBTA 7.6.5 and the LRH), the source path bits (7: the
/// LMC's bits of the source LID) and, with a global route, the flow label (20, the GRH).
/// Providers shift them into their hardware's words unmasked (mlx4 and mthca: `sl << 28`, a
/// flow label ORed beside the traffic class), so a wider value would change other fields. The
/// static rate must be one of `enum ibv_rate`'s values: `IBV_RATE_MAX` (0, the port's rate) or
/// `IBV_RATE_2_5_GBPS` (2) to `IBV_RATE_1200_GBPS` (24), the enum leaving none out between
/// them; mlx4 adds its rate offset to it without a check.
fn check_av_fields(av: &sys::ibv_ah_attr, invalid: &dyn Fn(String) -> Error) -> Result<()> {
    if av.sl > 15 {
        return Err(invalid(format!("service level {} is above 15 (4 bits)", av.sl)));
    }
    if av.src_path_bits > 127 {
        return Err(invalid(format!("source path bits {:#x} are above 0x7f (7 bits)", av.src_path_bits)));
    }
    if av.is_global != 0 && av.grh.flow_label >= 1 << 20 {
        return Err(invalid(format!("flow label {:#x} is above 0xfffff (20 bits)", av.grh.flow_label)));
    }
    let rate = u32::from(av.static_rate);
    if rate != sys::IBV_RATE_MAX && !(sys::IBV_RATE_2_5_GBPS..=sys::IBV_RATE_1200_GBPS).contains(&rate) {
        return Err(invalid(format!(
            "static rate {rate} is not an IBV_RATE_* value (0 for the port's rate, or {} to {})",
            sys::IBV_RATE_2_5_GBPS,
            sys::IBV_RATE_1200_GBPS
        )));
    }
    Ok(())
}

/// A global route's source GID index inside its port's table of `gid_tbl_len` entries (no
/// index to check without a global route).
fn check_sgid_index(av: &sys::ibv_ah_attr, gid_tbl_len: u32, invalid: &dyn Fn(String) -> Error) -> Result<()> {
    let sgid = u32::from(av.grh.sgid_index);
    if av.is_global != 0 && sgid >= gid_tbl_len {
        return Err(invalid(format!(
            "source GID index {sgid} is outside port {}'s table of {gid_tbl_len}",
            av.port_num
        )));
    }
    Ok(())
}

/// A post the provider (or the library's own checks) refused.
#[derive(Debug)]
pub(crate) struct Refused {
    /// Why.
    pub(crate) error: Error,
    /// Set when the provider refused the request without saying that it did not queue it
    /// (`bad_wr` left NULL or naming another request, or `ibv_bind_mw`, which has no
    /// `bad_wr`): rdma-core 44's rxe provider advances its send queue before its doorbell
    /// `write()` fails, so the request may sit in the ring. It is recorded under this sequence
    /// number as outstanding and uncovered (no completion is expected), and its memory must be
    /// released only through [`TrackedQueue::release`] (a completion that covers it, a reset,
    /// a destroy).
    pub(crate) kept: Option<u64>,
}

impl From<Error> for Refused {
    fn from(error: Error) -> Self {
        Refused { error, kept: None }
    }
}

/// The work queue a posted request belongs to: where its completion is recorded and which CQs
/// to poll for it.
#[derive(Clone, Copy)]
pub(crate) enum QueueRef<'a> {
    /// The send queue of a QP.
    Send(&'a QpShared),
    /// The receive queue of a QP.
    Recv(&'a QpShared),
    /// A shared receive queue.
    Srq(&'a SrqShared),
}

impl<'a> QueueRef<'a> {
    pub(crate) fn tracked(self) -> &'a TrackedQueue {
        match self {
            QueueRef::Send(q) => &q.sq,
            QueueRef::Recv(q) => &q.rq,
            QueueRef::Srq(s) => &s.rq,
        }
    }

    /// Polls the CQ(s) this queue completes on; returns how many completions were polled.
    pub(crate) fn poll(self) -> Result<usize> {
        match self {
            QueueRef::Send(q) => q.send_cq.poll_and_route_for(q),
            QueueRef::Recv(q) => q.recv_cq.poll_and_route_for(q),
            QueueRef::Srq(s) => s.poll(),
        }
    }

    /// [`QueueRef::poll`] by the wait of request `seq`: on a QP's own send or receive queue its
    /// completion, if polled now, comes back in `mine` ([`CqShared::poll_for_send`],
    /// [`CqShared::poll_for_recv`]); otherwise the wait takes it from the book.
    pub(crate) fn poll_for(self, seq: u64, mine: &mut Option<Completion>) -> Result<usize> {
        match self {
            QueueRef::Send(q) => q.send_cq.poll_for_send(q, seq, mine),
            QueueRef::Recv(q) => q.recv_cq.poll_for_recv(q, seq, mine),
            QueueRef::Srq(_) => self.poll(),
        }
    }

    /// Whether the book of this queue may hold the result of request `seq` already
    /// ([`TrackedQueue::may_hold`](crate::queue::TrackedQueue::may_hold)).
    #[inline(always)]
    pub(crate) fn may_hold(self, seq: u64) -> bool {
        self.tracked().may_hold(seq, matches!(self, QueueRef::Send(_)))
    }

    pub(crate) fn describe(self, seq: u64) -> String {
        match self {
            QueueRef::Send(q) => format!("send request {seq} on QP {:#x}", q.qp_num),
            QueueRef::Recv(q) => format!("receive request {seq} on QP {:#x}", q.qp_num),
            QueueRef::Srq(_) => format!("shared receive request {seq}"),
        }
    }

    /// The QP, for the queues a QP reset can reclaim.
    pub(crate) fn qp(self) -> Option<&'a QpShared> {
        match self {
            QueueRef::Send(q) | QueueRef::Recv(q) => Some(q),
            QueueRef::Srq(_) => None,
        }
    }
}

/// [`QueueRef`] with ownership of the QP or SRQ, for owned tokens.
pub(crate) enum QueueArc {
    /// The send queue of a QP.
    Send(Arc<QpShared>),
    /// The receive queue of a QP.
    Recv(Arc<QpShared>),
    /// A shared receive queue.
    Srq(Arc<SrqShared>),
}

impl QueueArc {
    pub(crate) fn as_ref(&self) -> QueueRef<'_> {
        match self {
            QueueArc::Send(q) => QueueRef::Send(q),
            QueueArc::Recv(q) => QueueRef::Recv(q),
            QueueArc::Srq(s) => QueueRef::Srq(s),
        }
    }
}

/// A `QpShared` over a fake `ibv_qp`, registered on its CQ (`async_races`, test only). Never
/// dropped by the caller (its drop would call `ibv_destroy_qp`).
#[cfg(all(test, not(loom)))]
impl QpShared {
    /// What the library does after the program reset the QP (`Qp::reset`), without the verb.
    pub(crate) fn fake_after_reset(&self) {
        self.after_reset();
    }

    /// A fake QP (test only) over the fake device of `async_races`, whose posts fail: the
    /// tests book its requests without posting.
    pub(crate) fn fake(
        qp: NonNull<sys::ibv_qp>,
        qp_num: u32,
        depth: u32,
        cq: &Arc<CqShared>,
        pd: Arc<PdInner>,
        srq: Option<Arc<SrqShared>>,
    ) -> Arc<QpShared> {
        /// The fake QP's posts: the tests book their requests without posting.
        unsafe extern "C" fn no_send(
            _: *mut sys::ibv_qp,
            _: *mut sys::ibv_send_wr,
            _: *mut *mut sys::ibv_send_wr,
        ) -> i32 {
            -1
        }
        /// As `no_send`.
        unsafe extern "C" fn no_recv(
            _: *mut sys::ibv_qp,
            _: *mut sys::ibv_recv_wr,
            _: *mut *mut sys::ibv_recv_wr,
        ) -> i32 {
            -1
        }
        QpShared::try_fake_with_posts(qp, qp_num, depth, cq, pd, srq, no_send, no_recv).expect("fake attach")
    }

    /// A fake QP (test only) whose provider posts are `send` and `recv` (the tests' own
    /// functions), with room for 4 scatter/gather entries and 64 bytes inline: an RC QP
    /// attached to `srq` and registered on `cq` as `create_qp` does it. A registration that
    /// fails (no room on `cq`) is the error, the fake dropped (destroyed) as `create_qp` drops a
    /// QP it could not register.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn try_fake_with_posts(
        qp: NonNull<sys::ibv_qp>,
        qp_num: u32,
        depth: u32,
        cq: &Arc<CqShared>,
        pd: Arc<PdInner>,
        srq: Option<Arc<SrqShared>>,
        send: PostSendFn,
        recv: PostRecvFn,
    ) -> Result<Arc<QpShared>> {
        let caps =
            QpCaps { max_send_wr: depth, max_recv_wr: depth, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 };
        let shared = Arc::new_cyclic(|me| QpShared {
            me: me.clone(),
            qp,
            post_send_fn: send,
            post_recv_fn: recv,
            qp_num,
            caps,
            send_cq: Arc::clone(cq),
            recv_cq: Arc::clone(cq),
            pd,
            sq: TrackedQueue::new(depth, Some(qp_num)),
            rq: TrackedQueue::new(depth, None),
            srq,
            srq_transport: std::sync::OnceLock::new(),
            broken: AtomicBool::new(false),
            peer_on_device: AtomicBool::new(false),
            reserved: [AtomicU64::new(NOT_REGISTERED), AtomicU64::new(NOT_REGISTERED)],
            mcast: std::sync::Mutex::new(Vec::new()),
        });
        let register = |srq_need: u64| {
            let srq = shared.srq.as_ref().map(Arc::downgrade);
            shared.recv_cq.register(qp_num, Arc::downgrade(&shared), srq, 2 * u64::from(depth) + srq_need)
        };
        shared.attach_srq(sys::IBV_QPT_RC, "RC", register)?;
        // As `create_qp` records it: the room its destroy frees (once its completions are off).
        shared.reserved[1].store(2 * u64::from(depth), Ordering::Relaxed);
        Ok(shared)
    }
}

#[cfg(all(test, not(loom)))]
impl QpShared {
    /// Test only: what a transition setting the address vector records
    /// ([`QpShared::peer_on_device`]).
    pub(crate) fn set_peer_on_device_for_test(&self, on: bool) {
        self.peer_on_device.store(on, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
impl<T: Transport, S: QpState> Qp<T, S> {
    /// A typed handle over a fake QP (test only; never dropped: it would destroy the fake).
    pub(crate) fn from_fake(shared: Arc<QpShared>) -> Self {
        Qp { shared, _type: PhantomData }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A global route's source GID index must be inside its port's GID table (rxe's has 1024
    /// entries, beyond any `u8` index: the device tests cannot reach the refusal); without a
    /// global route there is no index to check.
    #[test]
    fn a_source_gid_index_outside_the_ports_table_is_refused() {
        let invalid = |what: String| Error::invalid("ibv_create_ah", what);
        let av = |index| {
            let a = crate::ah::AddressVector::global(1, crate::device::Gid([0; 16]), index);
            a.to_raw()
        };
        assert!(check_sgid_index(&av(15), 16, &invalid).is_ok());
        let e = check_sgid_index(&av(16), 16, &invalid).expect_err("index 16 of a table of 16");
        assert!(
            matches!(&e, Error::InvalidArgument { verb: "ibv_create_ah", reason } if reason.contains("source GID index 16")),
            "{e:?}"
        );
        assert!(check_sgid_index(&av(255), 1024, &invalid).is_ok());
        let mut local = av(200);
        local.is_global = 0;
        assert!(check_sgid_index(&local, 16, &invalid).is_ok(), "no global route");
    }

    /// The service level, the source path bits and a global route's flow label must fit the
    /// bits the headers give them (4, 7 and 20); the largest that fit pass, and a flow label is
    /// not looked at without a global route. The static rate must be a value of `enum
    /// ibv_rate`: every `IBV_RATE_*` passes, 1 (no rate) and the values past the last are
    /// refused.
    #[test]
    fn address_vector_fields_wider_than_their_header_bits_are_refused() {
        let invalid = |what: String| Error::invalid("ibv_create_ah", what);
        let av_rate = |sl: u8, path_bits: u8, flow_label: u32, static_rate: u8| {
            let mut a = crate::ah::AddressVector::global(1, crate::device::Gid([0; 16]), 0);
            a.sl = sl;
            a.src_path_bits = path_bits;
            a.static_rate = static_rate;
            a.grh.as_mut().unwrap().flow_label = flow_label;
            a.to_raw()
        };
        let av = |sl: u8, path_bits: u8, flow_label: u32| av_rate(sl, path_bits, flow_label, 0);
        assert!(check_av_fields(&av(15, 127, (1 << 20) - 1), &invalid).is_ok());
        let rates = [
            sys::IBV_RATE_MAX,
            sys::IBV_RATE_2_5_GBPS,
            sys::IBV_RATE_5_GBPS,
            sys::IBV_RATE_10_GBPS,
            sys::IBV_RATE_20_GBPS,
            sys::IBV_RATE_30_GBPS,
            sys::IBV_RATE_40_GBPS,
            sys::IBV_RATE_60_GBPS,
            sys::IBV_RATE_80_GBPS,
            sys::IBV_RATE_120_GBPS,
            sys::IBV_RATE_14_GBPS,
            sys::IBV_RATE_56_GBPS,
            sys::IBV_RATE_112_GBPS,
            sys::IBV_RATE_168_GBPS,
            sys::IBV_RATE_25_GBPS,
            sys::IBV_RATE_100_GBPS,
            sys::IBV_RATE_200_GBPS,
            sys::IBV_RATE_300_GBPS,
            sys::IBV_RATE_28_GBPS,
            sys::IBV_RATE_50_GBPS,
            sys::IBV_RATE_400_GBPS,
            sys::IBV_RATE_600_GBPS,
            sys::IBV_RATE_800_GBPS,
            sys::IBV_RATE_1200_GBPS,
        ];
        for rate in rates {
            let rate = u8::try_from(rate).expect("every IBV_RATE_* fits static_rate's u8");
            assert!(check_av_fields(&av_rate(0, 0, 0, rate), &invalid).is_ok(), "IBV_RATE_* value {rate}");
        }
        for (bad, what) in [
            (av(16, 0, 0), "service level 16 is above 15"),
            (av(0xff, 0, 0), "service level 255 is above 15"),
            (av(0, 128, 0), "source path bits 0x80 are above 0x7f"),
            (av(0, 0, 1 << 20), "flow label 0x100000 is above 0xfffff"),
            (av(0, 0, u32::MAX), "flow label 0xffffffff is above 0xfffff"),
            (av_rate(0, 0, 0, 1), "static rate 1 is not an IBV_RATE_* value"),
            (av_rate(0, 0, 0, 25), "static rate 25 is not an IBV_RATE_* value"),
            (av_rate(0, 0, 0, u8::MAX), "static rate 255 is not an IBV_RATE_* value"),
        ] {
            let e = check_av_fields(&bad, &invalid).expect_err(what);
            assert!(
                matches!(&e, Error::InvalidArgument { verb: "ibv_create_ah", reason } if reason.contains(what)),
                "{e:?}"
            );
        }
        let mut local = av(0, 0, u32::MAX);
        local.is_global = 0;
        assert!(check_av_fields(&local, &invalid).is_ok(), "no global route: no flow label");
    }

    /// A UC QP's INIT keeps REMOTE_WRITE alone of the rights it is given (READ and atomics
    /// would also make a device without atomics refuse it); RC's keeps them all.
    #[test]
    fn a_uc_init_grants_remote_write_alone() {
        let all = ConnectedInit::new(1, crate::access::REMOTE_ALL);
        let rights = sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_READ | sys::IBV_ACCESS_REMOTE_ATOMIC;
        assert_eq!(all.qp_access_flags(), rights);
        let mut rc = sys::ibv_qp_attr::default();
        let rc_mask = all.fill(&mut rc).unwrap();
        assert_eq!(rc.qp_access_flags, rights);
        let mut uc = sys::ibv_qp_attr::default();
        assert_eq!(RemoteWriteOnly(&all).fill(&mut uc).unwrap(), rc_mask);
        assert_eq!((uc.qp_access_flags, uc.port_num), (sys::IBV_ACCESS_REMOTE_WRITE, 1));
        let read_only = ConnectedInit::new(1, crate::access::Access::NONE.remote_read());
        let mut uc = sys::ibv_qp_attr::default();
        RemoteWriteOnly(&read_only).fill(&mut uc).unwrap();
        assert_eq!(uc.qp_access_flags, 0);
    }
}
