//! Memory windows: `ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw`, and the bound state.
//!
//! A window exposes part of a registered region to peers under its own rkey, with its own
//! rights, and can be revoked without deregistering the region.
//!
//! - [`Mw<Type1>`] is bound with `ibv_bind_mw` ([`Scope::bind_mw`](crate::scope::Scope::bind_mw))
//!   and unbound by a zero-length bind ([`Scope::unbind_mw`](crate::scope::Scope::unbind_mw)) or
//!   deallocation; a bound one may be bound again, to another range, without an unbind
//!   ([`Scope::rebind_mw`](crate::scope::Scope::rebind_mw)). It cannot be zero-based nor invalidated by LOCAL_INV / SEND_WITH_INV
//!   (IBTA o10-36.2.2, o10-37.2.26).
//! - [`Mw<Type2>`] is bound with a BIND_MW work request ([`BindMw`](crate::wr::BindMw)) and
//!   invalidated by LOCAL_INV ([`LocalInv`](crate::wr::LocalInv)), by a peer's SEND_WITH_INV
//!   ([`BoundMw::invalidated_by`]) or deallocation. It must be unbound before it is bound
//!   again (o10-37.2.30).
//!
//! A bind is a work request: it completes later, and may fail. The new rkey exists only on a
//! [`BoundMw`], which only a successful bind completion produces; ibv_bind_mw(3) NOTES allow the
//! rkey to travel before that only "using a send request on the same QP", which is
//! [`Scope::advertise_window`](crate::scope::Scope::advertise_window). A failed bind hands the
//! window back as it was (unbound, or for a rebind bound to its old range), with its previous
//! rkey restored; a window whose bind failed after it may have run (any error but
//! `IBV_WC_MW_BIND_ERR`) is deallocated instead, and a new window of its PD handed back, so that
//! no window the device may hold bound to the region outlives the region's borrow, and no later
//! bind gives again the rkey the device may hold. A
//! [`BoundMw`] borrows its region, so the
//! region cannot be dropped (deregistered) while a window is bound to it (ibv_reg_mr(3):
//! "ibv_dereg_mr() fails if any memory window is still bound to this MR").
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use typed_verbs_sys as sys;

use crate::access::{RemoteRights, WindowRights};
use crate::error::{Error, Result, Verb};
use crate::mr::RemoteSlice;
use crate::pd::{Pd, PdInner};
use crate::qp::QpShared;
use crate::wc::Completion;

mod sealed {
    sealed_trait!();
}

/// A memory window type. Sealed; implemented by [`Type1`] and [`Type2`].
pub trait MwType: sealed::Sealed + Send + Sync + 'static {
    /// `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2`.
    const RAW: sys::ibv_mw_type;
    /// The name used in messages.
    const NAME: &'static str;
}

/// Type 1 memory windows: bound with `ibv_bind_mw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Type1;
/// Type 2 memory windows: bound with a BIND_MW work request, to one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Type2;

impl sealed::Sealed for Type1 {}
impl sealed::Sealed for Type2 {}
impl MwType for Type1 {
    const RAW: sys::ibv_mw_type = sys::IBV_MW_TYPE_1;
    const NAME: &'static str = "type 1";
}
impl MwType for Type2 {
    const RAW: sys::ibv_mw_type = sys::IBV_MW_TYPE_2;
    const NAME: &'static str = "type 2";
}

/// Window types bound with `ibv_bind_mw`.
#[diagnostic::on_unimplemented(
    message = "a {Self} memory window is not bound with ibv_bind_mw",
    label = "use a BIND_MW work request (`BindMw`) for type 2 windows",
    note = "ibv_bind_mw(3): \"Note that for type 2 MW, one should directly post bind WR to the QP, using ibv_post_send.\""
)]
pub trait BoundByVerb: MwType {}
impl BoundByVerb for Type1 {}

/// Window types unbound with a zero-length `ibv_bind_mw` ([`Scope::unbind_mw`](crate::scope::Scope::unbind_mw)):
/// type 1. A type 2 window is invalidated instead (LOCAL_INV, or the peer's SEND_WITH_INV).
#[diagnostic::on_unimplemented(
    message = "a {Self} memory window is not unbound with ibv_bind_mw",
    label = "invalidate type 2 windows with a LOCAL_INV work request (`LocalInv::new`), or drop them",
    note = "ibv_bind_mw(3) binds (and, with a zero length, unbinds) type 1 windows; IBTA o10-37.2.26: type 2 windows are invalidated by LOCAL_INV / SEND_WITH_INV"
)]
pub trait UnboundByVerb: MwType {}
impl UnboundByVerb for Type1 {}

/// Window types bound with a BIND_MW work request.
#[diagnostic::on_unimplemented(
    message = "a {Self} memory window is not bound with a BIND_MW work request",
    label = "bind type 1 windows with ibv_bind_mw (`Scope::bind_mw`)",
    note = "ibv_bind_mw(3): ibv_bind_mw binds type 1 windows; type 2 windows are bound by posting IBV_WR_BIND_MW"
)]
pub trait BoundByWr: MwType {}
impl BoundByWr for Type2 {}

/// Window types that LOCAL_INV and SEND_WITH_INV can invalidate.
#[diagnostic::on_unimplemented(
    message = "a {Self} memory window cannot be invalidated by LOCAL_INV or SEND_WITH_INV",
    label = "unbind type 1 windows with a zero-length bind (`Scope::unbind_mw`) or drop them",
    note = "IBTA o10-37.2.26: only type 2 windows are invalidated by LOCAL_INV / SEND_WITH_INV"
)]
pub trait Invalidatable: MwType {}
impl Invalidatable for Type2 {}

/// An unbound memory window, what a bind request takes: an [`Mw`]. A bound window
/// ([`BoundMw`]) is not one: a type 2 window is invalidated before it is bound again
/// (IBTA o10-37.2.30). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an unbound memory window: a window bind takes an unbound `Mw`",
    label = "not an unbound window",
    note = "IBTA o10-37.2.30: a type 2 window must be invalidated before it is bound again: post `wr::LocalInv::new` for the bound window (or let the peer's SEND_WITH_INV invalidate it); its successful completion hands the `Mw` back",
    note = "a bound type 1 window is bound again with `Scope::rebind_mw`"
)]
pub trait UnboundWindow: unbound_sealed::Sealed {
    /// The window's type.
    type Kind: MwType;
    /// The window.
    #[doc(hidden)]
    fn into_unbound(self) -> Mw<Self::Kind>;
}

mod unbound_sealed {
    sealed_trait!();
}

impl<K: MwType> unbound_sealed::Sealed for Mw<K> {}
impl<K: MwType> UnboundWindow for Mw<K> {
    type Kind = K;
    #[inline(always)]
    fn into_unbound(self) -> Mw<K> {
        self
    }
}

