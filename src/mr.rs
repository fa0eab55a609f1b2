//! Memory regions with typed access rights: `ibv_reg_mr`, `ibv_dereg_mr`.
//!
//! A [`Mr<A>`] owns its registration and, usually, its memory: page-aligned and
//! zero-initialised when the library allocates it ([`Pd::alloc_mr`]), or a buffer the caller
//! moved in ([`Pd::register`], see [`crate::caller`]); `A` is its [access set](crate::access).
//! Work requests never name raw addresses: they take views of registered memory,
//!
//! - [`LocalBuf<'a>`]: memory the local device may *read* (a send or RDMA WRITE source), a
//!   shared borrow of the region;
//! - [`LocalBufMut<'a>`]: memory the local device may *write* (a receive buffer, an RDMA READ
//!   destination, an atomic result), an exclusive borrow of a region with LOCAL_WRITE;
//! - [`RemoteSlice<A>`]: the address, length and rkey a peer uses, typed by the rights of the
//!   region it names, so that e.g. an RDMA WRITE only accepts a region with REMOTE_WRITE.
//!
//! Memory a peer may write (REMOTE_WRITE, REMOTE_ATOMIC, or a writable window through
//! MW_BIND) is never exposed as `&[u8]`: see [`PeerCannotWrite`].
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use typed_verbs_sys as sys;

use crate::access::{AccessSet, HasLocalWrite, LegalAccess, PeerCannotWrite, RemoteRights};
use crate::error::{Error, Result, Verb};
use crate::pd::{Pd, PdId, PdInner};

/// Alignment of the memory the library allocates for an [`Mr`]: a page. (Memory the caller
/// registers, [`crate::caller`], has whatever alignment it has.)
pub const MR_ALIGN: usize = 4096;

/// A registered memory region: `struct ibv_mr` plus the buffer, which it owns (memory the
/// library allocated, or a caller's buffer moved in with [`Pd::register`]) or, for the regions
/// of [`crate::caller`] over borrowed or raw memory, only names.
///
/// Deregistered and freed on drop. Deregistration can only fail while a memory window is bound
/// or the device still uses the region; the types prevent both, but should it fail anyway the
/// memory is leaked rather than freed under the device (use [`Mr::deregister`] to see the
/// error). Memory the region does not own cannot be leaked by it: if deregistering such a
/// region fails on drop, the process aborts (see [`crate::caller`]).
pub struct Mr<A: AccessSet, K: MrKind = Pinned> {
    mr: NonNull<sys::ibv_mr>,
    mem: NonNull<u8>,
    len: usize,
    lkey: u32,
    rkey: u32,
    /// For ODP regions: the transport and operations the registration's capability verified.
    odp: OdpTag,
    /// Where the memory comes from, and so how it is freed.
    backing: Backing,
    /// The caller's buffer of a region of [`Pd::register`] (`Backing::Caller`), dropped only
    /// after a successful deregistration; `None` otherwise. A thin pointer, apart from
    /// `backing`, so that a region stays small (it travels in `(Error, Mr)` results).
    buffer: Option<Box<CallerBuffer>>,
    pd: Arc<PdInner>,
    _access: PhantomData<(A, K)>,
}

/// Where a region's memory comes from: the allocator that made it is the one that frees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backing {
    /// Zeroed, page-aligned heap memory (`alloc_zeroed`).
    Heap,
    /// A memfd's shared mapping (`map_odp_memory`): On-Demand Paging regions.
    OdpMemfd,
    /// A private mapping of whole huge pages (`map_huge`, `MAP_HUGETLB`) of 2^shift bytes each
    /// (kept, not looked up again, so that the unmap uses the mapped length).
    Huge(u8),
    /// The memory of a buffer the caller moved in ([`Pd::register`]), held in the region's
    /// `buffer`: released by dropping that, only after a successful deregistration.
    Caller,
    /// Memory the region does not own (a borrowed slice, or raw memory under the caller's
    /// contract, [`crate::caller`]): never released by the library. Its owner may release it
    /// once the region is gone, so a deregistration that fails on drop aborts the process.
    Borrowed,
}

/// A caller's buffer of any [`StableBuffer`](crate::caller::StableBuffer) type, boxed before its
/// address was taken.
pub(crate) type CallerBuffer = Box<dyn std::any::Any + Send + Sync>;

/// How a region's pages are held: [`Pinned`] (the default: registered memory is pinned) or
/// [`Odp`] (On-Demand Paging, see [`crate::odp`]). Sealed.
pub trait MrKind: kind_sealed::Sealed + Send + Sync + 'static {
    /// Extra `IBV_ACCESS_*` bits of the registration.
    const EXTRA_ACCESS: u32;
}

mod kind_sealed {
    sealed_trait!();
}

/// Marker: pages pinned at registration (plain `ibv_reg_mr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pinned;
/// Marker: an explicit On-Demand Paging region (`IBV_ACCESS_ON_DEMAND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Odp;

impl kind_sealed::Sealed for Pinned {}
impl kind_sealed::Sealed for Odp {}

/// Region kinds a memory window may be bound to: [`Pinned`] regions only. An ODP region's
/// pages may be discarded and faulted in anew while it is registered
/// ([`Mr::discard_pages`]), which a window's borrow of the region could not outlive. Sealed.
#[diagnostic::on_unimplemented(
    message = "a memory window cannot be bound to an `{Self}` region: windows are bound to pinned regions only",
    label = "an On-Demand Paging region",
    note = "an ODP region's pages may be discarded (`Mr::discard_pages`) while a window would still expose them to peers",
    note = "bind the window to a region from `Pd::alloc_mr` with LOCAL_WRITE and MW_BIND (`access::WINDOW_BINDABLE`), or give the peer the ODP region's own rkey (`Mr::remote`)"
)]
pub trait WindowHost: MrKind + Sized {
    /// The region, as the pinned region it is.
    #[doc(hidden)]
    fn pinned<A: AccessSet>(mr: &Mr<A, Self>) -> &Mr<A, Pinned>;
}

/// What a memory window may be bound to: a pinned [`Mr`], a region of memory the caller owns
/// ([`Registered`](crate::caller::Registered), [`ScopedMr`](crate::caller::ScopedMr); a
/// [`BorrowedMr`](crate::caller::BorrowedMr) is one too, but has no MW_BIND, so no window's
/// rights fit it), or a reference, `Box` or `Arc` of one. Not the implicit ODP region: it has a
/// valid lkey only, its rkey is invalid, and it is limited to local access. Not a DMA-BUF
/// region ([`DmabufMr`](crate::dmabuf::DmabufMr)): windows over another device's memory are not
/// offered. Sealed.
#[diagnostic::on_unimplemented(
    message = "a memory window cannot be bound to `{Self}`: a window is bound to a pinned region with MW_BIND (an `Mr`, or memory registered with `Pd::register`)",
    label = "not a region a window can be bound to",
    note = "the implicit ODP region (`ImplicitMr`) is none: it \"only has a valid lkey, whereas its rkey is invalid\" and \"is limited to local access permissions\" (vendor ODP manual, Registering ODP Implicit MR), so no window can expose it to a peer",
    note = "nor is a DMA-BUF region (`DmabufMr`): windows over another device's memory are not offered",
    note = "bind the window to a region from `Pd::alloc_mr` with LOCAL_WRITE and MW_BIND (`access::WINDOW_BINDABLE`), or to memory you own registered with `Pd::register`"
)]
pub trait WindowRegion: region_sealed::Sealed {
    /// The region's access rights.
    type Access: AccessSet;
    /// The region, as the pinned region it is.
    #[doc(hidden)]
    fn window_region(&self) -> &Mr<Self::Access, Pinned>;
}

pub(crate) mod region_sealed {
    sealed_trait!();
}

