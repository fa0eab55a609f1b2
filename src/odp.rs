//! On-Demand Paging: explicit and implicit ODP memory regions, capabilities, prefetch.
//!
//! The upstream form of the MLNX_OFED ODP interface (../shared/seeds, "On-Demand Paging"):
//! `IBV_ACCESS_ON_DEMAND` in `ibv_reg_mr`, the implicit region
//! `ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)`, capabilities from
//! `ibv_query_device_ex()` (`odp_caps`), prefetch with `ibv_advise_mr()`.
//!
//! Capabilities are values: [`Context::query_odp`] reads what the device supports, and
//! [`OdpCaps::check`] turns "ODP on transport `T` for these operations" into an [`OdpCap<T>`],
//! or a typed [`Error::Unsupported`] right there. Registering an ODP region needs that value;
//! the region's memory carries what it verified, and posting it on another transport or for an
//! operation it did not verify is refused before the provider sees it.
//!
//! The implicit region ([`ImplicitMr`]) covers the whole address space with one lkey and no
//! rkey: it has local access only (compile-time: [`LocalOnly`]), no `remote()`, cannot host a
//! memory window, and lends views of ordinary Rust memory of at most
//! [`IMPLICIT_MAX_OP`] bytes per operation, the limit the seed documents.
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::ptr::NonNull;
use std::sync::Arc;

use bitflags::bitflags;
use typed_verbs_sys as sys;

use crate::access::{Access, HasLocalWrite, LegalAccess, LocalWrite};
use crate::device::Context;
use crate::error::{Error, Result, Verb};
use crate::mr::{range_of, LocalBuf, LocalBufMut, Mr, MrKind, Odp, OdpTag};
use crate::pd::{Pd, PdInner};
use crate::transport::{Transport, RC, UC, UD, XRC_SEND};

/// The largest operation through the implicit ODP lkey: "The size of operations that can use
/// this lkey is limited to 128MB" (MLNX_OFED 2.3 manual, ODP).
pub const IMPLICIT_MAX_OP: usize = 128 << 20;

bitflags! {
    /// Operations a transport supports on ODP memory (`enum ibv_odp_transport_cap_bits`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct OdpOps: u32 {
        /// `IBV_ODP_SUPPORT_SEND`.
        const SEND = sys::IBV_ODP_SUPPORT_SEND;
        /// `IBV_ODP_SUPPORT_RECV`.
        const RECV = sys::IBV_ODP_SUPPORT_RECV;
        /// `IBV_ODP_SUPPORT_WRITE`.
        const WRITE = sys::IBV_ODP_SUPPORT_WRITE;
        /// `IBV_ODP_SUPPORT_READ`.
        const READ = sys::IBV_ODP_SUPPORT_READ;
        /// `IBV_ODP_SUPPORT_ATOMIC`.
        const ATOMIC = sys::IBV_ODP_SUPPORT_ATOMIC;
        /// `IBV_ODP_SUPPORT_SRQ_RECV`.
        const SRQ_RECV = sys::IBV_ODP_SUPPORT_SRQ_RECV;
    }
}

/// What a device supports for On-Demand Paging (`struct ibv_odp_caps` of
/// `ibv_query_device_ex`), as reported to one device context: the capabilities it checks are
/// that context's only (two contexts' values compare unequal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OdpCaps {
    general: u64,
    rc: u32,
    uc: u32,
    ud: u32,
    xrc: u32,
    /// The device is Soft-RoCE, whose ODP data path ignores in-page offsets (see
    /// [`OdpCaps::writes_land_at_page_starts`]) and writes through the page a read fault found.
    soft_roce: bool,
    /// The context queried ([`ContextInner::id`](crate::device::ContextInner)).
    ctx: u64,
}