pub(crate) struct MwInner {
    mw: NonNull<sys::ibv_mw>,
    pd: Arc<PdInner>,
    /// A type 2 bind of the window completed with an error after it may have run (a flushed
    /// queue: rxe executes a BIND_MW without waiting for the requests ahead of it, and its flush
    /// reports it failed all the same), and no new window could be allocated in its place
    /// (`PendingBind::finish` deallocates such a window otherwise): the window may be bound on
    /// the device though it is typed unbound, so it is not bound again (IBTA o10-37.2.30), only
    /// deallocated. Written only while the window is owned by value (`PendingBind::finish`).
    maybe_bound: bool,
}

// SAFETY: windows may be used from any thread (libibverbs is thread-safe); the only field we
// write after creation (`rkey`, to undo a failed bind) is written while we own the window by
// value.
unsafe impl Send for MwInner {}
// SAFETY: `&MwInner` only reads.
unsafe impl Sync for MwInner {}

/// The QPs type 2 binds went through, by window (`ibv_mw` address), since the window was last
/// certainly unbound. The device's window keeps its QP (rxe: `mw->qp`, a reference the QP's
/// destroy waits 50 s for, then frees the QP regardless, and the window's deallocation drops
/// it again), so they are destroyed only after the window is deallocated or certainly unbound
/// ([`MwInner::release_qps`]). Out of the window itself, which moves by value through every
/// request and result that holds it; an entry lives only while its window is allocated, so
/// an address names one window.
static HELD: Mutex<Option<HashMap<usize, Vec<Arc<QpShared>>>>> = Mutex::new(None);

impl MwInner {
    /// A type 2 bind through `qp` is posted (or may have been): the window keeps the QP.
    pub(crate) fn hold(&self, qp: &QpShared) {
        with_map(&HELD, |held| {
            let qps = held.entry(self.mw.as_ptr() as usize).or_default();
            if !qps.iter().any(|q| std::ptr::eq(&**q, qp)) {
                // `qp` is borrowed from a handle, so it upgrades.
                qps.extend(qp.arc());
            }
        });
    }

    /// The window is certainly unbound (an invalidation completed successfully) or
    /// deallocated: the device keeps none of the QPs now. They are let go of outside the lock
    /// (a QP's destroy can release parked windows, which come here).
    fn release_qps(&self) {
        let qps = with_map(&HELD, |held| held.remove(&(self.mw.as_ptr() as usize)));
        drop(qps);
    }
}

impl Drop for MwInner {
    fn drop(&mut self) {
        // SAFETY: the window is valid (deallocated only below); `rkey` is a plain field.
        let rkey = unsafe { (*self.mw.as_ptr()).rkey };
        // SAFETY: the window is valid and deallocated once. Deallocation invalidates it; a bind
        // or invalidation in flight holds the window by value in its token, so none is pending.
        let ret = unsafe { sys::ibv_dealloc_mw(self.mw.as_ptr()) };
        // Only a deallocated window lets go of its QPs; a failed deallocation cannot be acted
        // on in drop, and may leave the window bound to one: they are leaked with it.
        if ret == 0 {
            self.release_qps();
            forget_orphaned_claims(self.pd.ctx.tag, rkey);
        }
    }
}

/// An unbound memory window of type `K`: `struct ibv_mw`. Deallocated on drop.
pub struct Mw<K: MwType> {
    pub(crate) inner: MwInner,
    _type: PhantomData<K>,
}

impl<K: MwType> fmt::Debug for Mw<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mw").field("type", &K::NAME).field("rkey", &format_args!("{:#x}", self.raw_rkey())).finish()
    }
}

impl Pd {
    /// `ibv_alloc_mw`: a new, unbound memory window of type `K` ([`Type1`] or [`Type2`]).
    ///
    /// # Errors
    /// - [`Error::Unsupported`] when the device does not report the window type
    ///   (`IBV_DEVICE_MEM_WINDOW`, `IBV_DEVICE_MEM_WINDOW_TYPE_2A`/`_2B`);
    /// - [`Error::Verb`] with `ibv_alloc_mw` and its errno.
    ///
    /// See ibv_alloc_mw(3).
    #[doc(alias = "ibv_alloc_mw")]
    pub fn alloc_mw<K: MwType>(&self) -> Result<Mw<K>> {
        let flags = self.inner.ctx.attr().device_cap_flags();
        let supported = match K::RAW {
            sys::IBV_MW_TYPE_1 => flags & sys::IBV_DEVICE_MEM_WINDOW != 0,
            _ => flags & (sys::IBV_DEVICE_MEM_WINDOW_TYPE_2A | sys::IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0,
        };
        if !supported {
            return Err(Error::Unsupported {
                verb: Verb::AllocMw,
                what: format!("{} memory windows", K::NAME),
                source: None,
            });
        }
        // SAFETY: the PD is alive; the type is a valid `ibv_mw_type`.
        let mw = unsafe { sys::ibv_alloc_mw(self.as_ptr(), K::RAW) };
        let mw = NonNull::new(mw).ok_or_else(|| Error::last_os(Verb::AllocMw, format!("{} window", K::NAME)))?;
        Ok(Mw { inner: MwInner { mw, pd: Arc::clone(&self.inner), maybe_bound: false }, _type: PhantomData })
    }
}

impl<K: MwType> Mw<K> {
    /// The rkey the window has now. It grants nothing while the window is unbound; it becomes
    /// stale when the window is bound (the bind gives a new one).
    ///
    /// A type 2 window's next rkey can be computed from it (`ibv_inc_rkey`), but it must not
    /// reach the peer before the bind completed successfully (ibv_bind_mw(3) NOTES): the
    /// library gives it out only as [`BoundMw`] after the completion, or in a send on the
    /// bind's own QP ([`Scope::advertise_window`](crate::scope::Scope::advertise_window)).
    /// A number the program computes and sends itself is outside that rule's protection.
    pub fn raw_rkey(&self) -> u32 {
        // SAFETY: the window is valid; `rkey` is a plain field.
        unsafe { (*self.inner.mw.as_ptr()).rkey }
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_mw {
        self.inner.mw.as_ptr()
    }

    pub(crate) fn same_pd(&self, pd: &Arc<PdInner>) -> bool {
        Arc::ptr_eq(&self.inner.pd, pd)
    }

    pub(crate) fn pd_id(&self) -> crate::pd::PdId {
        self.inner.pd.id()
    }

    /// A type 2 bind of the window failed after it may have run: it may be bound on the device
    /// ([`MwInner::maybe_bound`]).
    pub(crate) fn maybe_bound(&self) -> bool {
        self.inner.maybe_bound
    }

    /// Marks the window as maybe bound, as a failed bind does when no new window can be
    /// allocated in its place.
    #[cfg(test)]
    pub(crate) fn mark_maybe_bound_for_test(&mut self) {
        self.inner.maybe_bound = true;
    }

    /// Restores the rkey recorded in the `ibv_mw` (ibv_bind_mw(3): "The user should keep a copy
    /// of the old R_key, and fix the mw structure if the subsequent CQE for the bind operation
    /// indicates a failure").
    pub(crate) fn set_raw_rkey(&mut self, rkey: u32) {
        // SAFETY: the window is valid and owned by value (`&mut self`); nothing else writes it.
        unsafe { (*self.inner.mw.as_ptr()).rkey = rkey };
    }
}

/// A window bound to part of a region (borrowed for `'m`), granting the rights `R` under its
/// rkey. Dropping it deallocates the window, which revokes the rkey.
pub struct BoundMw<'m, K: MwType, R> {
    /// The invalidations of its rkey decoded while it is bound, and the last one decoded before
    /// it existed: only a later one can be its own (a type 2 rkey repeats every 256 bindings
    /// of the window). Dropped before the window (declared first), so that a claim it leaves
    /// is forgotten by the window's deallocation ([`forget_orphaned_claims`]).
    watch: InvalidationWatch,
    mw: Mw<K>,
    mr: RawMr,
    rkey: u32,
    addr: u64,
    len: u64,
    _region: RegionBorrow<'m>,
    _rights: PhantomData<fn() -> R>,
}

/// The borrow of the region a window is bound to (or being bound to), for `'m`.
///
/// A `PhantomData<&'m ()>` alone would not keep the region borrowed: the borrow checker ends a
/// borrow at the last *use* of the value holding it, and dropping a value without drop glue
/// that mentions `'m` is no use. This guard has a `Drop` impl, so dropping a [`BoundMw`] (or a
/// [`PendingBind`]) uses `'m`: the region stays borrowed, and cannot be written mutably,
/// deregistered or dropped, until the window is gone (ui-tests
/// `windows/{deregister,drop,slice_mut}_mr_while_window_bound_unused`).
pub(crate) struct RegionBorrow<'m>(PhantomData<&'m ()>);