impl<A: AccessSet, K: WindowHost> region_sealed::Sealed for Mr<A, K> {}
impl<A: AccessSet, K: WindowHost> WindowRegion for Mr<A, K> {
    type Access = A;
    #[inline(always)]
    fn window_region(&self) -> &Mr<A, Pinned> {
        K::pinned(self)
    }
}

/// A region behind a reference, a `Box` or an `Arc`: the window borrows that handle, which
/// keeps the region alive and unchanged for as long.
macro_rules! window_region_through {
    ($($ty:ty),*) => {$(
        impl<H: WindowRegion + ?Sized> region_sealed::Sealed for $ty {}
        impl<H: WindowRegion + ?Sized> WindowRegion for $ty {
            type Access = H::Access;
            #[inline(always)]
            fn window_region(&self) -> &Mr<H::Access, Pinned> {
                (**self).window_region()
            }
        }
    )*};
}
window_region_through!(&H, &mut H, Box<H>, std::sync::Arc<H>);

impl WindowHost for Pinned {
    fn pinned<A: AccessSet>(mr: &Mr<A, Pinned>) -> &Mr<A, Pinned> {
        mr
    }
}
impl MrKind for Pinned {
    const EXTRA_ACCESS: u32 = 0;
}
impl MrKind for Odp {
    const EXTRA_ACCESS: u32 = sys::IBV_ACCESS_ON_DEMAND;
}

/// The ODP verification a view of registered memory carries: the transport (`IBV_QPT_*`) and
/// the `IBV_ODP_SUPPORT_*` operations its registration's capability covered. `None` for pinned
/// memory, which any transport and operation may use.
///
/// Opaque: only the library reads it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OdpTag(u64);

impl OdpTag {
    /// Pinned memory's tag.
    pub(crate) const NONE: OdpTag = OdpTag(0);

    /// Set in a tag that is `Some`.
    const SOME: u64 = 1 << 63;

    /// `Some((transport, operations))` packed in one word (a view of memory is moved with
    /// every work request: eight bytes instead of twelve): [`OdpTag::SOME`], the transport in
    /// bits 32 to 62 (an `IBV_QPT_*`, below 256), the operations in the low half; zero is `None`.
    #[inline(always)]
    const fn of(tag: Option<(u32, u32)>) -> Self {
        match tag {
            None => OdpTag(0),
            Some((t, ops)) => OdpTag(Self::SOME | ((t as u64 & 0x7fff_ffff) << 32) | ops as u64),
        }
    }

    /// The transport and operations, or `None` for pinned memory.
    #[inline(always)]
    pub(crate) const fn get(self) -> Option<(u32, u32)> {
        if self.0 & Self::SOME == 0 {
            return None;
        }
        Some((((self.0 & !Self::SOME) >> 32) as u32, self.0 as u32))
    }

    /// Set in the operations of a tag whose device places ODP writes at page starts
    /// (`OdpCaps::writes_land_at_page_starts`); no `IBV_ODP_SUPPORT_*` bit uses it.
    const PAGE_STARTS: u32 = 1 << 31;

    /// The tag of memory registered with a capability for `ops` on `qp_type`.
    pub(crate) fn verified(qp_type: u32, ops: u32, page_starts: bool) -> Self {
        OdpTag::of(Some((qp_type, ops | if page_starts { Self::PAGE_STARTS } else { 0 })))
    }

    /// Set in the operations of a view through the implicit ODP lkey, whose operations take
    /// at most [`IMPLICIT_MAX_OP`](crate::odp::IMPLICIT_MAX_OP) bytes in all; no
    /// `IBV_ODP_SUPPORT_*` bit uses it.
    const IMPLICIT: u32 = 1 << 30;

    /// This tag, for a view through the implicit ODP lkey.
    pub(crate) fn implicit(self) -> Self {
        match self.get() {
            Some((t, ops)) => OdpTag::of(Some((t, ops | Self::IMPLICIT))),
            None => self,
        }
    }

    /// Whether the view is through the implicit ODP lkey.
    #[inline(always)]
    pub(crate) fn is_implicit(self) -> bool {
        self.0 & Self::SOME != 0 && (self.0 as u32) & Self::IMPLICIT != 0
    }

    /// Checks a buffer at `addr` that the device will read (a SEND's or an RDMA WRITE's
    /// source) or write (a receive, an RDMA READ destination, an atomic result): on a device
    /// whose ODP path places each packet at its page's start, it must start on a page
    /// boundary, so that the misplaced bytes stay inside it (a read from the page's start of a
    /// buffer starting mid-page would send bytes lent elsewhere, which the program may be
    /// writing).
    #[inline(always)]
    pub(crate) fn check_device_access(self, addr: u64, verb: &'static str) -> Result<()> {
        // Pinned memory, inline; ODP memory out of line.
        if self.get().is_none() {
            return Ok(());
        }
        self.check_odp_device_access(addr, verb)
    }

