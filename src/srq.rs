//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_post_srq_recv`,
//! `ibv_destroy_srq`.
//!
//! Several QPs take their receives from one SRQ ([`QpConfig::srq`](crate::qp::QpConfig::srq)).
//! A receive of an SRQ is consumed by whichever QP gets a message first, and completes on that
//! QP's receive CQ; the library routes it back to the SRQ's book-keeping.
//!
//! SRQ receives are posted with owned buffers only ([`Srq::post_recv_owned`]): resetting a QP
//! does not take receives out of an SRQ (only destroying the SRQ does), so a
//! [scope](crate::scope) could not reclaim borrowed receive buffers at its end. Owned buffers
//! stay with the SRQ until they complete or the SRQ is destroyed.
#![allow(unsafe_code)]

use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use typed_verbs_sys as sys;

use crate::cq::CqShared;
use crate::error::{Error, Result, Verb};
use crate::owned::OwnedToken;
use crate::pd::{Pd, PdInner};
use crate::qp::QueueArc;
use crate::queue::{TrackedQueue, RECV_BIT};
use crate::scope::PostError;
use crate::sgl::Scatter;
use crate::wr::Recv;

/// A shared receive queue: `struct ibv_srq`. Cheap to clone (shared); destroyed when the last
/// clone, every QP using it and every token of it are gone.
#[derive(Clone)]
pub struct Srq {
    pub(crate) shared: Arc<SrqShared>,
}

/// The CQs of a shared receive queue that [`SrqShared::poll`] holds on the stack while it
/// polls them (more are rare: one per CQ its QPs complete receives on).
const SRQ_CQS_INLINE: usize = 4;

pub(crate) struct SrqShared {
    srq: NonNull<sys::ibv_srq>,
    max_wr: u32,
    /// Scatter/gather entries per receive, as granted.
    max_sge: u32,
    pub(crate) rq: TrackedQueue,
    /// The receive CQs of the QPs attached to this SRQ: where its completions arrive.
    cqs: Mutex<Vec<Weak<CqShared>>>,
    /// Which transports use this SRQ, for receives into On-Demand Paging memory.
    transports: Mutex<SrqTransports>,
    pub(crate) pd: Arc<PdInner>,
}

/// The QPs attached to an SRQ, counted by transport, and the transports (one bit per
/// `IBV_QPT_*`) that the ODP receives posted to it were verified for: an ODP receive may only be
/// consumed by a QP of the transport its capability covered (`OdpCaps::check`,
/// `IBV_ODP_SUPPORT_SRQ_RECV`).
#[derive(Default)]
struct SrqTransports {
    /// How many QPs of each transport (indexed by `IBV_QPT_*`) are attached: counted by
    /// [`SrqShared::attach_transport`], until the QP is destroyed
    /// ([`SrqShared::detach_transport`]). Types from 32 on have no bit ([`qpt_bit`]) and are
    /// not counted.
    attached: [usize; 32],
    odp: u32,
}

impl SrqTransports {
    /// One bit per transport with a QP attached.
    fn attached(&self) -> u32 {
        (0..32).filter(|&t| self.attached[t] != 0).fold(0, |mask, t| mask | 1 << t)
    }

    /// The count of the QPs of `qp_type` attached, if the type has a bit.
    fn count(&mut self, qp_type: u32) -> Option<&mut usize> {
        self.attached.get_mut(usize::try_from(qp_type).ok()?)
    }
}

/// An ODP receive checked and about to be posted: the SRQ's transports, locked.
struct OdpRecv<'a> {
    transports: MutexGuard<'a, SrqTransports>,
    /// The receive's transport.
    bit: u32,
}

impl OdpRecv<'_> {
    /// The provider took the receive (or may have): a QP of another transport must not attach.
    fn record(mut self) {
        self.transports.odp |= self.bit;
    }
}

fn qpt_bit(qp_type: u32) -> u32 {
    1u32.checked_shl(qp_type).unwrap_or(0)
}