impl RegionBorrow<'_> {
    pub(crate) fn new() -> Self {
        RegionBorrow(PhantomData)
    }
}

impl Drop for RegionBorrow<'_> {
    fn drop(&mut self) {}
}

impl<K: MwType, R> fmt::Debug for BoundMw<'_, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundMw")
            .field("type", &K::NAME)
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

/// The `ibv_mr` a window is bound to (kept for the zero-length unbind, see
/// [`BoundMw::region_ptr`]).
#[derive(Clone, Copy)]
pub(crate) struct RawMr(pub(crate) NonNull<sys::ibv_mr>);

// SAFETY: only handed to the provider as a value while the region is borrowed by the bound
// window; never dereferenced by this crate.
unsafe impl Send for RawMr {}
// SAFETY: as above.
unsafe impl Sync for RawMr {}

impl<'m, K: MwType, R: WindowRights> BoundMw<'m, K, R> {
    fn new(mw: Mw<K>, mr: RawMr, rkey: u32, addr: u64, len: u64, watch: InvalidationWatch) -> Self {
        BoundMw { mw, mr, rkey, addr, len, watch, _region: RegionBorrow::new(), _rights: PhantomData }
    }

    /// A LOCAL_INV of the binding is being built. Refused (`Err`, and how) if the device may
    /// hold the window unbound though its type says bound, or soon will: a receive completion
    /// decoded since its bind was posted says a peer's SEND_WITH_INV invalidated its rkey
    /// ([`BoundMw::invalidated_by`] takes it back), a LOCAL_INV of it failed after it may have
    /// run ([`Invalidated::MaybeLocally`]), or this process sent a SEND_WITH_INV of it.
    /// Otherwise claimed, so that no SEND_WITH_INV of this process is let through to it
    /// ([`claim_remote_invalidation`]).
    pub(crate) fn claim_local_invalidation(&self) -> std::result::Result<(), Invalidated> {
        self.watch.claim(Mark::LocalPosted)
    }

    /// The LOCAL_INV that claimed the binding was certainly not posted: the claim is given back.
    pub(crate) fn release_local_claim(&self) {
        self.watch.release(Mark::LocalPosted);
    }

    /// The region the window is bound to. A zero-length bind names it although the bind ignores
    /// it: rdma-core 44's rxe provider dereferences `bind_info.mr` even for a zero-length bind,
    /// and crashes on NULL.
    pub(crate) fn region_ptr(&self) -> *mut sys::ibv_mr {
        self.mr.0.as_ptr()
    }

    /// The window's rkey, valid since the bind completed successfully.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The window length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty window (never the case for a bound window).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The remote view of `range` of the window, for a peer. Zero-based windows address by
    /// offset from the window start, the others by virtual address; the rights type `R` records
    /// which, so the two cannot be mixed up.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the range is outside the window.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteSlice<R>> {
        let (off, len) = crate::mr::range_of(range, self.len as usize, "BoundMw::remote")?;
        let base = if R::ZERO_BASED { 0 } else { self.addr };
        Ok(RemoteSlice::new(base + off as u64, len as u64, self.rkey))
    }

    /// The receiving side of a SEND_WITH_INV: if `completion` (a receive completion of the QP
    /// the window is bound to) invalidated this window's rkey (`IBV_WC_WITH_INV`), the window
    /// is unbound and handed back; otherwise it is still bound and handed back as is.
    ///
    /// Only an invalidating completion the library decoded after this binding's own bind
    /// completion can unbind it: a type 2 window's rkey repeats every 256 bindings, and an
    /// older completion with the same rkey (kept, since `Completion` is `Copy`) must not
    /// unbind a live binding. (A SEND_WITH_INV whose receive completion was collected before
    /// the bind's completion is therefore not accepted; the window then stays typed bound until
    /// it is dropped, which deallocates it.)
    ///
    /// # Errors
    /// `Err(self)` when the completion did not invalidate this window.
    pub fn invalidated_by(self, completion: &Completion) -> std::result::Result<Mw<K>, Self>
    where
        K: crate::mw::Invalidatable,
    {
        // The rkey alone could be a stale completion's: the same window's rkey repeats every
        // 256 bindings, and a `Completion` can be kept and shown again. Only an invalidation
        // decoded after this binding existed can be this binding's.
        // And only one polled from a CQ of the window's device (of any of its contexts: rxe
        // invalidates the rkey among all the device's windows): the rkeys of two devices are
        // numbered independently, and can be equal.
        if completion.is_success()
            && completion.invalidated_rkey() == Some(self.rkey)
            && completion.invalidation_serial() > self.watch.serials().0
            && completion.device_tag() == self.mw.inner.pd.ctx.tag
        {
            self.mw.inner.release_qps();
            Ok(self.mw)
        } else {
            Err(self)
        }
    }

    pub(crate) fn into_mw(self) -> Mw<K> {
        self.mw
    }

    pub(crate) fn mw(&self) -> &Mw<K> {
        &self.mw
    }

    /// The window, for a rebind being posted (which restores its rkey if refused).
    pub(crate) fn mw_mut(&mut self) -> &mut Mw<K> {
        &mut self.mw
    }

    /// Writes the binding's rkey back into the window (an unbind the provider refused).
    pub(crate) fn restore_rkey(&mut self) {
        self.mw.set_raw_rkey(self.rkey);
    }
}