    #[inline(never)]
    fn check_odp_device_access(self, addr: u64, verb: &'static str) -> Result<()> {
        match self.get() {
            Some((_, ops)) if ops & Self::PAGE_STARTS != 0 && addr % page_size() as u64 != 0 => Err(Error::invalid(
                verb,
                format!(
                    "this device's On-Demand Paging path reads and writes each packet at its page's start \
                         (OdpCaps::writes_land_at_page_starts): a buffer of ODP memory it reads or writes must \
                         start on a page boundary, not at {addr:#x}"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The verification that holds for memory of both tags (the entries of one scatter/gather
    /// list): pinned memory adds nothing; two ODP tags keep the operations both verified, or
    /// none if they were verified for different transports.
    pub(crate) fn meet(self, other: Self) -> Self {
        match (self.get(), other.get()) {
            (None, _) => other,
            (_, None) => self,
            (Some((t, a)), Some((u, b))) if t == u => OdpTag::of(Some((t, (a & b) | ((a | b) & Self::PAGE_STARTS)))),
            (Some((t, a)), Some(_)) => OdpTag::of(Some((t, a & Self::PAGE_STARTS))),
        }
    }

    /// Checks that an operation `op` (`IBV_ODP_SUPPORT_*`) on a `qp_type` QP was verified.
    #[inline(always)]
    pub(crate) fn check(self, qp_type: u32, transport: &str, op: u32) -> Result<()> {
        match self.get() {
            None => Ok(()),
            Some((t, ops)) if t == qp_type && ops & op == op => Ok(()),
            Some((t, ops)) => Err(Self::unverified(t, ops, transport, op)),
        }
    }

    #[cold]
    #[inline(never)]
    fn unverified(t: u32, ops: u32, transport: &str, op: u32) -> Error {
        let ops = ops & !(Self::PAGE_STARTS | Self::IMPLICIT);
        let verb = if op & (sys::IBV_ODP_SUPPORT_RECV | sys::IBV_ODP_SUPPORT_SRQ_RECV) != 0 {
            "ibv_post_recv"
        } else {
            "ibv_post_send"
        };
        Error::invalid(
            verb,
            format!(
                "memory of an ODP region verified for QP type {t}, operations {ops:#x} (ibv_query_device_ex \
                     odp_caps) is used on a {transport} QP for operation {op:#x}, which was not verified"
            ),
        )
    }
}

// SAFETY: the region's memory is owned by the `Mr` and only reached through `&self`/`&mut self`
// methods that follow Rust's aliasing rules (or volatile copies for peer-writable memory); the
// `ibv_mr` handle may be used from any thread.
unsafe impl<A: AccessSet, K: MrKind> Send for Mr<A, K> {}
// SAFETY: `&Mr` only gives shared access (reads, `LocalBuf`, volatile copies).
unsafe impl<A: AccessSet, K: MrKind> Sync for Mr<A, K> {}

impl<A: AccessSet, K: MrKind> fmt::Debug for Mr<A, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.mem)
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &format_args!("{:#x}", A::BITS))
            .finish()
    }
}

impl Pd {
    /// `ibv_reg_mr` over `len` bytes of new zeroed, page-aligned memory owned by the region.
    ///
    /// `access` is the access set, e.g. [`access::REMOTE_RW`](crate::access::REMOTE_RW); an
    /// illegal set (REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE) does not compile.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for `len == 0` or a length the allocator cannot lay out;
    /// - [`Error::Unsupported`] for REMOTE_ATOMIC on a device without atomic operations
    ///   (`atomic_cap` `IBV_ATOMIC_NONE`; every registration refuses it);
    /// - [`Error::Verb`] with `ibv_reg_mr` and its errno (e.g. `ENOMEM` above the locked-memory
    ///   limit, `EINVAL`).
    ///
    /// See ibv_reg_mr(3).
    #[doc(alias = "ibv_reg_mr")]
    pub fn alloc_mr<A: LegalAccess>(&self, len: usize, access: A) -> Result<Mr<A>> {
        let _ = access;
        self.alloc_mr_kind::<A, Pinned>(len, OdpTag::NONE, Backing::Heap)
    }

    /// `ibv_reg_mr` over `len` bytes of new zeroed memory in huge pages (a private
    /// `MAP_HUGETLB` mapping of the system's default huge page size, `len` rounded up to whole
    /// huge pages): fewer translation entries for the device and the CPU over big buffers.
    /// Otherwise the same region as [`Pd::alloc_mr`].
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for `len == 0` or a length that cannot be mapped;
    /// - [`Error::Unsupported`] for REMOTE_ATOMIC on a device without atomic operations;
    /// - [`Error::Verb`] with `ibv_reg_mr` for the mapping (`ENOMEM` when not enough huge pages
    ///   are reserved: `/proc/sys/vm/nr_hugepages`) or the registration, and its errno.
    ///
    /// See ibv_reg_mr(3), mmap(2) (`MAP_HUGETLB`).
    #[doc(alias = "ibv_reg_mr")]
    pub fn alloc_mr_huge<A: LegalAccess>(&self, len: usize, access: A) -> Result<Mr<A>> {
        let _ = access;
        self.alloc_mr_kind::<A, Pinned>(len, OdpTag::NONE, Backing::Huge(0))
    }

    /// `ibv_reg_mr` of new memory with the access bits of `A` and of the kind `K`.
    pub(crate) fn alloc_mr_kind<A: LegalAccess, K: MrKind>(
        &self,
        len: usize,
        odp: OdpTag,
        mut backing: Backing,
    ) -> Result<Mr<A, K>> {
        if len == 0 {
            return Err(Error::invalid("ibv_reg_mr", "a memory region needs at least one byte"));
        }
        // Before the memory is allocated (and mapped): the refusal does not depend on it.
        self.check_atomic_access(Verb::RegMr, A::BITS)?;
        let mem = match backing {
            Backing::Heap => alloc_zeroed(len)?,
            Backing::OdpMemfd => map_odp_memory(len)?,
            Backing::Huge(_) => {
                let (mem, shift) = map_huge(len)?;
                backing = Backing::Huge(shift);
                mem
            }
            Backing::Caller | Backing::Borrowed => {
                return Err(Error::invalid("ibv_reg_mr", "not memory the library allocates"));
            }
        };
        // SAFETY: `mem..mem+len` was allocated above for this kind and length: owned, zeroed,
        // kept at its address until `backing` frees it after deregistration.
        unsafe { self.register_memory(mem, len, odp, backing, None) }.inspect_err(|_| {
            // SAFETY: allocated above for this kind and length, never registered.
            unsafe { free_region_memory(mem, len, backing) };
        })
    }

    /// Refuses REMOTE_ATOMIC in `bits` (registered by `verb`) on a device without atomic
    /// operations ("if supported", ibv_reg_mr(3)).
    pub(crate) fn check_atomic_access(&self, verb: Verb, bits: u32) -> Result<()> {
        self.inner.ctx.check_atomics(verb, bits & sys::IBV_ACCESS_REMOTE_ATOMIC != 0)
    }

    /// `ibv_reg_mr` of `len` bytes at `mem`, with the access bits of `A` and of the kind `K`;
    /// `backing` says how the memory is released once the region is deregistered, and `buffer`
    /// is the caller's buffer that holds it (`Backing::Caller`). On failure nothing is released
    /// (`buffer`, never registered, is dropped).
    ///
    /// # Safety
    /// `len > 0`; `mem..mem + len` is valid for reads and writes, initialised, at most
    /// `isize::MAX` bytes, and stays at its address (mapped, not released, not reached by
    /// anything that conflicts with the references the region hands out: `as_slice`,
    /// `as_mut_slice`) until the region is deregistered successfully, or forever if it never
    /// is; `backing` releases exactly this memory (`Backing::Caller`: dropping `buffer` does,
    /// and `buffer` is `Some`), or nothing (`Backing::Borrowed`).
    pub(crate) unsafe fn register_memory<A: LegalAccess, K: MrKind>(
        &self,
        mem: NonNull<u8>,
        len: usize,
        odp: OdpTag,
        backing: Backing,
        buffer: Option<Box<CallerBuffer>>,
    ) -> Result<Mr<A, K>> {
        let bits = A::BITS | K::EXTRA_ACCESS;
        self.check_atomic_access(Verb::RegMr, bits)?;
        // SAFETY: the PD is alive; `mem..mem+len` is valid memory kept at its address until after
        // deregistration (this function's contract); the access bits obey ibv_reg_mr(3)
        // (`A: LegalAccess`). `ibv_reg_mr` is a macro over this inline helper.
        let mr = unsafe { sys::__ibv_reg_mr(self.as_ptr(), mem.as_ptr().cast(), len, bits, 0) };
        let Some(mr) = NonNull::new(mr) else {
            let err =
                Error::last_os(Verb::RegMr, format!("{len} bytes, access {bits:#x}, device {}", self.inner.ctx.name));
            return Err(err);
        };
        // SAFETY: `mr` is a valid registration returned just now.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Ok(Mr { mr, mem, len, lkey, rkey, odp, backing, buffer, pd: Arc::clone(&self.inner), _access: PhantomData })
    }
}

pub(crate) fn range_of(r: impl RangeBounds<usize>, len: usize, what: &'static str) -> Result<(usize, usize)> {
    let start = match r.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match r.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::invalid(what, format!("range {start}..{end} is outside the region of {len} bytes")));
    }
    Ok((start, end - start))
}

/// `len` as the length of one scatter/gather entry (a `u32`), or the refusal of `what`.
pub(crate) fn sge_len(len: usize, what: &'static str) -> Result<u32> {
    u32::try_from(len).map_err(|_| Error::invalid(what, format!("{len} bytes do not fit one scatter/gather entry")))
}

impl<A: AccessSet, K: MrKind> Mr<A, K> {
    /// The length of the region in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions have at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The start address of the region (for the peer's `remote_addr` when there is no
    /// window; see [`Mr::remote`]).
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_mr {
        self.mr.as_ptr()
    }

    pub(crate) fn raw(&self) -> crate::mw::RawMr {
        crate::mw::RawMr(self.mr)
    }

    pub(crate) fn pd(&self) -> &Arc<PdInner> {
        &self.pd
    }

    pub(crate) fn mem_ptr(&self) -> NonNull<u8> {
        self.mem
    }

    pub(crate) fn backing(&self) -> Backing {
        self.backing
    }

    /// The caller's buffer a region of [`Pd::register`] owns, if this region has one.
    pub(crate) fn caller_buffer(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.buffer.as_deref().map(|buf| &**buf)
    }