/// Transports with ODP capability bits. Sealed by `Transport`.
#[diagnostic::on_unimplemented(
    message = "the device reports no On-Demand Paging capabilities for {Self} queue pairs",
    label = "ODP capabilities exist for RC, UC, UD and XRC_SEND only",
    note = "ibv_query_device_ex(3): odp_caps.per_transport_caps has rc_odp_caps, uc_odp_caps and ud_odp_caps, and xrc_odp_caps beside them; a capability is checked for one of those transports"
)]
pub trait OdpTransport: Transport {
    /// This transport's bits in `caps`.
    #[doc(hidden)]
    fn ops(caps: &OdpCaps) -> u32;
}
impl OdpTransport for RC {
    fn ops(c: &OdpCaps) -> u32 {
        c.rc
    }
}
impl OdpTransport for UC {
    fn ops(c: &OdpCaps) -> u32 {
        c.uc
    }
}
impl OdpTransport for UD {
    fn ops(c: &OdpCaps) -> u32 {
        c.ud
    }
}
impl OdpTransport for XRC_SEND {
    fn ops(c: &OdpCaps) -> u32 {
        c.xrc
    }
}

/// Proof, from [`OdpCaps::check`], that the device supports ODP on `T` queue pairs for the
/// operations it names. Cannot be built otherwise.
pub struct OdpCap<T> {
    ops: OdpOps,
    page_starts: bool,
    ctx: u64,
    _t: PhantomData<fn() -> T>,
}

/// Proof, from [`OdpCaps::check_implicit`], that the device supports implicit ODP regions and
/// ODP on `T` queue pairs for the operations it names.
pub struct ImplicitOdpCap<T> {
    ops: OdpOps,
    page_starts: bool,
    ctx: u64,
    _t: PhantomData<fn() -> T>,
}

macro_rules! cap_common {
    ($t:ident) => {
        impl<T> Clone for $t<T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $t<T> {}
        impl<T: Transport> fmt::Debug for $t<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}<{}>({:?})", stringify!($t), T::NAME, self.ops)
            }
        }
        impl<T> $t<T> {
            /// The operations this capability verified.
            pub fn ops(&self) -> OdpOps {
                self.ops
            }
        }
    };
}
cap_common!(OdpCap);
cap_common!(ImplicitOdpCap);

impl Context {
    /// `ibv_query_device_ex`: the device's On-Demand Paging capabilities.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_query_device_ex` and its errno.
    ///
    /// See ibv_query_device_ex(3).
    #[doc(alias = "ibv_query_device_ex")]
    pub fn query_odp(&self) -> Result<OdpCaps> {
        let mut attr = sys::ibv_device_attr_ex::default();
        // SAFETY: the context is open; no input struct is needed; `attr` is a valid out-pointer
        // of the size the inline helper passes to the provider.
        let ret = unsafe { sys::ibv_query_device_ex(self.as_ptr(), std::ptr::null(), &mut attr) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::QueryDeviceEx, format!("device {}", self.device_name()), ret));
        }
        let c = attr.odp_caps;
        // Every Soft-RoCE, whatever its kernel: rxe's ODP path places every packet at its
        // page's start (seen on 6.18.15) and no release is known to be free of it; gated on a
        // version, every earlier rxe with ODP would be trusted, and distribution kernels that
        // carry backports misjudged.
        let soft_roce = self.inner.attr().is_soft_roce();
        Ok(OdpCaps {
            soft_roce,
            ctx: self.inner.id,
            general: c.general_caps,
            rc: c.per_transport_caps.rc_odp_caps,
            uc: c.per_transport_caps.uc_odp_caps,
            ud: c.per_transport_caps.ud_odp_caps,
            xrc: attr.xrc_odp_caps,
        })
    }
}

#[cfg(all(test, not(loom)))]
impl OdpCaps {
    /// Test only: the capabilities context `ctx` would report: ODP (and implicit ODP) with
    /// `ops` (`IBV_ODP_SUPPORT_*`) on every transport.
    pub(crate) fn fake(ctx: u64, ops: u32) -> Self {
        let general = u64::from(sys::IBV_ODP_SUPPORT | sys::IBV_ODP_SUPPORT_IMPLICIT);
        OdpCaps { general, rc: ops, uc: ops, ud: ops, xrc: ops, soft_roce: false, ctx }
    }
}

impl OdpCaps {
    /// `IBV_ODP_SUPPORT`: the device supports ODP at all.
    pub fn supported(&self) -> bool {
        self.general & u64::from(sys::IBV_ODP_SUPPORT) != 0
    }