/// The invalidations of one live binding's rkey, noted as receive completions are decoded
/// ([`note_remote_invalidation`]): while a [`BoundMw`] lives, its device's tag and its rkey
/// (`tag << 32 | rkey`) are a key of [`WATCHED`], which holds one entry per bound window of the
/// process.
#[derive(Debug)]
pub(crate) struct InvalidationWatch(u64);

/// A watched binding ([`InvalidationWatch`]): serials ([`Completion::invalidation_serial`])
/// of the last invalidation decoded before it existed and of the last invalidation of its rkey
/// decoded since, and what this process does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Watched {
    /// The last invalidation decoded before the binding existed; [`ORPHAN`] for a claim whose
    /// binding is gone.
    bound_after: u64,
    /// The last invalidation of its rkey decoded since (0 for none).
    last: u64,
    mark: Mark,
    /// A type 1 window's binding, which no SEND_WITH_INV invalidates.
    type1: bool,
}

/// What this process does, or did, to a watched binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    None,
    /// It posted a SEND_WITH_INV of it to a QP of the window's device, whose receive completion
    /// is not decoded yet.
    SentHere,
    /// A LOCAL_INV of it is built (posted, or about to be).
    LocalPosted,
    /// A LOCAL_INV of it completed with an error, after it may have run.
    MaybeLocally,
}

type WatchedMap = HashMap<u64, Watched>;

/// The watched bindings, by device tag and rkey. One live binding per key: a valid rkey names one
/// binding of one window of its device (the window keeps its number while allocated, and a bound
/// window is allocated), whichever of the device's contexts allocated it, and a device's tag is
/// never another device's. A map keeps its capacity: binding and unbinding allocate nothing once it
/// has held as many windows.
static WATCHED: Mutex<Option<WatchedMap>> = Mutex::new(None);

fn with_watched<T>(f: impl FnOnce(&mut WatchedMap) -> T) -> T {
    with_map(&WATCHED, f)
}

/// Runs `f` on the process-wide map `map` ([`WATCHED`], [`HELD`]) under its lock.
fn with_map<K, V, T>(map: &Mutex<Option<HashMap<K, V>>>, f: impl FnOnce(&mut HashMap<K, V>) -> T) -> T {
    // The maps are left consistent by every holder (one insert, update or removal), so a panic
    // elsewhere while one was held leaves nothing to repair.
    let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
    f(map.get_or_insert_with(HashMap::new))
}

fn watch_key(dev_tag: u16, rkey: u32) -> u64 {
    (u64::from(dev_tag) << 32) | u64::from(rkey)
}

impl InvalidationWatch {
    /// Watches `rkey`, the new rkey of a bind of `mw` being posted.
    pub(crate) fn of<K: MwType>(mw: &Mw<K>, rkey: u32) -> Self {
        InvalidationWatch::new(mw.inner.pd.ctx.tag, rkey, K::RAW == sys::IBV_MW_TYPE_1)
    }

    fn new(dev_tag: u16, rkey: u32, type1: bool) -> Self {
        let key = watch_key(dev_tag, rkey);
        // Read under the map's lock: an invalidation decoded meanwhile is noted (after this)
        // with a greater serial, or was decoded before this binding existed.
        with_watched(|map| {
            // A SEND_WITH_INV this process sent for an earlier binding under the same rkey may
            // still arrive, and invalidates this one: it stays claimed.
            let mark = match map.get(&key) {
                Some(&Watched { bound_after: ORPHAN, mark: Mark::SentHere, .. }) => Mark::SentHere,
                _ => Mark::None,
            };
            let bound_after = crate::wc::invalidations_so_far();
            map.insert(key, Watched { bound_after, last: 0, mark, type1 })
        });
        InvalidationWatch(key)
    }

    /// Marks the binding `mark` (a claim: [`Mark::SentHere`], [`Mark::LocalPosted`]) unless it
    /// was or is being invalidated, which `Err` says.
    fn claim(&self, mark: Mark) -> std::result::Result<(), Invalidated> {
        with_watched(|map| match map.get_mut(&self.0) {
            Some(w) => w.claim(mark),
            None => Ok(()),
        })
    }

    /// Gives the claim `mark` back ([`give_back`]).
    fn release(&self, mark: Mark) {
        give_back(self.0, mark);
    }

    /// A LOCAL_INV of the binding failed: rxe may have run it before the QP's flush reported it
    /// failed, so the binding is taken as maybe invalidated for good.
    fn maybe_invalidated_locally(&self) {
        with_watched(|map| {
            if let Some(w) = map.get_mut(&self.0) {
                w.mark = Mark::MaybeLocally;
            }
        });
    }

    /// (last invalidation before the binding, last invalidation of its rkey since). Always
    /// present while the binding lives; an absent entry reads as no invalidation being this
    /// binding's, the side that keeps the window typed bound.
    fn serials(&self) -> (u64, u64) {
        with_watched(|map| map.get(&self.0).map_or((u64::MAX, 0), |w| (w.bound_after, w.last)))
    }

    #[cfg(test)]
    fn mark(&self) -> Option<Mark> {
        with_watched(|map| map.get(&self.0).map(|w| w.mark))
    }
}

impl Drop for InvalidationWatch {
    fn drop(&mut self) {
        with_watched(|map| {
            // A binding this process sent a SEND_WITH_INV of, and whose receive completion was
            // not decoded: the send may still arrive (a failed bind hands the window back with
            // its old rkey, and the next bind takes this rkey again). The claim stays, as an
            // orphan, until that completion is decoded or the window is deallocated.
            match map.get_mut(&self.0) {
                Some(w) if w.mark == Mark::SentHere => w.bound_after = ORPHAN,
                _ => {
                    map.remove(&self.0);
                }
            }
        });
    }
}

/// The `bound_after` of an orphaned claim: a [`Mark::SentHere`] whose binding is gone (no
/// live binding has it).
const ORPHAN: u64 = u64::MAX;