    /// `ibv_dereg_mr`, then the caller's buffer a region of [`Pd::register`] owns, handed back
    /// instead of dropped (`None` for other regions, whose memory is released as usual).
    ///
    /// # Errors
    /// As [`Mr::deregister`]: the region is handed back intact.
    pub(crate) fn deregister_into_buffer(self) -> std::result::Result<Option<CallerBuffer>, (Error, Self)> {
        let mut this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the registration is valid and deregistered at most once (`this` is not
        // dropped; on failure it is handed back). `verbs` is libibverbs' for every context the
        // library opens.
        let ret = unsafe { (this.pd.ctx.verbs.dereg_mr)(this.mr.as_ptr()) };
        if ret != 0 {
            let err = Error::from_ret(Verb::DeregMr, format!("region at {:#x}, {} bytes", this.addr(), this.len), ret);
            return Err((err, std::mem::ManuallyDrop::into_inner(this)));
        }
        // The caller's buffer is taken out (nothing left for `free_memory` to release); any
        // other memory is released below.
        let buffer = this.buffer.take().map(|buf| *buf);
        // SAFETY: deregistered, so the device no longer uses the memory; `pd` is dropped once,
        // through an exclusive borrow (`this` is never dropped, and its other fields need no
        // drop: `buffer` is `None` after `free_memory`).
        unsafe {
            this.free_memory();
            std::ptr::drop_in_place(&mut this.pd);
        }
        Ok(buffer)
    }

    /// A view of `range` that the local device may read (a send or RDMA WRITE source).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the range is outside the region or longer than
    /// `u32::MAX` bytes (the length of one scatter/gather entry).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<LocalBuf<'_>> {
        let (off, len) = range_of(range, self.len, "Mr::slice")?;
        Ok(LocalBuf {
            addr: self.addr() + off as u64,
            len: sge_len(len, "Mr::slice")?,
            lkey: self.lkey,
            odp: self.odp,
            pd: self.pd.id(),
            _borrow: PhantomData,
        })
    }

    /// A view of `range` that the local device may write (receive buffer, RDMA READ
    /// destination, atomic result). Needs LOCAL_WRITE.
    ///
    /// # Errors
    /// As for [`Mr::slice`].
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<LocalBufMut<'_>>
    where
        A: HasLocalWrite,
    {
        let (off, len) = range_of(range, self.len, "Mr::slice_mut")?;
        Ok(LocalBufMut {
            addr: self.addr() + off as u64,
            len: sge_len(len, "Mr::slice_mut")?,
            lkey: self.lkey,
            odp: self.odp,
            pd: self.pd.id(),
            _borrow: PhantomData,
        })
    }

    /// The remote view of `range` (address, length, rkey) for a peer, typed by this region's
    /// rights.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the range is outside the region.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteSlice<A>> {
        let (off, len) = range_of(range, self.len, "Mr::remote")?;
        Ok(RemoteSlice { addr: self.addr() + off as u64, len: len as u64, rkey: self.rkey, _access: PhantomData })
    }

    /// Copies `dst.len()` bytes at `offset` out of the region with volatile reads: usable on
    /// every region, including memory a peer may be writing.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the range is outside the region.
    pub fn read_volatile_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let (off, len) = range_of(offset..offset.saturating_add(dst.len()), self.len, "Mr::read_volatile_into")?;
        for (i, d) in dst.iter_mut().enumerate().take(len) {
            // SAFETY: `off + i < self.len`: in bounds of our allocation. Volatile: the device may
            // write this memory concurrently; no reference to it is created.
            *d = unsafe { self.mem.as_ptr().add(off + i).read_volatile() };
        }
        Ok(())
    }

    /// Copies `src` into the region at `offset` with volatile writes.
    ///
    /// Takes `&mut self`: no local work request can be reading the region meanwhile.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the range is outside the region.
    pub fn write_volatile_from(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        let (off, len) = range_of(offset..offset.saturating_add(src.len()), self.len, "Mr::write_volatile_from")?;
        for (i, s) in src.iter().enumerate().take(len) {
            // SAFETY: in bounds; `&mut self` excludes local readers; volatile for peers.
            unsafe { self.mem.as_ptr().add(off + i).write_volatile(*s) };
        }
        Ok(())
    }

    /// The contents as a slice. Only for regions no peer can write ([`PeerCannotWrite`]).
    pub fn as_slice(&self) -> &[u8]
    where
        A: PeerCannotWrite,
    {
        // SAFETY: `mem..mem+len` is our initialised allocation; no peer can write it (the
        // access type), and local device writes only happen through `LocalBufMut`, which
        // borrows `self` mutably, so none is in flight while `&self` is held.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr(), self.len) }
    }

    /// The contents as a mutable slice. Only for regions no peer can write.
    pub fn as_mut_slice(&mut self) -> &mut [u8]
    where
        A: PeerCannotWrite,
    {
        // SAFETY: as for `as_slice`, and `&mut self` excludes every other view.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr(), self.len) }
    }

    /// `ibv_dereg_mr`, reporting failure instead of leaking silently.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_dereg_mr` (e.g. `EBUSY`/`EINVAL` while a memory window is
    /// still bound); the region is returned intact with the error.
    ///
    /// See ibv_reg_mr(3), ibv_dereg_mr.
    #[doc(alias = "ibv_dereg_mr")]
    pub fn deregister(self) -> std::result::Result<(), (Error, Self)> {
        // The caller's buffer of a region of `Pd::register`, if any, is dropped here: the region
        // is deregistered.
        self.deregister_into_buffer().map(drop)
    }

    /// Releases the memory as the region's `Backing` says (for `Backing::Caller`, drops the
    /// caller's buffer, leaving `None`).
    ///
    /// # Safety
    /// The registration must be gone (deregistered), and this is called once.
    unsafe fn free_memory(&mut self) {
        // Dropping the buffer is its one release (`StableBuffer`'s contract).
        drop(self.buffer.take());
        // SAFETY: `mem` and `len` are what `backing` was registered with (`register_memory`'s
        // contract); the caller guarantees single use after deregistration.
        unsafe { free_region_memory(self.mem, self.len, self.backing) };
    }
}

#[cfg(all(test, not(loom)))]
impl<A: AccessSet, K: MrKind> Mr<A, K> {
    /// Test only: a region of `len` bytes of zeroed heap memory over the fake registration
    /// `mr` (an `ibv_mr` inside a zeroed `verbs_mr`-sized allocation, its context the fake
    /// one, whose `dereg_mr` is the fake device's), in `pd`, its views carrying `odp`.
    fn fake_of_kind(pd: &Arc<PdInner>, mr: NonNull<sys::ibv_mr>, len: usize, odp: OdpTag) -> Self {
        let mem = alloc_zeroed(len).expect("test memory");
        // SAFETY: the caller's fake registration, valid for the test.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Mr {
            mr,
            mem,
            len,
            lkey,
            rkey,
            odp,
            backing: Backing::Heap,
            buffer: None,
            pd: Arc::clone(pd),
            _access: PhantomData,
        }
    }
}

#[cfg(all(test, not(loom)))]
impl<A: AccessSet> Mr<A, Pinned> {
    /// Test only: a pinned region over a fake registration ([`Mr::fake_of_kind`]).
    pub(crate) fn fake(pd: &Arc<PdInner>, mr: NonNull<sys::ibv_mr>, len: usize) -> Self {
        Mr::fake_of_kind(pd, mr, len, OdpTag::NONE)
    }
}

#[cfg(all(test, not(loom)))]
impl<A: AccessSet> Mr<A, Pinned> {
    /// Test only: a pinned region over the fake registration `mr` of the caller's buffer
    /// `buffer`, whose memory is `mem..mem + len` (`Backing::Caller`: released by dropping the
    /// buffer, after the fake deregistration).
    pub(crate) fn fake_caller(
        pd: &Arc<PdInner>,
        mr: NonNull<sys::ibv_mr>,
        mem: NonNull<u8>,
        len: usize,
        buffer: Box<CallerBuffer>,
    ) -> Self {
        // SAFETY: the caller's fake registration, valid for the test.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        let (odp, backing, pd) = (OdpTag::NONE, Backing::Caller, Arc::clone(pd));
        Mr { mr, mem, len, lkey, rkey, odp, backing, buffer: Some(buffer), pd, _access: PhantomData }
    }
}