    /// The device's ODP data path is known to ignore the offset of an access within its page:
    /// each packet it writes into ODP memory lands at its page's start, and each packet it
    /// reads comes from there (Soft-RoCE, on every kernel; DESIGN.md §9, "The test devices").
    /// On such a device a buffer of ODP memory that the device writes (a receive, an RDMA READ
    /// destination, an atomic result) or reads (a SEND's or an RDMA WRITE's source) must start
    /// on a page boundary, which keeps every misplaced byte inside the buffer; a request naming
    /// another is refused before the provider sees it.
    pub fn writes_land_at_page_starts(&self) -> bool {
        self.soft_roce
    }

    /// `IBV_ODP_SUPPORT_IMPLICIT`: the device supports the implicit ODP region.
    pub fn implicit_supported(&self) -> bool {
        self.general & u64::from(sys::IBV_ODP_SUPPORT_IMPLICIT) != 0
    }

    /// The operations ODP supports on `T` queue pairs (empty without general ODP support).
    pub fn ops<T: OdpTransport>(&self) -> OdpOps {
        if self.supported() {
            OdpOps::from_bits_truncate(T::ops(self))
        } else {
            OdpOps::empty()
        }
    }

    /// A capability for ODP on `T` queue pairs with the operations `ops`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming what is missing when the device has no ODP or lacks one
    /// of `ops` on `T`.
    pub fn check<T: OdpTransport>(&self, ops: OdpOps) -> Result<OdpCap<T>> {
        let have = self.ops::<T>();
        if !self.supported() || !have.contains(ops) {
            return Err(Error::Unsupported {
                verb: Verb::QueryDeviceEx,
                what: format!("On-Demand Paging on {} for {:?} (the device reports {:?})", T::NAME, ops, have),
                source: None,
            });
        }
        Ok(OdpCap { ops, page_starts: self.soft_roce, ctx: self.ctx, _t: PhantomData })
    }

    /// A capability for the implicit ODP region used on `T` queue pairs with `ops`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without implicit ODP, or as [`OdpCaps::check`]; and on Soft-RoCE
    /// whatever it reports: its ODP path writes through the page a read fault found, which in
    /// the program's own anonymous memory (what an implicit region lends) is the kernel's
    /// shared zero page (DESIGN.md §5, "On-Demand Paging").
    pub fn check_implicit<T: OdpTransport>(&self, ops: OdpOps) -> Result<ImplicitOdpCap<T>> {
        let cap = self.check::<T>(ops)?;
        if !self.implicit_supported() || self.soft_roce {
            let why = if self.soft_roce { " on Soft-RoCE, which could write the shared zero page" } else { "" };
            return Err(Error::Unsupported {
                verb: Verb::QueryDeviceEx,
                what: format!("implicit On-Demand Paging regions (IBV_ODP_SUPPORT_IMPLICIT){why}"),
                source: None,
            });
        }
        Ok(ImplicitOdpCap { ops: cap.ops, page_starts: cap.page_starts, ctx: cap.ctx, _t: PhantomData })
    }
}

/// Access sets an implicit ODP region may have: local read, optionally local write.
#[diagnostic::on_unimplemented(
    message = "an implicit ODP region has local access only; `{Self}` asks for more",
    label = "only `Access::NONE` or `Access::NONE.local_write()`",
    note = "MLNX_OFED ODP: \"Implicit ODP MR is limited to local access permissions (local read or write). It only has a valid lkey, whereas its rkey is invalid.\""
)]
pub trait LocalOnly: LegalAccess {}
impl LocalOnly for Access {}
impl LocalOnly for Access<LocalWrite> {}

impl Pd {
    /// A capability is the device's word for its own regions only: one queried on another
    /// context (another device) may promise operations this one lacks, or miss that this
    /// one's ODP writes land at page starts, which the placement checks rely on.
    fn check_cap_context(&self, cap_ctx: u64) -> Result<()> {
        if cap_ctx != self.inner.ctx.id {
            return Err(Error::invalid(
                "ibv_reg_mr",
                format!("the ODP capability was queried on another device context than {}'s", self.inner.ctx.name),
            ));
        }
        Ok(())
    }