// SAFETY: SRQs may be used from any thread (libibverbs is thread-safe); our book-keeping is
// behind mutexes.
unsafe impl Send for SrqShared {}
// SAFETY: as above.
unsafe impl Sync for SrqShared {}

impl Drop for SrqShared {
    fn drop(&mut self) {
        // SAFETY: every QP attached to the SRQ holds an `Arc` to it and every owned token too,
        // so none is left. Destroying the SRQ takes its outstanding receives out of the device;
        // the buffers kept for dropped tokens (`rq`'s graves) are released after this, when the
        // fields drop. If the destroy fails, the device may still write them: they are
        // leaked, never freed. (`verbs` is libibverbs' for every context the library opens.)
        let ret = unsafe { (self.pd.ctx.verbs.destroy_srq)(self.srq.as_ptr()) };
        if ret != 0 {
            self.rq.leak_graves();
            return;
        }
        // The SRQ's reservations on its CQs are freed once its completions are off them.
        for cq in lock(&self.cqs).iter().filter_map(Weak::upgrade) {
            let gone = crate::cq::Retired { qp_num: None, srq: None, reserved: u64::from(self.max_wr) };
            cq.retired().push(gone);
        }
    }
}

impl fmt::Debug for Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srq").field("max_wr", &self.shared.max_wr).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pd {
    /// `ibv_create_srq`: a shared receive queue of `max_wr` receives of one scatter/gather
    /// entry each.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for `max_wr == 0` or above the device's `max_srq_wr`;
    /// - [`Error::Verb`] with `ibv_create_srq` and its errno.
    ///
    /// See ibv_create_srq(3).
    #[doc(alias = "ibv_create_srq")]
    pub fn create_srq(&self, max_wr: u32) -> Result<Srq> {
        self.create_srq_sge(max_wr, 1)
    }

    /// `ibv_create_srq`: a shared receive queue of `max_wr` receives of up to `max_sge`
    /// scatter/gather entries each.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for `max_wr == 0` or above the device's `max_srq_wr`, or
    ///   `max_sge == 0` or above its `max_srq_sge`;
    /// - [`Error::Verb`] with `ibv_create_srq` and its errno.
    ///
    /// See ibv_create_srq(3).
    #[doc(alias = "ibv_create_srq")]
    pub fn create_srq_sge(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let dev = self.inner.ctx.attr();
        let max = dev.max_srq_wr();
        if max_wr == 0 || max_wr > max {
            return Err(Error::invalid("ibv_create_srq", format!("max_wr = {max_wr}; the device allows 1..={max}")));
        }
        let max_sges = dev.max_srq_sge();
        if max_sge == 0 || max_sge > max_sges {
            return Err(Error::invalid(
                "ibv_create_srq",
                format!("max_sge = {max_sge}; the device allows 1..={max_sges}"),
            ));
        }
        let mut attr =
            sys::ibv_srq_init_attr { attr: sys::ibv_srq_attr { max_wr, max_sge, srq_limit: 0 }, ..Default::default() };
        // SAFETY: the PD is alive; `attr` is a valid, initialised attribute struct.
        let srq = unsafe { sys::ibv_create_srq(self.as_ptr(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| Error::last_os(Verb::CreateSrq, format!("max_wr {max_wr}")))?;
        Ok(Srq {
            shared: Arc::new(SrqShared {
                srq,
                max_wr,
                // ibv_create_srq(3) writes the granted values back into `attr`.
                max_sge: attr.attr.max_sge.max(max_sge),
                rq: TrackedQueue::new(max_wr, None),
                cqs: Mutex::new(Vec::new()),
                transports: Mutex::new(SrqTransports::default()),
                pd: Arc::clone(&self.inner),
            }),
        })
    }
}

impl Srq {
    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_srq {
        self.shared.srq.as_ptr()
    }

    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.shared.rq.outstanding()
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event. When fewer than `limit`
    /// receives remain posted, the device reports `IBV_EVENT_SRQ_LIMIT_REACHED` once on the
    /// context's async event queue (see [`crate::event`]), and the limit disarms.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a limit at or above the SRQ size; [`Error::Verb`] with
    /// `ibv_modify_srq` and its errno.
    ///
    /// See ibv_modify_srq(3).
    #[doc(alias = "ibv_modify_srq")]
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        if limit >= self.shared.max_wr {
            return Err(Error::invalid(
                "ibv_modify_srq",
                format!("limit {limit} is not below max_wr {}", self.shared.max_wr),
            ));
        }
        let mut attr = sys::ibv_srq_attr { max_wr: 0, max_sge: 0, srq_limit: limit };
        // SAFETY: the SRQ is alive; `attr` is valid and only `srq_limit` is selected.
        let ret = unsafe { sys::ibv_modify_srq(self.as_ptr(), &mut attr, sys::IBV_SRQ_LIMIT as i32) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::ModifySrq, format!("srq_limit {limit}"), ret));
        }
        Ok(())
    }

    /// `ibv_post_srq_recv` of a receive into owned memory (a [`Chunk`](crate::mr::Chunk) of a
    /// region with LOCAL_WRITE). The token hands the buffer back with the completion of
    /// whichever QP consumed it (`Completion::qp_num`).
    ///
    /// # Errors
    /// Returns the request with a [`PostError`]: [`Error::InvalidArgument`] for memory of
    /// another PD than the SRQ's, more entries than the SRQ takes (`max_sge`), or memory of
    /// an On-Demand Paging region not verified for SRQ receives on the transport of every QP
    /// attached to the SRQ and of every ODP receive posted to it before; [`Error::QueueFull`];
    /// [`Error::Verb`] with `ibv_post_srq_recv` (with no request back when the provider may
    /// have queued it: the buffer stays with the SRQ, and the receive keeps its place in the
    /// SRQ's depth, until its completion or the SRQ's destruction, since nothing else proves
    /// it was not queued).
    ///
    /// See ibv_post_srq_recv(3).
    #[doc(alias = "ibv_post_srq_recv")]
    pub fn post_recv_owned<L>(&self, wr: Recv<L>) -> std::result::Result<OwnedToken<L>, PostError<Recv<L>>>
    where
        L: Scatter + Send + 'static,
    {
        let mut sges = match self.shared.recv_sges(&wr.buf) {
            Ok(sges) => sges,
            Err(error) => return Err(PostError { error, wr: Some(wr) }),
        };
        // A receive into ODP memory holds the SRQ's transports from its check to its post (no
        // QP of a transport it was not verified for attaches in between), and records its
        // transport only if the provider may have queued it.
        let odp = match self.shared.check_odp_recv(sges.odp) {
            Ok(odp) => odp,
            Err(error) => return Err(PostError { error, wr: Some(wr) }),
        };
        let mut raw = sges.recv_wr();
        let seq = {
            let mut rq = self.shared.rq.lock();
            let Some(seq) = rq.next_seq() else {
                let error = Error::QueueFull { queue: "shared receive", qp_num: 0, depth: rq.depth() };
                return Err(PostError { error, wr: Some(wr) });
            };
            raw.wr_id = seq | RECV_BIT;
            let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: the SRQ is alive; the buffer is owned and moves into the token, which
            // never frees it while the receive is outstanding (on drop it is kept by the SRQ
            // until completion or destruction); `raw`/`sge` outlive the call.
            let ret = unsafe { sys::ibv_post_srq_recv(self.as_ptr(), &mut raw, &mut bad) };
            if ret != 0 {
                let error = Error::from_ret(Verb::PostSrqRecv, "shared receive queue", ret);
                if std::ptr::eq(bad, &raw const raw) {
                    return Err(PostError { error, wr: Some(wr) });
                }
                // The provider did not say the receive was not queued (`bad_wr` NULL, or a
                // pointer that is not the request, which proves nothing): it is recorded as
                // outstanding and uncovered, and its buffer kept by the queue's release rule
                // (until a completion or the SRQ's destruction).
                let seq = rq.push(false);
                drop(rq);
                if let Some(odp) = odp {
                    odp.record();
                }
                // No token will take its completion (given up first: the release may drop the
                // buffers at once, and a drop of the program's may panic).
                self.shared.rq.abandon(seq);
                self.shared.rq.release(seq, Box::new(wr.buf));
                return Err(PostError { error, wr: None });
            }
            if let Some(odp) = odp {
                odp.record();
            }
            rq.push(true)
        };
        Ok(OwnedToken::new(QueueArc::Srq(Arc::clone(&self.shared)), seq, wr.buf, None))
    }
}