#[cfg(all(test, not(loom)))]
impl<A: AccessSet> Mr<A, Odp> {
    /// Test only: an On-Demand Paging region over a fake registration, whose views carry `odp`
    /// (the tag a capability's registration gives them) ([`Mr::fake_of_kind`]).
    pub(crate) fn fake_odp(pd: &Arc<PdInner>, mr: NonNull<sys::ibv_mr>, len: usize, odp: OdpTag) -> Self {
        Mr::fake_of_kind(pd, mr, len, odp)
    }
}

/// Zeroed, page-aligned heap memory for a pinned region.
fn alloc_zeroed(len: usize) -> Result<NonNull<u8>> {
    let layout = Layout::from_size_align(len, MR_ALIGN)
        .map_err(|_| Error::invalid("ibv_reg_mr", format!("{len} bytes cannot be allocated")))?;
    // SAFETY: the layout has a non-zero size (`alloc_mr_kind` refuses `len == 0`).
    let mem = unsafe { alloc::alloc_zeroed(layout) };
    NonNull::new(mem).ok_or_else(|| {
        Error::verb(
            Verb::RegMr,
            format!("allocating {len} bytes"),
            std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        )
    })
}

/// The system's page size (`sysconf(_SC_PAGESIZE)`).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(MR_ALIGN)
}

/// `len` rounded up to whole pages, or `None` on overflow.
fn mapping_len(len: usize) -> Option<usize> {
    let page = page_size();
    len.checked_add(page - 1).map(|l| l / page * page)
}

/// Memory for an On-Demand Paging region: a shared mapping of a new memfd (shmem), mapped with
/// `MAP_NORESERVE` and `MADV_DONTFORK`. No page exists until the program or the device touches
/// it and no swap is reserved, so a sparse region may exceed the machine's memory. Reads as
/// zeros until written.
///
/// Why shmem and not anonymous private memory: a read fault on an untouched private anonymous
/// page maps the kernel's one shared zero page, and a device whose ODP path writes through the
/// page it found for a read (rxe on the 6.18 backport, DESIGN.md §9, "The test devices") then
/// writes the zero page of the whole machine. A read fault on shmem allocates a page of the
/// region's own. `MADV_DONTFORK`: a child process must not share the region (a shared mapping
/// would let it write memory the types say only this process and the device reach).
fn map_odp_memory(len: usize) -> Result<NonNull<u8>> {
    // At most `isize::MAX` bytes, as `Layout` ensures for pinned regions: `as_slice` makes a
    // slice of the whole region (the kernel refuses such a mapping too; this does not rely on it).
    let map_len = mapping_len(len)
        .filter(|&l| isize::try_from(l).is_ok())
        .ok_or_else(|| Error::invalid("ibv_reg_mr", format!("{len} bytes cannot be mapped")))?;
    let what = |call: &str| format!("{call} for an On-Demand Paging region of {len} bytes");
    let fd = sized_memfd(c"typed-verbs-odp", libc::MFD_CLOEXEC, map_len)
        .map_err(|(step, e)| Error::verb(Verb::RegMr, what(step), e))?;
    // SAFETY: a new shared mapping of our own memfd at an address of the kernel's choosing:
    // no existing memory is affected. The mapping keeps the memory when `fd` closes (on return).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os(Verb::RegMr, what("mmap")));
    }
    let mem =
        NonNull::new(p.cast::<u8>()).ok_or_else(|| Error::invalid("ibv_reg_mr", "mmap returned a null mapping"))?;
    // SAFETY: advice over our own new mapping, whole pages; it changes only what `fork` does.
    if unsafe { libc::madvise(mem.as_ptr().cast(), map_len, libc::MADV_DONTFORK) } != 0 {
        let err = Error::last_os(Verb::Madvise, what("MADV_DONTFORK"));
        // SAFETY: our mapping, never registered or lent.
        unsafe { libc::munmap(mem.as_ptr().cast(), map_len) };
        return Err(err);
    }
    Ok(mem)
}