    /// The operations a peer may run on an explicit ODP region granted `bits`
    /// (`IBV_ACCESS_*`) must be among those `ops` verified for its transport: a peer's WRITE,
    /// READ or atomic on ODP memory needs the device's ODP support for it, which the ODP
    /// manual has the program check per transport.
    fn check_remote_ops(bits: u32, ops: OdpOps, transport: &str) -> Result<()> {
        let mut needed = OdpOps::empty();
        for (access, op) in [
            (sys::IBV_ACCESS_REMOTE_WRITE, OdpOps::WRITE),
            (sys::IBV_ACCESS_REMOTE_READ, OdpOps::READ),
            (sys::IBV_ACCESS_REMOTE_ATOMIC, OdpOps::ATOMIC),
        ] {
            if bits & access != 0 {
                needed |= op;
            }
        }
        if !ops.contains(needed) {
            return Err(Error::invalid(
                "ibv_reg_mr",
                format!(
                    "an ODP region open to a peer's {needed:?} needs a capability that verified them on {transport} \
                     (OdpCaps::check); this one verified {ops:?}"
                ),
            ));
        }
        Ok(())
    }

    /// `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND`: an explicit ODP region of `len` new bytes, for
    /// the transport and operations `cap` verified.
    ///
    /// The memory is a shared mapping of a new memory file (memfd), `MAP_NORESERVE`: no page
    /// exists until the program or the device touches it, so a region may be larger than the
    /// machine's memory; it reads as zeros until written, and child processes do not inherit
    /// it (`MADV_DONTFORK`).
    ///
    /// # Errors
    /// As [`Pd::alloc_mr`]; [`Error::InvalidArgument`] if `cap` was queried on another device
    /// context than the PD's, or if `access` lets a peer WRITE, READ or run atomics on the
    /// region and `cap` did not verify that operation (`OdpOps::WRITE`, `READ`, `ATOMIC`);
    /// [`Error::Verb`] with `ibv_reg_mr` if the device refuses anyway.
    ///
    /// See ibv_reg_mr(3) (`IBV_ACCESS_ON_DEMAND`).
    #[doc(alias = "ibv_reg_mr")]
    pub fn alloc_mr_odp<A: LegalAccess, T: OdpTransport>(
        &self,
        len: usize,
        access: A,
        cap: &OdpCap<T>,
    ) -> Result<Mr<A, Odp>> {
        let _ = access;
        self.check_cap_context(cap.ctx)?;
        Self::check_remote_ops(A::BITS, cap.ops, T::NAME)?;
        self.alloc_mr_kind::<A, Odp>(
            len,
            OdpTag::verified(T::QP_TYPE, cap.ops.bits(), cap.page_starts),
            crate::mr::Backing::OdpMemfd,
        )
    }

    /// `ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)`: the implicit ODP region,
    /// for local operations on `T` queue pairs as `cap` verified.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `cap` was queried on another device context than the
    /// PD's; [`Error::Verb`] with `ibv_reg_mr` and its errno.
    ///
    /// See ibv_reg_mr(3).
    #[doc(alias = "ibv_reg_mr")]
    pub fn register_implicit_odp<A: LocalOnly, T: OdpTransport>(
        &self,
        access: A,
        cap: &ImplicitOdpCap<T>,
    ) -> Result<ImplicitMr<A>> {
        let _ = access;
        self.check_cap_context(cap.ctx)?;
        let bits = A::BITS | sys::IBV_ACCESS_ON_DEMAND;
        // SAFETY: the PD is alive; a NULL address with SIZE_MAX length and ON_DEMAND is the
        // documented implicit-ODP registration; no memory is named.
        let mr = unsafe { sys::__ibv_reg_mr(self.as_ptr(), std::ptr::null_mut(), usize::MAX, bits, 0) };
        let mr = NonNull::new(mr).ok_or_else(|| Error::last_os(Verb::RegMr, "implicit ODP region"))?;
        // SAFETY: `mr` is a valid registration.
        let lkey = unsafe { (*mr.as_ptr()).lkey };
        Ok(ImplicitMr {
            mr,
            lkey,
            odp: OdpTag::verified(T::QP_TYPE, cap.ops.bits(), cap.page_starts).implicit(),
            pd: Arc::clone(&self.inner),
            _access: PhantomData,
        })
    }
}