/// The window of the device tagged `dev_tag` whose rkey is `rkey` was deallocated: the claims
/// its bindings left ([`ORPHAN`]) are forgotten. (A SEND_WITH_INV still in flight then finds no
/// window, or a window allocated since under the same number and key.)
fn forget_orphaned_claims(dev_tag: u16, rkey: u32) {
    with_watched(|map| {
        if map.values().any(Watched::is_orphan) {
            // (device tag, window number): the rkey's upper 24 bits (a bind changes its low byte).
            let number = |key: &u64| (key >> 32, (key >> 8) & 0xff_ffff);
            let this = number(&watch_key(dev_tag, rkey));
            map.retain(|key, w| !w.is_orphan() || number(key) != this);
        }
    });
}

/// Why a window typed bound may be unbound on the device, or soon be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalidated {
    /// A peer's SEND_WITH_INV invalidated its rkey (a receive completion says so).
    ByPeer,
    /// A LOCAL_INV of it completed with an error, after it may have run.
    MaybeLocally,
    /// This process posted a SEND_WITH_INV of it to a QP of its device.
    SentHere,
    /// A LOCAL_INV of it is posted, or being built.
    LocalPosted,
}

impl Watched {
    /// A claim whose binding is gone ([`ORPHAN`]).
    fn is_orphan(&self) -> bool {
        self.bound_after == ORPHAN
    }

    /// How the binding is invalidated, or being invalidated, if it is. A peer's invalidation
    /// first, the most useful to know (`invalidated_by` takes the window back).
    fn invalidated(&self) -> Option<Invalidated> {
        match self.mark {
            Mark::MaybeLocally => Some(Invalidated::MaybeLocally),
            _ if self.last > self.bound_after => Some(Invalidated::ByPeer),
            Mark::SentHere => Some(Invalidated::SentHere),
            Mark::LocalPosted => Some(Invalidated::LocalPosted),
            Mark::None => None,
        }
    }

    /// Marks it `mark`, unless it was or is being invalidated.
    fn claim(&mut self, mark: Mark) -> std::result::Result<(), Invalidated> {
        match self.invalidated() {
            Some(how) => Err(how),
            None => {
                self.mark = mark;
                Ok(())
            }
        }
    }
}

/// A SEND_WITH_INV of `rkey` is being built on a QP whose peer is (or may be) on the device
/// tagged `dev_tag`. rxe takes an invalidation of any of its type 2 windows that is not in
/// state INVALID, and a window that is not bound (just allocated, or invalidated: state FREE)
/// has no QP, which the invalidation dereferences: a kernel crash. The library sees only its
/// own windows, and a window can be allocated under a number after a request naming it was
/// posted. So the rkey must be the live binding of one of this process's windows of the
/// device, not invalidated nor being invalidated, which the request then claims: a second
/// SEND_WITH_INV, or a LOCAL_INV, of it is refused until its receive completion is decoded.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `ibv_post_send (SEND_WITH_INV)`.
pub(crate) fn claim_remote_invalidation(dev_tag: u16, rkey: u32) -> Result<()> {
    let claimed = with_watched(|map| match map.get_mut(&watch_key(dev_tag, rkey)) {
        Some(w) if !w.is_orphan() && w.type1 => Err(Refusal::Type1),
        Some(w) if !w.is_orphan() => w.claim(Mark::SentHere).map_err(Refusal::Invalidated),
        _ => Err(Refusal::NotBound),
    });
    claimed.map_err(|why| send_inv_refused(rkey, why))
}

/// A SEND_WITH_INV of `rkey` that [`claim_remote_invalidation`] let through on a QP of the
/// device tagged `dev_tag` was certainly not posted: its claim, if it made one and it still
/// stands, is given back.
pub(crate) fn release_remote_claim(dev_tag: u16, rkey: u32) {
    give_back(watch_key(dev_tag, rkey), Mark::SentHere);
}

/// Gives the claim `mark` on the live binding watched under `key` back, if it is still the
/// binding's mark. The invalidations decoded meanwhile stay noted.
fn give_back(key: u64, mark: Mark) {
    with_watched(|map| {
        if let Some(w) = map.get_mut(&key).filter(|w| !w.is_orphan() && w.mark == mark) {
            w.mark = Mark::None;
        }
    });
}

/// Why [`claim_remote_invalidation`] refuses a SEND_WITH_INV.
enum Refusal {
    /// No live binding of the process's windows has the rkey.
    NotBound,
    /// A type 1 window's binding has it.
    Type1,
    /// Its binding was or is being invalidated.
    Invalidated(Invalidated),
}

/// The refusal of a SEND_WITH_INV of `rkey` to a peer on the sender's own device.
#[cold]
fn send_inv_refused(rkey: u32, why: Refusal) -> Error {
    let why = match why {
        Refusal::Type1 => {
            "is a type 1 window's binding, which no SEND_WITH_INV invalidates (unbind it with Scope::unbind_mw)"
        }
        Refusal::NotBound => {
            "is not bound under that rkey (a window not bound, just allocated or invalidated, a stale rkey, \
             or no window of this process: another process's windows cannot be checked)"
        }
        Refusal::Invalidated(Invalidated::ByPeer | Invalidated::SentHere) => {
            "was already invalidated by a SEND_WITH_INV, or one of it is in flight"
        }
        Refusal::Invalidated(Invalidated::LocalPosted) => "is being invalidated by a LOCAL_INV",
        Refusal::Invalidated(Invalidated::MaybeLocally) => "may have been invalidated by a LOCAL_INV that failed",
    };
    Error::invalid(
        "ibv_post_send (SEND_WITH_INV)",
        format!(
            "the peer is on the sender's own device, where rkey {rkey:#x} must be the live binding of a window of \
             this process, and it {why}: rxe's kernel crashes invalidating a window that is not bound"
        ),
    )
}

/// A receive completion of a CQ of the device tagged `dev_tag` says a SEND_WITH_INV
/// invalidated `rkey`; `serial` is its [`Completion::invalidation_serial`]. A bound window with
/// that rkey notes it, so that a LOCAL_INV of it is refused
/// ([`BoundMw::claim_local_invalidation`]).
#[cold]
pub(crate) fn note_remote_invalidation(dev_tag: u16, rkey: u32, serial: u64) {
    with_watched(|map| {
        let key = watch_key(dev_tag, rkey);
        match map.get_mut(&key) {
            // The SEND_WITH_INV of a binding that is gone has arrived: nothing is claimed now.
            Some(w) if w.is_orphan() => {
                map.remove(&key);
            }
            // Noted whatever the mark. This process's own SEND_WITH_INV has arrived: the
            // binding is invalidated, as by any peer.
            Some(w) => {
                w.last = w.last.max(serial);
                if w.mark == Mark::SentHere {
                    w.mark = Mark::None;
                }
            }
            None => {}
        }
    });
}