/// A new memory file (`memfd_create` with `flags`) of `size` bytes, its descriptor owned; or the
/// step that failed and its error.
pub(crate) fn sized_memfd(
    name: &std::ffi::CStr,
    flags: libc::c_uint,
    size: usize,
) -> std::result::Result<OwnedFd, (&'static str, std::io::Error)> {
    let size = libc::off_t::try_from(size)
        .map_err(|_| ("ftruncate", std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
    // SAFETY: a NUL-terminated name; the new descriptor is owned right below.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if raw < 0 {
        return Err(("memfd_create", std::io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a new descriptor nobody else owns; `OwnedFd` closes it once.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: our memfd; sizing it affects nothing else.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(("ftruncate", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// The system's default huge page size (`Hugepagesize` of `/proc/meminfo`), if it has one.
fn huge_page_size() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("Hugepagesize:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024).filter(|&n| n.is_power_of_two())
}

/// `len` rounded up to whole huge pages of 2^`shift` bytes, at most `isize::MAX`, or `None`.
fn huge_mapping_len(len: usize, shift: u8) -> Option<usize> {
    let page = 1usize.checked_shl(u32::from(shift))?;
    len.div_ceil(page).checked_mul(page).filter(|&l| isize::try_from(l).is_ok())
}

/// Zeroed memory in huge pages: a private anonymous `MAP_HUGETLB` mapping of whole default-size
/// huge pages. A read fault on hugetlb memory gets a huge page of its own (there is no shared
/// zero page for it), and a pinned registration faults every page in for writing anyway.
fn map_huge(len: usize) -> Result<(NonNull<u8>, u8)> {
    let page = huge_page_size();
    let shift = page.map_or(0, |p| p.trailing_zeros() as u8);
    let map_len = page.and_then(|_| huge_mapping_len(len, shift)).ok_or_else(|| {
        Error::invalid(
            "ibv_reg_mr",
            format!("{len} bytes cannot be mapped in huge pages (Hugepagesize in /proc/meminfo)"),
        )
    })?;
    // SAFETY: a new private anonymous mapping at an address of the kernel's choosing: no
    // existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            // The page size named explicitly (`MAP_HUGE_SHIFT`): the kernel maps exactly pages
            // of 2^shift bytes or refuses, so the unmap length computed from `shift` matches
            // whatever `/proc/meminfo` said.
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | (i32::from(shift) << libc::MAP_HUGE_SHIFT),
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os(
            Verb::RegMr,
            format!("mmap(MAP_HUGETLB) of {map_len} bytes (huge pages reserved: /proc/sys/vm/nr_hugepages)"),
        ));
    }
    let mem = NonNull::new(p.cast()).ok_or_else(|| Error::invalid("ibv_reg_mr", "mmap returned a null mapping"))?;
    Ok((mem, shift))
}

/// Frees the memory of a region of `len` bytes allocated by `alloc_mr_kind`; nothing for the
/// memory of a caller's buffer (dropping the buffer releases it) or memory the region does not
/// own.
///
/// # Safety
/// `mem` was returned for `len` by the allocator `backing` names ([`alloc_zeroed`],
/// [`map_odp_memory`], or [`map_huge`] with the page shift it returned), is no longer
/// registered, and is freed once.
unsafe fn free_region_memory(mem: NonNull<u8>, len: usize, backing: Backing) {
    // The mapping functions succeeded for this length, so the roundings cannot fail now.
    let unmap = |map_len: Option<usize>| {
        // SAFETY: the caller's contract: our own mapping of this length, used by nobody now. A
        // failure (impossible for a whole mapping of ours) would leave it mapped: a leak.
        let _ = unsafe { libc::munmap(mem.as_ptr().cast(), map_len.unwrap_or(len)) };
    };
    match backing {
        Backing::OdpMemfd => unmap(mapping_len(len)),
        Backing::Huge(shift) => unmap(huge_mapping_len(len, shift)),
        Backing::Heap => {
            // SAFETY: the layout was valid at allocation (same size and alignment).
            let layout = unsafe { Layout::from_size_align_unchecked(len, MR_ALIGN) };
            // SAFETY: allocated with this layout by `alloc_zeroed`; the caller's contract.
            unsafe { alloc::dealloc(mem.as_ptr(), layout) };
        }
        Backing::Caller | Backing::Borrowed => {}
    }
}

impl<A: AccessSet, K: MrKind> Drop for Mr<A, K> {
    fn drop(&mut self) {
        // SAFETY: the registration is valid and is deregistered exactly once, here (`verbs`:
        // libibverbs' for every context the library opens).
        let ret = unsafe { (self.pd.ctx.verbs.dereg_mr)(self.mr.as_ptr()) };
        if ret == 0 {
            // SAFETY: deregistered just now; freed once.
            unsafe { self.free_memory() };
            return;
        }
        // On failure the memory stays allocated: the device may still reach it, and freeing
        // it would hand it back to the allocator under the device. `deregister()` reports it.
        // The caller's buffer is leaked with the registration (the field would otherwise be
        // dropped right after this function).
        std::mem::forget(self.buffer.take());
        if self.backing == Backing::Borrowed {
            // Memory the region does not own: its owner releases it once the region is gone, so
            // the region must not be gone while the device can still reach the memory.
            abort_on_failed_deregistration(&Error::from_ret(
                Verb::DeregMr,
                format!("region at {:#x}, {} bytes", self.addr(), self.len),
                ret,
            ));
        }
    }
}

/// A region over memory it does not own (borrowed, or raw under the caller's contract) could not
/// be deregistered: the memory's owner is about to release it while the device may still reach
/// it (e.g. through a memory window leaked with `mem::forget`), so the process cannot go on.
/// Prints the error to stderr and aborts ([`abort_process`](crate::error::abort_process): even
/// when stderr cannot be written, nothing unwinds out of here).
fn abort_on_failed_deregistration(err: &Error) -> ! {
    crate::error::abort_process(|| {
        format!(
            "{err}: the region is over memory the library does not own (a borrowed slice or raw memory), \
             which its owner may release now while the device can still reach it; aborting"
        )
    })
}

/// Memory of a registered region that the local device may read: a send or RDMA WRITE source.
/// A shared borrow of the region for `'a`.
#[derive(Clone, Copy)]
pub struct LocalBuf<'a> {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) lkey: u32,
    pub(crate) odp: OdpTag,
    /// The PD of the region: a work request may only use it on a QP of the same PD.
    pub(crate) pd: PdId,
    _borrow: PhantomData<&'a [u8]>,
}

/// Memory of a registered region that the local device may write: a receive buffer, an RDMA
/// READ destination, an atomic result. An exclusive borrow of a LOCAL_WRITE region for `'a`.
pub struct LocalBufMut<'a> {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) lkey: u32,
    pub(crate) odp: OdpTag,
    /// The PD of the region.
    pub(crate) pd: PdId,
    _borrow: PhantomData<&'a mut [u8]>,
}

macro_rules! buf_common {
    ($t:ident) => {
        impl $t<'_> {
            /// The length in bytes.
            pub fn len(&self) -> usize {
                self.len as usize
            }
            /// True if the view has no bytes.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
            /// The address of the first byte.
            pub fn addr(&self) -> u64 {
                self.addr
            }
            /// The local key of the region.
            pub fn lkey(&self) -> u32 {
                self.lkey
            }
            pub(crate) fn sge(&self) -> sys::ibv_sge {
                sys::ibv_sge { addr: self.addr, length: self.len, lkey: self.lkey }
            }
        }
        impl fmt::Debug for $t<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("addr", &format_args!("{:#x}", self.addr))
                    .field("len", &self.len)
                    .field("lkey", &format_args!("{:#x}", self.lkey))
                    .finish()
            }
        }
    };
}
buf_common!(LocalBuf);
buf_common!(LocalBufMut);

impl<'a> LocalBuf<'a> {
    /// A view of memory the caller guarantees to be registered under `lkey` and valid for 'a.
    pub(crate) fn from_parts(addr: u64, len: u32, lkey: u32, odp: OdpTag, pd: PdId) -> Self {
        LocalBuf { addr, len, lkey, odp, pd, _borrow: PhantomData }
    }
}

impl<'a> LocalBufMut<'a> {
    /// As [`LocalBuf::from_parts`], exclusive.
    pub(crate) fn from_parts(addr: u64, len: u32, lkey: u32, odp: OdpTag, pd: PdId) -> Self {
        LocalBufMut { addr, len, lkey, odp, pd, _borrow: PhantomData }
    }

    /// Splits the view in two at `mid`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `mid > len`.
    pub fn split_at(self, mid: usize) -> Result<(LocalBufMut<'a>, LocalBufMut<'a>)> {
        let mid = u32::try_from(mid).ok().filter(|&m| m <= self.len).ok_or_else(|| {
            Error::invalid("LocalBufMut::split_at", format!("{mid} is beyond the view's {} bytes", self.len))
        })?;
        let tail = LocalBufMut {
            addr: self.addr + u64::from(mid),
            len: self.len - mid,
            lkey: self.lkey,
            odp: self.odp,
            pd: self.pd,
            _borrow: PhantomData,
        };
        Ok((LocalBufMut { len: mid, ..self }, tail))
    }

    /// A read-only view borrowed from this one, for as long as `self` is borrowed.
    ///
    /// A [scope](crate::scope) takes it only when `self` is borrowed for the whole scope (a
    /// `LocalBufMut` declared outside the scope's closure): a post needs memory borrowed until
    /// the scope ends, and this view lives only as long as the borrow of `self`, which then
    /// lasts as long. To send what was received, post the view itself (`wr::Send::new(buf)`: a `LocalBufMut` is also memory the
    /// device may read), or turn it into a [`LocalBuf`] of the same lifetime with
    /// [`LocalBufMut::into_local`].
    pub fn as_local(&self) -> LocalBuf<'_> {
        LocalBuf { addr: self.addr, len: self.len, lkey: self.lkey, odp: self.odp, pd: self.pd, _borrow: PhantomData }
    }

    /// The view as read-only device memory for the rest of its borrow `'a` (e.g. to send what
    /// was received, possibly several times at once: a [`LocalBuf`] is `Copy`). The device may
    /// no longer write it through this view: the exclusive borrow becomes a shared one.
    pub fn into_local(self) -> LocalBuf<'a> {
        LocalBuf { addr: self.addr, len: self.len, lkey: self.lkey, odp: self.odp, pd: self.pd, _borrow: PhantomData }
    }

    /// Copies the bytes out with volatile reads (at most `dst.len()` and the view's length).
    pub fn read_volatile_into(&self, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate().take(self.len as usize) {
            // SAFETY: `i < len`; the view lies in a live region (borrowed for 'a); volatile
            // because the region may be peer-writable.
            *d = unsafe { (self.addr as *const u8).add(i).read_volatile() };
        }
    }

    /// Copies `src` into the view with volatile writes (at most `src.len()` and the view's
    /// length), e.g. to fill a send source again once [`Scope::wait`](crate::scope::Scope::wait)
    /// handed it back.
    ///
    /// Takes `&mut self`: a view posted in a work request has moved into its token, so no
    /// request of this program reads or writes the memory meanwhile.
    pub fn write_volatile_from(&mut self, src: &[u8]) {
        for (i, s) in src.iter().enumerate().take(self.len as usize) {
            // SAFETY: `i < len`; the view lies in a live region, exclusively borrowed for 'a, and
            // `&mut self` means it is not in a posted request; volatile because the region may
            // be peer-writable.
            unsafe { (self.addr as *mut u8).add(i).write_volatile(*s) };
        }
    }
}