/// The implicit ODP region: one lkey for the whole address space, no rkey. Lends views of
/// ordinary Rust memory to work requests. Deregistered on drop.
pub struct ImplicitMr<A> {
    mr: NonNull<sys::ibv_mr>,
    lkey: u32,
    odp: OdpTag,
    pd: Arc<PdInner>,
    _access: PhantomData<A>,
}

// SAFETY: the handle may be used from any thread; it owns no memory.
unsafe impl<A> Send for ImplicitMr<A> {}
// SAFETY: as above.
unsafe impl<A> Sync for ImplicitMr<A> {}

impl<A> Drop for ImplicitMr<A> {
    fn drop(&mut self) {
        // SAFETY: valid registration, deregistered once. Views borrow `self`, so none is in
        // flight. A failure cannot be acted on; ignored (no memory of ours is involved).
        // `verbs` is libibverbs' for every context the library opens.
        let _ = unsafe { (self.pd.ctx.verbs.dereg_mr)(self.mr.as_ptr()) };
    }
}

#[cfg(all(test, not(loom)))]
impl<A> ImplicitMr<A> {
    /// Test only: an implicit region over the fake registration `mr` (its context the fake
    /// one, whose `dereg_mr` is the fake device's) in `pd`, verified for `ops` on `qp_type`.
    pub(crate) fn fake(pd: &Arc<PdInner>, mr: NonNull<sys::ibv_mr>, qp_type: u32, ops: OdpOps) -> Self {
        // SAFETY: the caller's fake registration, valid for the test.
        let lkey = unsafe { (*mr.as_ptr()).lkey };
        let odp = OdpTag::verified(qp_type, ops.bits(), false).implicit();
        ImplicitMr { mr, lkey, odp, pd: Arc::clone(pd), _access: PhantomData }
    }
}

impl<A> fmt::Debug for ImplicitMr<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImplicitMr").field("lkey", &format_args!("{:#x}", self.lkey)).finish()
    }
}

fn implicit_len(len: usize, what: &'static str) -> Result<u32> {
    if len == 0 || len > IMPLICIT_MAX_OP {
        return Err(Error::invalid(
            what,
            format!("{len} bytes: an operation through the implicit ODP lkey takes 1..={IMPLICIT_MAX_OP} bytes"),
        ));
    }
    Ok(len as u32)
}

impl<A: LocalOnly> ImplicitMr<A> {
    /// The local key (valid for any address of the process).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// A view of `data` that the device may read (a send or RDMA WRITE source).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty slice or one above [`IMPLICIT_MAX_OP`].
    pub fn buf<'a>(&'a self, data: &'a [u8]) -> Result<LocalBuf<'a>> {
        let len = implicit_len(data.len(), "ImplicitMr::buf")?;
        Ok(LocalBuf::from_parts(data.as_ptr() as u64, len, self.lkey, self.odp, self.pd.id()))
    }

    /// A view of `data` that the device may write (receive buffer, RDMA READ destination).
    ///
    /// # Errors
    /// As [`ImplicitMr::buf`].
    pub fn buf_mut<'a>(&'a self, data: &'a mut [u8]) -> Result<LocalBufMut<'a>>
    where
        A: HasLocalWrite,
    {
        let len = implicit_len(data.len(), "ImplicitMr::buf_mut")?;
        Ok(LocalBufMut::from_parts(data.as_mut_ptr() as u64, len, self.lkey, self.odp, self.pd.id()))
    }

    /// `ibv_advise_mr`: best-effort prefetch of `data`'s pages ("may silently ignore errors").
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a length above [`IMPLICIT_MAX_OP`], or
    /// [`Prefetch::Write`] of a region without LOCAL_WRITE; [`Error::Unsupported`] when the
    /// provider has no `advise_mr`; the verb's other failures are ignored.
    ///
    /// See ibv_advise_mr(3).
    #[doc(alias = "ibv_advise_mr")]
    pub fn prefetch(&self, data: &[u8], advice: Prefetch) -> Result<()> {
        let len = implicit_len(data.len(), "ibv_advise_mr")?;
        check_advice::<A>(advice)?;
        advise_best_effort(&self.pd, advice, data.as_ptr() as u64, len, self.lkey)
    }