/// `ibv_inc_rkey`: the rkey a new binding of a window whose rkey is `rkey` gets (the low
/// "key" byte incremented).
pub(crate) fn inc_rkey(rkey: u32) -> u32 {
    // SAFETY: a pure function of its argument (a static inline helper of verbs.h).
    unsafe { sys::ibv_inc_rkey(rkey) }
}

/// A bind in flight: what the token of a bind hands over. On completion it becomes a
/// [`BoundMw`] (success) or the window back, unbound, with its old rkey (failure the device
/// reported as `IBV_WC_MW_BIND_ERR`: it bound nothing), or a new window of the same PD in its
/// place (any other failure, which may come after the bind ran: the window is deallocated).
pub struct PendingBind<'m, K: MwType, R> {
    /// Watches `new_rkey` from the post on: a peer told the rkey before the bind's completion
    /// was collected (`Scope::advertise_window`) may invalidate it first. Dropped before the
    /// window (declared first), as in [`BoundMw`].
    pub(crate) watch: InvalidationWatch,
    pub(crate) mw: Mw<K>,
    pub(crate) mr: RawMr,
    pub(crate) old_rkey: u32,
    pub(crate) new_rkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) _region: RegionBorrow<'m>,
    pub(crate) _rights: PhantomData<fn() -> R>,
}

impl<K: MwType, R> fmt::Debug for PendingBind<'_, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingBind").field("type", &K::NAME).finish_non_exhaustive()
    }
}

/// Proof that a bind completed: only [`BoundMw`] has it.
#[diagnostic::on_unimplemented(
    message = "the rkey of a new binding is not available before the bind completed",
    label = "wait for the bind's token first",
    note = "ibv_bind_mw(3) NOTES: the rkey \"must not [be transferred] to the remote in any other manner before reading a successful CQE\"; a send on the same QP after the bind is allowed: `Scope::advertise_window`"
)]
pub trait BindCompleted {}

/// A window bind in flight, which [`Scope::advertise_window`] may send to the peer before its
/// completion: a bind ([`PendingBind`], of `Scope::bind_mw` or a `BindMw` work request) or a
/// rebind ([`PendingRebind`]). Sealed.
///
/// [`Scope::advertise_window`]: crate::scope::Scope::advertise_window
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a window bind in flight",
    label = "not the token of a bind",
    note = "ibv_bind_mw(3) NOTES: only the new rkey of a bind may be sent on the bind's QP before its completion; pass the token of `Scope::bind_mw`, `Scope::rebind_mw` or a `BindMw` work request"
)]
pub trait BindInFlight: crate::scope::Completes {
    /// What `advertise_window` sends: address, length and the new rkey.
    #[doc(hidden)]
    fn advert(&self) -> WindowAdvert;
}

/// The advertisement of a window of rights `R` over `len` bytes at `addr` under `rkey`.
fn advert_of<R: WindowRights>(addr: u64, len: u64, rkey: u32) -> WindowAdvert {
    let base = if R::ZERO_BASED { 0 } else { addr };
    WindowAdvert { addr: base, len, rkey, zero_based: R::ZERO_BASED, rights: R::REMOTE }
}

impl<K: MwType, R: WindowRights> BindInFlight for PendingBind<'_, K, R> {
    fn advert(&self) -> WindowAdvert {
        advert_of::<R>(self.addr, self.len, self.new_rkey)
    }
}

impl<K: MwType, R0: WindowRights, R: WindowRights> BindInFlight for PendingRebind<'_, '_, K, R0, R> {
    fn advert(&self) -> WindowAdvert {
        advert_of::<R>(self.addr, self.len, self.new_rkey)
    }
}

impl<'m, K: MwType, R: WindowRights> PendingBind<'m, K, R> {
    pub(crate) fn finish(mut self, c: &Completion) -> std::result::Result<BoundMw<'m, K, R>, Mw<K>> {
        if c.is_success() {
            self.mw.set_raw_rkey(self.new_rkey);
            Ok(BoundMw::new(self.mw, self.mr, self.new_rkey, self.addr, self.len, self.watch))
        } else {
            self.mw.set_raw_rkey(self.old_rkey);
            // Only the device's refusal of the bind itself says it bound nothing; any other
            // error (a flush above all) may come after it ran. The window may then be bound to
            // the region, whose borrow ends here, under the rkey the next bind of it would give
            // again: it is deallocated now (which unbinds it wherever it is, and lets the region
            // be deregistered), and a new window of the same PD takes its place. Without a new
            // window (`ibv_alloc_mw` failed) it is handed back itself: a type 1 window may be
            // bound again while bound (the new binding replaces the old one); a type 2 window
            // may not, and is marked so: it can only be dropped.
            if c.status() != crate::wc::WcStatus::MwBindErr {
                match (Pd { inner: Arc::clone(&self.mw.inner.pd) }).alloc_mw::<K>() {
                    Ok(fresh) => drop(std::mem::replace(&mut self.mw, fresh)),
                    Err(_) => self.mw.inner.maybe_bound = K::RAW == sys::IBV_MW_TYPE_2,
                }
            }
            Err(self.mw)
        }
    }
}

/// A type 1 window's bind in flight while it is bound ([`Scope::rebind_mw`]): the binding it
/// replaces (`'o`) and the new one (`'m`, rights `R`). On completion the window comes back bound
/// to the new range (success) or as it was (failure).
///
/// [`Scope::rebind_mw`]: crate::scope::Scope::rebind_mw
pub struct PendingRebind<'o, 'm, K: MwType, R0, R> {
    /// Watches the new rkey from the post on, as [`PendingBind::watch`]; dropped before the
    /// window (declared first). `None` if the provider left the rkey as it was: the old
    /// binding's watch is then the new one's.
    watch: Option<InvalidationWatch>,
    old: BoundMw<'o, K, R0>,
    mr: RawMr,
    new_rkey: u32,
    addr: u64,
    len: u64,
    _region: RegionBorrow<'m>,
    _rights: PhantomData<fn() -> R>,
}

impl<K: MwType, R0, R> fmt::Debug for PendingRebind<'_, '_, K, R0, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingRebind").field("window", &self.old).finish_non_exhaustive()
    }
}

impl<'o, 'm, K: MwType, R0: WindowRights, R: WindowRights> PendingRebind<'o, 'm, K, R0, R> {
    /// The bind of `old`'s window (which holds `new_rkey` now) to `len` bytes at `addr` of
    /// `mr` was posted.
    pub(crate) fn new(old: BoundMw<'o, K, R0>, mr: RawMr, new_rkey: u32, addr: u64, len: u64) -> Self {
        // One watch per key: a second one under the old binding's rkey would be removed from
        // the map when the old binding's watch is dropped.
        let watch = (new_rkey != old.rkey).then(|| InvalidationWatch::of(&old.mw, new_rkey));
        PendingRebind { watch, old, mr, new_rkey, addr, len, _region: RegionBorrow::new(), _rights: PhantomData }
    }