impl<'a> From<LocalBufMut<'a>> for LocalBuf<'a> {
    /// [`LocalBufMut::into_local`].
    fn from(buf: LocalBufMut<'a>) -> Self {
        buf.into_local()
    }
}

// `LocalBuf` and `LocalBufMut` are `Send + Sync` automatically, like `&[u8]` and `&mut [u8]`:
// they hold integers and a `PhantomData` borrow, no pointer. (An `unsafe impl` here would keep
// them so even if a raw pointer field were added.)

/// A remote region as a peer names it: address, length and rkey, typed by the access rights
/// `A` of the region (or window) the rkey belongs to.
///
/// Obtained from a local region with [`Mr::remote`], or built from what a peer sent with
/// [`RemoteSlice::from_wire`], where the caller states the rights the peer granted. A wrong
/// claim cannot corrupt local memory: the remote device checks the rkey and the access fails
/// with a remote access error completion.
pub struct RemoteSlice<A> {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) rkey: u32,
    _access: PhantomData<fn() -> A>,
}

impl<A> Clone for RemoteSlice<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for RemoteSlice<A> {}

impl<A> fmt::Debug for RemoteSlice<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteSlice")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .finish()
    }
}

impl<A> RemoteSlice<A> {
    /// A remote region (or window) described by a peer: `addr`, `len` and `rkey` as it sent
    /// them; `A` states the rights it granted (and, for windows, whether addresses are
    /// offsets from a zero-based window).
    pub fn from_wire(addr: u64, len: u64, rkey: u32) -> Self
    where
        // On the function, not the impl: a set no region can have is then reported with the
        // rule it breaks (`LegalAccess`), not as a missing function.
        A: RemoteRights,
    {
        RemoteSlice { addr, len, rkey, _access: PhantomData }
    }

    pub(crate) fn new(addr: u64, len: u64, rkey: u32) -> Self {
        RemoteSlice { addr, len, rkey, _access: PhantomData }
    }
}

impl<A> RemoteSlice<A> {
    /// The remote address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// The length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True if the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The sub-range `offset..offset + len`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it does not lie inside this region, or if its address does
    /// not fit in 64 bits (a region [`from_wire`](RemoteSlice::from_wire) that ends past
    /// `u64::MAX`).
    pub fn slice(&self, offset: u64, len: u64) -> Result<Self> {
        match (offset.checked_add(len), self.addr.checked_add(offset)) {
            (Some(end), Some(addr)) if end <= self.len => Ok(RemoteSlice { addr, len, ..*self }),
            _ => Err(Error::invalid(
                "RemoteSlice::slice",
                format!("{offset}+{len} is outside the remote region of {} bytes at {:#x}", self.len, self.addr),
            )),
        }
    }
}

/// A piece of a registered region that owns its share of the region: the owned counterpart of
/// [`LocalBuf`]/[`LocalBufMut`], for buffers that move into work requests and come back with
/// their completion (see [`Qp::post_send_owned`](crate::qp::Qp::post_send_owned)).
///
/// Made by [`Mr::into_chunks`]; the chunks of one region are disjoint, and the region is
/// deregistered and freed when the last chunk is dropped. Leaking a chunk (or the token that
/// holds it) leaks the region; it is never freed while a chunk exists.
pub struct Chunk<A: AccessSet, K: MrKind = Pinned> {
    mr: Arc<Mr<A, K>>,
    offset: usize,
    len: u32,
}

impl<A: AccessSet, K: MrKind> fmt::Debug for Chunk<A, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.mr.lkey))
            .finish()
    }
}

impl<A: AccessSet, K: MrKind> Mr<A, K> {
    /// Splits the region into owned chunks of `chunk_len` bytes (the last one may be shorter).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `chunk_len` is 0 or above `u32::MAX` (one scatter/gather
    /// entry), or if the list of chunks cannot be allocated (a large region, a sparse ODP one
    /// above all, in chunks too small); the region is dropped in that case.
    pub fn into_chunks(self, chunk_len: usize) -> Result<Vec<Chunk<A, K>>> {
        if chunk_len == 0 || u32::try_from(chunk_len).is_err() {
            return Err(Error::invalid("Mr::into_chunks", format!("chunk length {chunk_len} is not in 1..=u32::MAX")));
        }
        let len = self.len;
        let count = len.div_ceil(chunk_len);
        let mut chunks = Vec::new();
        // Reserved fallibly: an allocation failure would abort the process.
        if chunks.try_reserve_exact(count).is_err() {
            return Err(Error::invalid(
                "Mr::into_chunks",
                format!("{count} chunks of {chunk_len} bytes: their list cannot be allocated"),
            ));
        }
        let mr = Arc::new(self);
        chunks.extend((0..len).step_by(chunk_len).map(|offset| Chunk {
            mr: Arc::clone(&mr),
            offset,
            len: (len - offset).min(chunk_len) as u32,
        }));
        Ok(chunks)
    }
}

impl<A: AccessSet, K: MrKind> Chunk<A, K> {
    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True if the chunk has no bytes (never: chunks have at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The address of the first byte.
    pub fn addr(&self) -> u64 {
        self.mr.addr() + self.offset as u64
    }
    /// The local key of the region.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }

    /// The bytes, for chunks of regions no peer can write.
    pub fn as_slice(&self) -> &[u8]
    where
        A: PeerCannotWrite,
    {
        // SAFETY: the chunk's range lies in the region's initialised allocation, kept alive by
        // the Arc; chunks are disjoint and a chunk in flight is owned by its token, so no work
        // request writes this range while `&self` is held; no peer can write it (`A`).
        unsafe { std::slice::from_raw_parts(self.mr.mem.as_ptr().add(self.offset), self.len as usize) }
    }

    /// The bytes, mutably, for chunks of regions no peer can write.
    pub fn as_mut_slice(&mut self) -> &mut [u8]
    where
        A: PeerCannotWrite,
    {
        // SAFETY: as for `as_slice`, and `&mut self` makes the access exclusive (chunks are
        // disjoint, so no other chunk aliases this range).
        unsafe { std::slice::from_raw_parts_mut(self.mr.mem.as_ptr().add(self.offset), self.len as usize) }
    }

    /// Copies the bytes out with volatile reads (any region).
    pub fn read_volatile_into(&self, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate().take(self.len as usize) {
            // SAFETY: `offset + i` is inside the region's allocation, kept alive by the Arc.
            *d = unsafe { self.mr.mem.as_ptr().add(self.offset + i).read_volatile() };
        }
    }

    /// Copies `src` in with volatile writes (any region); `&mut self`: not in flight.
    pub fn write_volatile_from(&mut self, src: &[u8]) {
        for (i, s) in src.iter().enumerate().take(self.len as usize) {
            // SAFETY: in bounds; exclusive (`&mut self`, disjoint chunks); volatile for peers.
            unsafe { self.mr.mem.as_ptr().add(self.offset + i).write_volatile(*s) };
        }
    }

    /// The remote view of the chunk, typed by the region's rights.
    pub fn remote(&self) -> RemoteSlice<A> {
        RemoteSlice::new(self.addr(), u64::from(self.len), self.mr.rkey)
    }
}

pub(crate) mod local_sealed {
    sealed_trait!();
}

/// Memory the local device may read for a work request (a send or RDMA WRITE source):
/// [`LocalBuf`], [`LocalBufMut`], [`Chunk`], and the device views of dma-buf regions
/// ([`DeviceBuf`](crate::dmabuf::DeviceBuf), [`DeviceBufMut`](crate::dmabuf::DeviceBufMut)).
/// One entry of a [scatter/gather list](crate::sgl). Sealed.
pub trait LocalSource: local_sealed::Sealed + crate::scope::Completes {
    /// The scatter/gather entry naming the memory.
    #[doc(hidden)]
    fn sge(&self) -> sys::ibv_sge;
    /// The ODP verification of the memory's region.
    #[doc(hidden)]
    fn odp_tag(&self) -> OdpTag {
        OdpTag::NONE
    }
    /// The PD of the memory's region.
    #[doc(hidden)]
    fn pd_id(&self) -> PdId;
}

/// Memory the local device may write for a work request (a receive buffer, an RDMA READ
/// destination, an atomic result): [`LocalBufMut`], a [`Chunk`] of a region with
/// LOCAL_WRITE, or a [`DeviceBufMut`](crate::dmabuf::DeviceBufMut). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not memory the device may write",
    label = "needs a `LocalBufMut` (from `Mr::slice_mut`) or a `Chunk` of a region with LOCAL_WRITE",
    note = "a receive buffer, an RDMA READ destination and an atomic result are written by the local device (ibv_reg_mr(3): IBV_ACCESS_LOCAL_WRITE)",
    note = "an atomic's result is exactly one 8-byte entry, the 64-bit value the atomic returns: one view or chunk, never a scatter list"
)]
pub trait LocalSink: LocalSource {}