impl SrqShared {
    /// The entries of a receive into `buf`, with the checks that need no device but the ODP
    /// rules of SRQ receives ([`SrqShared::check_odp_recv`], made by the post): every entry's
    /// region in the SRQ's PD and the entries' placement on the device's ODP write path, at most
    /// `max_sge` entries.
    fn recv_sges<L: Scatter>(&self, buf: &L) -> Result<crate::sgl::Collected<L::Sges>> {
        let c = buf.collect("ibv_post_srq_recv")?;
        if c.pd.is_some_and(|pd| pd != self.pd.id()) {
            return Err(Error::invalid(
                "ibv_post_srq_recv",
                "the receive buffer belongs to another protection domain than the shared receive queue",
            ));
        }
        crate::sgl::check_count("shared receive", 0, c.num_sge, self.max_sge)?;
        Ok(c)
    }

    /// Refuses a receive into On-Demand Paging memory whose capability did not verify SRQ
    /// receives (`IBV_ODP_SUPPORT_SRQ_RECV`) on the transport of every QP attached to this
    /// SRQ and of every ODP receive it has had. For an ODP receive it accepts, the SRQ's
    /// transports stay locked until the post records the receive's transport for later
    /// attachments ([`SrqShared::attach_transport`], [`OdpRecv::record`]) or drops it, refused.
    fn check_odp_recv(&self, tag: crate::mr::OdpTag) -> Result<Option<OdpRecv<'_>>> {
        let Some((qp_type, ops)) = tag.get() else { return Ok(None) };
        let t = lock(&self.transports);
        let attached = t.attached();
        // Another transport's QPs, or ODP receives verified for another transport, which
        // would leave the receives of one of them to no QP that may consume them.
        let other = (attached | t.odp) & !qpt_bit(qp_type);
        if ops & sys::IBV_ODP_SUPPORT_SRQ_RECV == 0 || other != 0 {
            return Err(Error::invalid(
                "ibv_post_srq_recv",
                format!(
                    "memory of an ODP region verified for QP type {qp_type}, operations {ops:#x} (ibv_query_device_ex \
                     odp_caps): an SRQ receive needs IBV_ODP_SUPPORT_SRQ_RECV verified for the transport of every \
                     QP attached to the SRQ and of every ODP receive it has had (attached QP types: mask {attached:#x}; \
                     earlier ODP receives' transports: mask {:#x})",
                    t.odp
                ),
            ));
        }
        Ok(Some(OdpRecv { transports: t, bit: qpt_bit(qp_type) }))
    }

    /// Counts a QP of `qp_type` attached to this SRQ, until its destroy takes it off
    /// ([`SrqShared::detach_transport`]); refuses it when the SRQ has received On-Demand Paging
    /// receives verified for another transport.
    pub(crate) fn attach_transport(&self, qp_type: u32, name: &str) -> Result<()> {
        let mut t = lock(&self.transports);
        if t.odp & !qpt_bit(qp_type) != 0 {
            return Err(Error::invalid(
                "ibv_create_qp",
                format!(
                    "the shared receive queue has had receives into On-Demand Paging memory verified for other \
                     transports (QP type mask {:#x}) than {name}",
                    t.odp
                ),
            ));
        }
        if let Some(n) = t.count(qp_type) {
            *n += 1;
        }
        Ok(())
    }

    /// Takes off a QP of `qp_type` counted by [`SrqShared::attach_transport`], once the QP is
    /// destroyed (`QpShared`'s drop): it consumes no more receives, and its transport no longer
    /// bars ODP receives verified for another one. A QP whose destroy failed stays counted.
    pub(crate) fn detach_transport(&self, qp_type: u32) {
        let mut t = lock(&self.transports);
        if let Some(n) = t.count(qp_type) {
            *n = n.saturating_sub(1);
        }
    }

    /// A QP taking its receives from this SRQ completes them on `cq`: `register` registers the
    /// QP there, given the extra capacity the SRQ needs on `cq` (its depth, the first time it
    /// is attached to `cq`; the reservation lasts until the SRQ is destroyed).
    pub(crate) fn attach_cq(&self, cq: &Arc<CqShared>, register: impl FnOnce(u64) -> Result<()>) -> Result<()> {
        let mut cqs = lock(&self.cqs);
        cqs.retain(|w| w.strong_count() > 0);
        let new = !cqs.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(cq)));
        register(if new { u64::from(self.max_wr) } else { 0 })?;
        if new {
            cqs.push(Arc::downgrade(cq));
            drop(cqs);
            // The futures waiting on the SRQ's receives wait on the CQs attached before: woken,
            // they wait on this one too (`OwnedCompletion::poll`).
            self.rq.wake_all();
        }
        Ok(())
    }

    /// The CQs the SRQ's receives complete on (those of the QPs attached to it).
    pub(crate) fn cqs(&self) -> Vec<Arc<CqShared>> {
        lock(&self.cqs).iter().filter_map(Weak::upgrade).collect()
    }

    /// [`SrqShared::cqs`] that are not among `have`: empty, and nothing allocated (collecting
    /// nothing allocates nothing), when `have` holds them all (a future waiting on the SRQ's
    /// receive looks at every poll). Compared by address before upgrading: only the missing
    /// ones are upgraded, and every `Arc` made is returned, none dropped while the list is
    /// locked.
    pub(crate) fn cqs_not_in(&self, have: &[Arc<CqShared>]) -> Vec<Arc<CqShared>> {
        lock(&self.cqs)
            .iter()
            .filter(|w| !have.iter().any(|h| std::ptr::eq(Arc::as_ptr(h), w.as_ptr())))
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Polls every CQ an attached QP receives on; returns how many completions were polled.
    /// The CQs are taken out of the list before they are polled (the list's lock is not held
    /// while completions are routed); the first [`SRQ_CQS_INLINE`] on the stack, so that a wait
    /// polling an SRQ allocates nothing per poll (device test
    /// `allocations::scope_receives_and_srq_receives_allocate_nothing_per_request`).
    pub(crate) fn poll(&self) -> Result<usize> {
        let mut few: [Option<Arc<CqShared>>; SRQ_CQS_INLINE] = Default::default();
        let mut more = Vec::new();
        for (i, cq) in lock(&self.cqs).iter().filter_map(Weak::upgrade).enumerate() {
            match few.get_mut(i) {
                Some(slot) => *slot = Some(cq),
                None => more.push(cq),
            }
        }
        let mut n = 0;
        for cq in few.iter().flatten().chain(more.iter()) {
            n += cq.poll_and_route()?;
        }
        Ok(n)
    }
}

/// An `SrqShared` over a fake `ibv_srq` (`async_races`, test only). Never dropped.
#[cfg(all(test, not(loom)))]
impl SrqShared {
    pub(crate) fn fake(srq: NonNull<sys::ibv_srq>, max_wr: u32, pd: Arc<PdInner>) -> Arc<SrqShared> {
        Arc::new(SrqShared {
            srq,
            max_wr,
            max_sge: 1,
            rq: TrackedQueue::new(max_wr, None),
            cqs: Mutex::new(Vec::new()),
            transports: Mutex::new(SrqTransports::default()),
            pd,
        })
    }
}