    pub(crate) fn finish(self, c: &Completion) -> std::result::Result<BoundMw<'m, K, R>, BoundMw<'o, K, R0>> {
        let PendingRebind { watch, old, mr, new_rkey, addr, len, .. } = self;
        if c.is_success() {
            // The old binding is gone: its watch goes (unless it is the new one's), the window
            // stays.
            let BoundMw { watch: old_watch, mut mw, .. } = old;
            let watch = match watch {
                Some(watch) => {
                    drop(old_watch);
                    watch
                }
                None => old_watch,
            };
            mw.set_raw_rkey(new_rkey);
            Ok(BoundMw::new(mw, mr, new_rkey, addr, len, watch))
        } else {
            drop(watch);
            let mut old = old;
            old.mw.set_raw_rkey(old.rkey);
            Err(old)
        }
    }

    /// The window, for a token given up while the bind may be in flight.
    pub(crate) fn into_mw(self) -> Mw<K> {
        self.old.mw
    }
}

/// An invalidation or unbinding in flight (LOCAL_INV of a type 2 window, zero-length bind of a
/// type 1 window). On completion the window comes back unbound (success) or still bound.
pub struct PendingUnbind<'m, K: MwType, R> {
    pub(crate) bound: BoundMw<'m, K, R>,
    pub(crate) new_rkey: Option<u32>,
}

impl<K: MwType, R> fmt::Debug for PendingUnbind<'_, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingUnbind").field("window", &self.bound).finish()
    }
}

impl<'m, K: MwType, R: WindowRights> PendingUnbind<'m, K, R> {
    pub(crate) fn finish(self, c: &Completion) -> std::result::Result<Mw<K>, BoundMw<'m, K, R>> {
        let PendingUnbind { mut bound, new_rkey } = self;
        if c.is_success() {
            let mut mw = bound.into_mw();
            mw.inner.release_qps();
            if let Some(k) = new_rkey {
                mw.set_raw_rkey(k);
            }
            Ok(mw)
        } else {
            bound.mw.set_raw_rkey(bound.rkey);
            bound.watch.maybe_invalidated_locally();
            Err(bound)
        }
    }
}

/// The wire form of a window advertisement sent by
/// [`Scope::advertise_window`](crate::scope::Scope::advertise_window) (or of any remote memory,
/// [`WindowAdvert::of`]): 21 bytes, little endian: `addr: u64, len: u64, rkey: u32, flags: u8`
/// (bit 0: zero-based; bits 1, 2, 3: the peer may WRITE, READ, run atomics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowAdvert {
    /// Remote address (an offset for zero-based windows).
    pub addr: u64,
    /// Window length in bytes.
    pub len: u64,
    /// The window's rkey.
    pub rkey: u32,
    /// Whether the window is zero-based.
    pub zero_based: bool,
    /// The rights granted: `IBV_ACCESS_REMOTE_WRITE`, `_READ`, `_ATOMIC` bits (others are
    /// not encoded).
    pub rights: u32,
}

impl WindowAdvert {
    /// Encoded size in bytes.
    pub const LEN: usize = 21;

    /// The flag bits of the rights, after the zero-based bit.
    const RIGHTS: [(u32, u8); 3] = [
        (sys::IBV_ACCESS_REMOTE_WRITE, 1 << 1),
        (sys::IBV_ACCESS_REMOTE_READ, 1 << 2),
        (sys::IBV_ACCESS_REMOTE_ATOMIC, 1 << 3),
    ];

    /// The advertisement of `remote`: its address, length, rkey and rights (`R`), so that the
    /// peer types it with those rights at most ([`WindowAdvert::remote`]).
    pub fn of<R: RemoteRights>(remote: &RemoteSlice<R>) -> Self {
        WindowAdvert {
            addr: remote.addr(),
            len: remote.len(),
            rkey: remote.rkey(),
            zero_based: R::ZERO_BASED,
            rights: R::REMOTE,
        }
    }

    /// Encodes the advertisement.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20] = u8::from(self.zero_based);
        for (right, flag) in Self::RIGHTS {
            if self.rights & right != 0 {
                b[20] |= flag;
            }
        }
        b
    }

    /// Decodes an advertisement received from a peer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `bytes` is not exactly [`WindowAdvert::LEN`] bytes or the
    /// flags byte has unknown bits.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let b: &[u8; Self::LEN] = bytes.try_into().map_err(|_| {
            Error::invalid("WindowAdvert::decode", format!("{} bytes, expected {}", bytes.len(), Self::LEN))
        })?;
        if b[20] & !0xf != 0 {
            return Err(Error::invalid("WindowAdvert::decode", format!("unknown flags {:#x}", b[20])));
        }
        let u64_at =
            |i: usize| u64::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3], b[i + 4], b[i + 5], b[i + 6], b[i + 7]]);
        Ok(WindowAdvert {
            addr: u64_at(0),
            len: u64_at(8),
            rkey: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
            zero_based: b[20] & 1 != 0,
            rights: Self::RIGHTS.iter().filter(|(_, flag)| b[20] & flag != 0).fold(0, |r, (right, _)| r | right),
        })
    }

    /// The remote window as a [`RemoteSlice`], with rights `R`, at most those the peer
    /// granted.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the advertisement's addressing mode (zero-based or not)
    /// differs from `R`'s, or `R` has a right the advertisement does not grant.
    pub fn remote<R: RemoteRights>(&self) -> Result<RemoteSlice<R>> {
        if self.zero_based != R::ZERO_BASED {
            return Err(Error::invalid(
                "WindowAdvert::remote",
                "the advertised window's addressing mode (zero-based or virtual) differs from the rights type",
            ));
        }
        if R::REMOTE & !self.rights != 0 {
            return Err(Error::invalid(
                "WindowAdvert::remote",
                format!(
                    "the rights type asks for access {:#x}; the advertisement grants {:#x} (IBV_ACCESS_REMOTE_*)",
                    R::REMOTE,
                    self.rights & crate::access::REMOTE_BITS
                ),
            ));
        }
        Ok(RemoteSlice::new(self.addr, self.len, self.rkey))
    }
}

#[cfg(test)]
mod tests {
    use super::{
        claim_remote_invalidation, forget_orphaned_claims, note_remote_invalidation, release_remote_claim, watch_key,
        with_watched, Invalidated, InvalidationWatch, Mark, WindowAdvert,
    };
    use crate::error::Error;
    use typed_verbs_sys as sys;