impl local_sealed::Sealed for LocalBuf<'_> {}
impl local_sealed::Sealed for LocalBufMut<'_> {}
impl<A: AccessSet, K: MrKind> local_sealed::Sealed for Chunk<A, K> {}

impl LocalSource for LocalBuf<'_> {
    fn sge(&self) -> sys::ibv_sge {
        LocalBuf::sge(self)
    }
    fn odp_tag(&self) -> OdpTag {
        self.odp
    }
    fn pd_id(&self) -> PdId {
        self.pd
    }
}
impl LocalSource for LocalBufMut<'_> {
    fn sge(&self) -> sys::ibv_sge {
        LocalBufMut::sge(self)
    }
    fn odp_tag(&self) -> OdpTag {
        self.odp
    }
    fn pd_id(&self) -> PdId {
        self.pd
    }
}
impl<A: AccessSet, K: MrKind> LocalSource for Chunk<A, K> {
    fn sge(&self) -> sys::ibv_sge {
        sys::ibv_sge { addr: self.addr(), length: self.len, lkey: self.mr.lkey }
    }
    fn odp_tag(&self) -> OdpTag {
        self.mr.odp
    }
    fn pd_id(&self) -> PdId {
        self.mr.pd.id()
    }
}
impl LocalSink for LocalBufMut<'_> {}
impl<A: HasLocalWrite, K: MrKind> LocalSink for Chunk<A, K> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::assert_refused;

    /// `range_of`, the bound of every view and of the volatile copies (whose `unsafe` reads
    /// and writes rely on it): ranges that end at the region's end are taken, ranges that end
    /// past it, run backwards or whose bounds saturate are refused.
    #[test]
    fn ranges_of_a_region_stay_inside_it() {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let len = 64;
        let ok = |r: (Bound<usize>, Bound<usize>)| range_of(r, len, "t").ok();
        assert_eq!(range_of(.., len, "t").ok(), Some((0, 64)));
        assert_eq!(range_of(..=63, len, "t").ok(), Some((0, 64)));
        assert_eq!(range_of(64..64, len, "t").ok(), Some((64, 0)), "an empty range at the end");
        assert_eq!(range_of(10..20, len, "t").ok(), Some((10, 10)));
        assert_eq!(ok((Excluded(9), Included(19))), Some((10, 10)));
        for refused in [
            range_of(..65, len, "t"),
            range_of(..=64, len, "t"),
            range_of(65..65, len, "t"),
            #[allow(clippy::reversed_empty_ranges)]
            range_of(5..4, len, "t"),
            range_of(..=usize::MAX, len, "t"),
            range_of((Excluded(usize::MAX), Unbounded), len, "t"),
            range_of(usize::MAX - 1..usize::MAX, len, "t"),
        ] {
            assert_refused(refused, "t", "is outside the region of");
        }
        // The volatile copies' form: an offset whose end would overflow saturates, and is refused.
        let r = range_of(usize::MAX - 3..(usize::MAX - 3).saturating_add(8), len, "t");
        assert_refused(r, "t", "is outside the region of");
    }

    #[test]
    fn a_remote_slice_whose_address_would_wrap_is_refused() {
        let r = RemoteSlice::<crate::access::RemoteRw>::from_wire(u64::MAX - 3, 16, 7);
        // The address u64::MAX - 3 + 8 does not fit in 64 bits.
        assert_refused(r.slice(8, 8), "RemoteSlice::slice", "is outside the remote region of");
        let s = r.slice(2, 14).expect("u64::MAX - 1 fits");
        assert_eq!((s.addr(), s.len(), s.rkey()), (u64::MAX - 1, 14, 7));
        assert!(r.slice(0, 17).is_err(), "past the region's length");
    }

    /// The packed ODP tag gives back what it was made of, for every transport number (an
    /// `IBV_QPT_*`, below 256, and up to the 31 bits the tag keeps) and operation set, and
    /// pinned memory's tag is `None`.
    #[test]
    fn odp_tags_pack_and_unpack() {
        assert_eq!(OdpTag::NONE.get(), None);
        assert_eq!(OdpTag::default().get(), None);
        for t in [0, 1, 2, 3, 4, 8, 9, 10, 0xff, 0x7fff_ffff] {
            for ops in [0, 1, 0x3f, OdpTag::PAGE_STARTS, u32::MAX] {
                assert_eq!(OdpTag::of(Some((t, ops))).get(), Some((t, ops)), "({t}, {ops:#x})");
            }
            let v = OdpTag::verified(t, 0x5, true);
            assert_eq!(v.get(), Some((t, 0x5 | OdpTag::PAGE_STARTS)));
            assert_ne!(v, OdpTag::NONE);
        }
    }

    /// The ODP mapping's lengths: whole pages, no overflow, and never more than `isize::MAX`
    /// bytes (which `as_slice`'s `from_raw_parts` needs; `Layout` ensures it for pinned
    /// regions, the kernel's `mmap` for mapped ones).
    #[test]
    fn odp_mappings_are_whole_pages_and_never_beyond_isize_max() {
        let page = page_size();
        assert_eq!(mapping_len(1), Some(page));
        assert_eq!(mapping_len(page), Some(page));
        assert_eq!(mapping_len(page + 1), Some(2 * page));
        assert_eq!(mapping_len(usize::MAX), None, "rounding up overflows: refused");
        assert!(map_odp_memory(usize::MAX).is_err());
        // A slice of it could not exist: refused before mmap.
        assert_refused(map_odp_memory(isize::MAX as usize + 1), "ibv_reg_mr", "bytes cannot be mapped");
        // A length that is not a page multiple maps and unmaps whole pages.
        let mem = map_odp_memory(page + 100).expect("mmap of a page and a bit");
        // SAFETY: `mem` was mapped just now for this length, is registered nowhere and is
        // freed once.
        unsafe { free_region_memory(mem, page + 100, Backing::OdpMemfd) };
    }

    /// A view's volatile copies stay inside the view: at most its length, in and out.
    #[test]
    fn view_copies_stay_inside_the_view() {
        let mut mem = [0u8; 12];
        let base = mem.as_mut_ptr() as u64;
        {
            let view = LocalBufMut::from_parts(base, 12, 0, OdpTag::default(), PdId::dummy());
            let (mut head, _tail) = view.split_at(8).expect("8 <= 12");
            head.write_volatile_from(b"hello, world");
            let mut out = [0u8; 10];
            head.read_volatile_into(&mut out);
            assert_eq!(&out, b"hello, w\0\0");
            head.write_volatile_from(b"HE");
            let shared = head.into_local();
            assert_eq!((shared.addr(), shared.len()), (base, 8));
        }
        assert_eq!(&mem, b"HEllo, w\0\0\0\0");
    }
}