    /// `ibv_advise_mr` with `IBV_ADVISE_MR_FLAG_FLUSH` (= `IB_UVERBS_ADVISE_MR_FLAG_FLUSH`): prefetch `data`'s pages and report
    /// errors.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a length above [`IMPLICIT_MAX_OP`], or
    /// [`Prefetch::Write`] of a region without LOCAL_WRITE; [`Error::Unsupported`] when the
    /// provider has no `advise_mr`; [`Error::Verb`] with `ibv_advise_mr` and its errno.
    ///
    /// See ibv_advise_mr(3).
    #[doc(alias = "ibv_advise_mr")]
    pub fn prefetch_sync(&self, data: &[u8], advice: Prefetch) -> Result<()> {
        let len = implicit_len(data.len(), "ibv_advise_mr")?;
        check_advice::<A>(advice)?;
        advise(&self.pd, advice, sys::IB_UVERBS_ADVISE_MR_FLAG_FLUSH, data.as_ptr() as u64, len, self.lkey)
    }
}

/// What to prefetch pages for (`enum ibv_advise_mr_advice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH`: for reading.
    Read,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE`: for writing.
    Write,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT`: map pages already present, fault none in.
    NoFault,
}

impl Prefetch {
    fn raw(self) -> sys::ib_uverbs_advise_mr_advice {
        match self {
            Prefetch::Read => sys::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH,
            Prefetch::Write => sys::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE,
            Prefetch::NoFault => sys::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
        }
    }
}

/// ibv_advise_mr(3) fails `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE` with EPERM when "the specified
/// MR ... is not registered as writable access": refused before the provider, typed.
fn check_advice<A: crate::access::AccessSet>(advice: Prefetch) -> Result<()> {
    if advice == Prefetch::Write && A::BITS & sys::IBV_ACCESS_LOCAL_WRITE == 0 {
        return Err(Error::invalid(
            "ibv_advise_mr",
            "Prefetch::Write (IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE) of a region without LOCAL_WRITE: \
             ibv_advise_mr(3) refuses a write prefetch of an MR \"not registered as writable access\"",
        ));
    }
    Ok(())
}

fn advise(pd: &PdInner, advice: Prefetch, flags: u32, addr: u64, len: u32, lkey: u32) -> Result<()> {
    let mut sge = sys::ibv_sge { addr, length: len, lkey };
    // SAFETY: the PD is alive; `sge` names memory of a live ODP registration (the caller's
    // region or the implicit one); prefetching has no effect on memory contents.
    let ret = unsafe { sys::ibv_advise_mr(pd.pd.as_ptr(), advice.raw(), flags, &mut sge, 1) };
    match ret {
        0 => Ok(()),
        // The provider has no `advise_mr` (rxe in rdma-core 44 and 56), or libibverbs has
        // none ("ENOSYS may sometimes be returned by old versions of libibverbs").
        r if [libc::EOPNOTSUPP, libc::ENOSYS].contains(&r.saturating_abs()) => Err(Error::Unsupported {
            verb: Verb::AdviseMr,
            what: format!("prefetching On-Demand Paging memory ({advice:?}): the provider has no advise_mr"),
            source: Some(std::io::Error::from_raw_os_error(r.saturating_abs())),
        }),
        r => Err(Error::from_ret(Verb::AdviseMr, format!("{len} bytes at {addr:#x}, {advice:?}"), r)),
    }
}

/// Best-effort prefetch: the verb's own failures are ignored ("may silently ignore errors"),
/// but a provider without the verb at all is reported.
fn advise_best_effort(pd: &PdInner, advice: Prefetch, addr: u64, len: u32, lkey: u32) -> Result<()> {
    match advise(pd, advice, 0, addr, len, lkey) {
        Err(e @ Error::Unsupported { .. }) => Err(e),
        _ => Ok(()),
    }
}