    #[test]
    fn a_watched_rkey_notes_its_invalidations_until_its_binding_is_gone() {
        // A tag no open context has in unit tests (the fake devices take small ones).
        let (tag, rkey) = (0xfff1, 0x1234_5601);
        let w = InvalidationWatch::new(tag, rkey, false);
        let (before, last) = w.serials();
        assert_eq!(last, 0);
        // Another context's, or another rkey's, invalidation is not this binding's.
        note_remote_invalidation(tag + 1, rkey, before + 7);
        note_remote_invalidation(tag, rkey + 1, before + 7);
        assert_eq!(w.serials(), (before, 0));
        note_remote_invalidation(tag, rkey, before + 9);
        note_remote_invalidation(tag, rkey, before + 8);
        assert_eq!(w.serials(), (before, before + 9), "the latest serial stays");
        drop(w);
        assert!(!with_watched(|map| map.contains_key(&watch_key(tag, rkey))), "one entry per live binding");
        note_remote_invalidation(tag, rkey, before + 12);
        assert!(!with_watched(|map| map.contains_key(&watch_key(tag, rkey))), "nothing noted for no binding");
    }

    /// The claims of a binding: one SEND_WITH_INV of this process, or one LOCAL_INV, and
    /// nothing after an invalidation; an rkey that is no live binding is refused. A claim
    /// whose binding is gone before the send arrived stays with its rkey until the send's
    /// completion is decoded or the window is deallocated.
    #[test]
    fn a_binding_is_invalidated_at_most_once_by_this_process() {
        let (tag, rkey) = (0xfff2, 0x4321_5601);
        let refused = |rkey| match claim_remote_invalidation(tag, rkey) {
            Err(Error::InvalidArgument { verb: "ibv_post_send (SEND_WITH_INV)", reason }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(refused(rkey).contains("is not bound under that rkey"), "no binding");
        // Bound: one SEND_WITH_INV is let through, the second is not, nor a LOCAL_INV.
        let w = InvalidationWatch::new(tag, rkey, false);
        assert!(refused(rkey + 1).contains("is not bound under that rkey"), "a stale or future key");
        claim_remote_invalidation(tag, rkey).expect("the live binding");
        assert!(refused(rkey).contains("in flight"));
        // A request certainly not posted gives its claim back.
        release_remote_claim(tag, rkey);
        claim_remote_invalidation(tag, rkey).expect("claimed again");
        assert_eq!(w.claim(Mark::LocalPosted), Err(Invalidated::SentHere));
        // Its arrival makes it an invalidation like any peer's.
        let serial = w.serials().0 + 1;
        note_remote_invalidation(tag, rkey, serial);
        assert_eq!(w.serials().1, serial);
        assert_eq!(w.claim(Mark::LocalPosted), Err(Invalidated::ByPeer));
        drop(w);
        // A LOCAL_INV's claim excludes a SEND_WITH_INV until it is given back.
        let w = InvalidationWatch::new(tag, rkey, false);
        assert_eq!(w.claim(Mark::LocalPosted), Ok(()));
        assert!(refused(rkey).contains("LOCAL_INV"));
        w.release(Mark::LocalPosted);
        claim_remote_invalidation(tag, rkey).expect("the claim was given back");
        w.release(Mark::LocalPosted);
        assert_eq!(w.mark(), Some(Mark::SentHere), "only the matching claim is given back");
        // The binding goes (a failed bind) with its send in flight: the next binding under
        // the same rkey is still claimed, until the send's completion is decoded.
        drop(w);
        assert!(refused(rkey).contains("is not bound under that rkey"), "an orphaned claim is no binding");
        release_remote_claim(tag, rkey);
        let w = InvalidationWatch::new(tag, rkey, false);
        assert_eq!(w.mark(), Some(Mark::SentHere), "the orphaned claim carries over");
        drop(w);
        note_remote_invalidation(tag, rkey, a_later_serial());
        assert!(!with_watched(|map| map.contains_key(&watch_key(tag, rkey))), "decoded: forgotten");
        // Or until the window is deallocated (any key of its number).
        let w = InvalidationWatch::new(tag, rkey, false);
        claim_remote_invalidation(tag, rkey).expect("a new binding");
        drop(w);
        forget_orphaned_claims(tag, rkey + 7);
        assert!(!with_watched(|map| map.contains_key(&watch_key(tag, rkey))), "deallocated: forgotten");
        // A peer's invalidation decoded while a LOCAL_INV holds its claim stays noted when the
        // claim is given back (the LOCAL_INV was not posted).
        let w = InvalidationWatch::new(tag, rkey, false);
        assert_eq!(w.claim(Mark::LocalPosted), Ok(()));
        note_remote_invalidation(tag, rkey, a_later_serial());
        w.release(Mark::LocalPosted);
        assert_eq!(w.claim(Mark::LocalPosted), Err(Invalidated::ByPeer));
        assert!(refused(rkey).contains("already invalidated"));
        drop(w);
        // A type 1 window's binding is no SEND_WITH_INV's to invalidate.
        let w = InvalidationWatch::new(tag, rkey, true);
        assert!(refused(rkey).contains("type 1"));
        drop(w);
    }

    fn a_later_serial() -> u64 {
        crate::wc::invalidations_so_far() + 1
    }

    #[test]
    fn advert_round_trips_and_rejects_garbage() {
        let rights = sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_ATOMIC;
        let a = WindowAdvert { addr: 0x1122_3344_5566_7788, len: 4096, rkey: 0xabcd_ef01, zero_based: true, rights };
        assert_eq!(WindowAdvert::decode(&a.encode()).unwrap(), a);
        assert_eq!(a.encode()[20], 1 | 2 | 8);
        assert!(WindowAdvert::decode(&a.encode()[..20]).is_err());
        let mut bad = a.encode();
        bad[20] = 0x10;
        assert!(WindowAdvert::decode(&bad).is_err());
    }

    /// The rights an advertisement grants bound the rights type the peer may give it; the
    /// addressing mode must match.
    #[test]
    fn an_advert_is_typed_with_at_most_the_rights_it_grants() {
        use crate::access::{self, window};
        let read_only =
            WindowAdvert { addr: 0x1000, len: 64, rkey: 7, zero_based: false, rights: sys::IBV_ACCESS_REMOTE_READ };
        assert!(read_only.remote::<window::Read>().is_ok());
        assert!(read_only.remote::<access::RemoteReadOnly>().is_ok());
        assert!(read_only.remote::<window::Write>().is_err());
        assert!(read_only.remote::<window::All>().is_err());
        assert!(read_only.remote::<access::RemoteRw>().is_err());
        let remote = read_only.remote::<window::Read>().unwrap();
        assert_eq!(WindowAdvert::of(&remote), read_only);
        let all = WindowAdvert { rights: access::REMOTE_BITS, ..read_only };
        assert!(all.remote::<window::All>().is_ok() && all.remote::<window::Write>().is_ok());
        let zero_based = WindowAdvert { zero_based: true, ..all };
        assert!(zero_based.remote::<window::All>().is_err(), "a zero-based window typed as virtually addressed");
    }
}