/// Region kinds that ODP verbs apply to.
#[diagnostic::on_unimplemented(
    message = "prefetch (ibv_advise_mr) applies to On-Demand Paging regions only; this region is `{Self}`",
    label = "not an ODP region",
    note = "MLNX_OFED ODP: \"The pre-fetched verb is applicable for ODP MRs only\"; register with `Pd::alloc_mr_odp`"
)]
pub trait IsOdp: MrKind {}
impl IsOdp for Odp {}

/// Proof that a region has an rkey: never implemented for the implicit ODP region.
#[diagnostic::on_unimplemented(
    message = "the implicit ODP region has no rkey: it cannot be the target of remote access",
    label = "implicit ODP regions are local only",
    note = "MLNX_OFED ODP: \"It only has a valid lkey, whereas its rkey is invalid.\" Register an explicit ODP region (`Pd::alloc_mr_odp`) for remote access"
)]
pub trait HasRkey {}

impl<A: LocalOnly> ImplicitMr<A> {
    /// Not available: the implicit region has no rkey. This method exists to say so at compile
    /// time.
    pub fn remote(&self) -> crate::mr::RemoteSlice<A>
    where
        Self: HasRkey,
    {
        crate::mr::RemoteSlice::new(0, 0, 0)
    }
}

impl<A: crate::access::AccessSet, K: MrKind> Mr<A, K> {
    /// `ibv_advise_mr`: best-effort prefetch of `range` of the region ("done on a best effort
    /// basis, and may silently ignore errors").
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a range outside the region, empty, or above `u32::MAX`
    /// bytes, or [`Prefetch::Write`] of a region without LOCAL_WRITE; [`Error::Unsupported`]
    /// when the provider has no `advise_mr`; the verb's other failures are ignored.
    ///
    /// See ibv_advise_mr(3).
    #[doc(alias = "ibv_advise_mr")]
    pub fn prefetch(&self, range: impl RangeBounds<usize>, advice: Prefetch) -> Result<()>
    where
        K: IsOdp,
    {
        let (off, len) = range_of(range, self.len(), "ibv_advise_mr")?;
        check_advice::<A>(advice)?;
        advise_best_effort(self.pd(), advice, self.addr() + off as u64, advise_len(len)?, self.lkey())
    }

    /// `ibv_advise_mr` with `IBV_ADVISE_MR_FLAG_FLUSH` (= `IB_UVERBS_ADVISE_MR_FLAG_FLUSH`): prefetch `range` synchronously and
    /// report errors.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a range outside the region, empty, or above `u32::MAX`
    /// bytes, or [`Prefetch::Write`] of a region without LOCAL_WRITE; [`Error::Unsupported`]
    /// when the provider has no `advise_mr`; [`Error::Verb`] with `ibv_advise_mr` and its errno.
    ///
    /// See ibv_advise_mr(3).
    #[doc(alias = "ibv_advise_mr")]
    pub fn prefetch_sync(&self, range: impl RangeBounds<usize>, advice: Prefetch) -> Result<()>
    where
        K: IsOdp,
    {
        let (off, len) = range_of(range, self.len(), "ibv_advise_mr")?;
        check_advice::<A>(advice)?;
        advise(
            self.pd(),
            advice,
            sys::IB_UVERBS_ADVISE_MR_FLAG_FLUSH,
            self.addr() + off as u64,
            advise_len(len)?,
            self.lkey(),
        )
    }
}

/// The length of a prefetch of a region's range: 1 to `u32::MAX` bytes (an empty range names
/// nothing, and a zero length is what some devices read as 2 GiB in a scatter/gather entry).
fn advise_len(len: usize) -> Result<u32> {
    match u32::try_from(len) {
        Ok(l) if l > 0 => Ok(l),
        _ => Err(Error::invalid("ibv_advise_mr", format!("{len} bytes: a prefetch takes 1..={} bytes", u32::MAX))),
    }
}

/// Region kinds whose pages may be handed back to the kernel while registered.
#[diagnostic::on_unimplemented(
    message = "the pages of a pinned region cannot be discarded: the device keeps the pinned pages, the program would see new ones",
    label = "not an ODP region",
    note = "a pinned registration keeps the pages it pinned at registration; only an On-Demand Paging region (`Pd::alloc_mr_odp`) follows the process's page tables"
)]
pub trait Discardable: MrKind {}
impl Discardable for Odp {}

impl<A: crate::access::AccessSet, K: MrKind> Mr<A, K> {
    /// `madvise(MADV_REMOVE)` over `range` of an On-Demand Paging region: frees its pages
    /// (the region is a shared memory file, see [`Pd::alloc_mr_odp`]; this punches a hole in
    /// it), which invalidates the device's mapping of them (the ODP invalidation path). The
    /// range then reads as zeros, to the program and to the device, and pages come back when
    /// either touches them.
    ///
    /// `&mut self`: no view of the region is lent to a work request meanwhile. A peer with
    /// remote access may still write the range concurrently: its writes land before or after
    /// the discard.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a range outside the region, or one that does not start
    /// on a page boundary or end on one (or at the region's end); [`Error::Verb`] with
    /// `madvise` and its errno.
    ///
    /// See madvise(2), ibv_reg_mr(3) (`IBV_ACCESS_ON_DEMAND`).
    #[doc(alias = "madvise")]
    pub fn discard_pages(&mut self, range: impl RangeBounds<usize>) -> Result<()>
    where
        K: Discardable,
    {
        let (off, len) = range_of(range, self.len(), "madvise")?;
        // `K: Discardable` means ODP, whose only constructor maps a memfd; checked all the same.
        if self.backing() != crate::mr::Backing::OdpMemfd {
            return Err(Error::invalid("madvise", "not the memory of an On-Demand Paging region"));
        }
        let page = crate::mr::page_size();
        if off % page != 0 || (len % page != 0 && off + len != self.len()) {
            return Err(Error::invalid(
                "madvise",
                format!("{off}..{}: whole pages of {page} bytes only (or up to the region's end)", off + len),
            ));
        }
        if len == 0 {
            return Ok(());
        }
        // The mapping covers the region rounded up to whole pages.
        let len = len.div_ceil(page) * page;
        // SAFETY: `off..off+len` lies in the region's own shared mapping of its own memfd
        // (`map_odp_memory` rounds it up to whole pages; `K: Discardable` means ODP, so mapped
        // memory; no other mapping of the file exists: `MADV_DONTFORK`). `&mut
        // self`: no local view or work request uses it and no reference into it exists; peers
        // only reach it through the device, which ODP keeps coherent with the page tables.
        let ret = unsafe { libc::madvise(self.mem_ptr().as_ptr().add(off).cast(), len, libc::MADV_REMOVE) };
        if ret != 0 {
            return Err(Error::last_os(Verb::Madvise, format!("MADV_REMOVE over {len} bytes at offset {off}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's WRITE, READ or atomic on an explicit ODP region needs its operation verified;
    /// local access needs nothing here (its posts are checked against the region's tag).
    #[test]
    fn remote_access_to_an_odp_region_needs_its_operations_verified() {
        let (w, r, a) = (sys::IBV_ACCESS_REMOTE_WRITE, sys::IBV_ACCESS_REMOTE_READ, sys::IBV_ACCESS_REMOTE_ATOMIC);
        let lw = sys::IBV_ACCESS_LOCAL_WRITE;
        assert!(Pd::check_remote_ops(lw, OdpOps::SEND, "RC").is_ok());
        assert!(Pd::check_remote_ops(0, OdpOps::empty(), "UD").is_ok());
        assert!(Pd::check_remote_ops(lw | w, OdpOps::SEND | OdpOps::WRITE, "RC").is_ok());
        assert!(Pd::check_remote_ops(lw | w | r | a, OdpOps::WRITE | OdpOps::READ | OdpOps::ATOMIC, "RC").is_ok());
        for (bits, ops) in [
            (lw | w, OdpOps::SEND),
            (r, OdpOps::SEND | OdpOps::WRITE),
            (lw | w | r | a, OdpOps::WRITE | OdpOps::READ),
            (lw | w | r, OdpOps::all() - OdpOps::READ),
        ] {
            let e = Pd::check_remote_ops(bits, ops, "RC");
            assert!(
                matches!(e, Err(Error::InvalidArgument { verb: "ibv_reg_mr", .. })),
                "{bits:#x} with {ops:?}: {e:?}"
            );
        }
    }
}
