//! Memory-region access rights as types.
//!
//! An access set is the type [`Access<LW, RW, RR, RA, MB>`]: each position holds either the
//! flag's marker ([`LocalWrite`], [`RemoteWrite`], [`RemoteRead`], [`RemoteAtomic`],
//! [`MwBind`]) or `()` for "not set". Local read access is always enabled (ibv_reg_mr(3)).
//! Build one with the `const` presets in this module or with the builder methods on
//! [`Access`]:
//!
//! ```
//! use typed_verbs::access::{self, Access};
//! let a = Access::NONE.local_write().remote_write(); // Access<LocalWrite, RemoteWrite, (), (), ()>
//! let _same: access::LocalRemoteWrite = a;
//! ```
//!
//! The rule of ibv_reg_mr(3) — "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set,
//! then IBV_ACCESS_LOCAL_WRITE must be set too" — is the trait [`LegalAccess`]: registration
//! requires it, so an illegal set does not compile. The capability traits ([`HasLocalWrite`],
//! [`HasRemoteWrite`], [`HasRemoteRead`], [`HasRemoteAtomic`], [`HasMwBind`]) gate the
//! operations that need each right, and [`PeerCannotWrite`] gates plain `&[u8]` access to the
//! memory.
//!
//! # Queue pairs
//!
//! What a connected QP lets its peer do (`qp_access_flags` of ibv_modify_qp(3): "Mask of
//! enabled remote access operations on incoming packets") is given with the same values:
//! [`ConnectedInit::new`](crate::qp::ConnectedInit::new), `Qp::<RC|UC, RESET>::connect` and the
//! CM's `prepare`, `connect` and `accept` take any [`AccessSet`]. The QP takes the set's
//! REMOTE_WRITE, REMOTE_READ and REMOTE_ATOMIC bits (a UC QP its REMOTE_WRITE alone: UC has no
//! RDMA READ and no atomics) and leaves LOCAL_WRITE and MW_BIND out:
//! those two are rights of a registration (the local device writing the memory, windows bound
//! to it), not of incoming packets. So the preset the peer's target region is registered with
//! is handed to the QP as it is (`REMOTE_RW` carries LOCAL_WRITE only because ibv_reg_mr(3)
//! requires it beside REMOTE_WRITE), as C programs pass one mask to both verbs, and
//! [`Access::NONE`] grants nothing. The sets [`LegalAccess`] refuses for a region are accepted
//! here (`Access::NONE.remote_write()`: a QP needs no LOCAL_WRITE to grant remote writes).
//!
//! ```
//! use typed_verbs::access::{self, Access};
//! use typed_verbs::qp::ConnectedInit;
//! use typed_verbs::sys;
//! let init = ConnectedInit::new(1, access::REMOTE_RW);
//! assert_eq!(init.qp_access_flags(), sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_READ);
//! assert_eq!(ConnectedInit::new(1, Access::NONE).qp_access_flags(), 0);
//! ```

use core::fmt;
use core::marker::PhantomData;

use typed_verbs_sys as sys;

/// Marker: `IBV_ACCESS_LOCAL_WRITE` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LocalWrite;
/// Marker: `IBV_ACCESS_REMOTE_WRITE` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RemoteWrite;
/// Marker: `IBV_ACCESS_REMOTE_READ` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RemoteRead;
/// Marker: `IBV_ACCESS_REMOTE_ATOMIC` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RemoteAtomic;
/// Marker: `IBV_ACCESS_MW_BIND` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MwBind;

mod sealed {
    pub trait Flag<const BIT: u32> {
        const SET: bool;
    }
    sealed_trait!();
}
use sealed::Flag;

macro_rules! flag_position {
    ($($marker:ident => $bit:path),* $(,)?) => {$(
        impl Flag<{ $bit }> for $marker { const SET: bool = true; }
        impl Flag<{ $bit }> for () { const SET: bool = false; }
    )*};
}
flag_position! {
    LocalWrite => sys::IBV_ACCESS_LOCAL_WRITE,
    RemoteWrite => sys::IBV_ACCESS_REMOTE_WRITE,
    RemoteRead => sys::IBV_ACCESS_REMOTE_READ,
    RemoteAtomic => sys::IBV_ACCESS_REMOTE_ATOMIC,
    MwBind => sys::IBV_ACCESS_MW_BIND,
}

/// An access set for a memory region: see the [module documentation](self).
///
/// The value is zero-sized; only its type matters.
pub struct Access<LW = (), RW = (), RR = (), RA = (), MB = ()>(PhantomData<Flags<LW, RW, RR, RA, MB>>);

/// The five positions of an [`Access`], as a function type so the markers impose no auto
/// traits or variance on it.
type Flags<LW, RW, RR, RA, MB> = fn() -> (LW, RW, RR, RA, MB);

impl<LW, RW, RR, RA, MB> Clone for Access<LW, RW, RR, RA, MB> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<LW, RW, RR, RA, MB> Copy for Access<LW, RW, RR, RA, MB> {}
impl<LW, RW, RR, RA, MB> Default for Access<LW, RW, RR, RA, MB> {
    fn default() -> Self {
        Access(PhantomData)
    }
}

impl Access {
    /// No flag set: local read only.
    pub const NONE: Access = Access(PhantomData);
}

impl<LW, RW, RR, RA, MB> Access<LW, RW, RR, RA, MB> {
    const fn new() -> Self {
        Access(PhantomData)
    }
    /// Adds `IBV_ACCESS_LOCAL_WRITE`.
    pub const fn local_write(self) -> Access<LocalWrite, RW, RR, RA, MB> {
        Access::new()
    }
    /// Adds `IBV_ACCESS_REMOTE_WRITE` (needs `local_write` too, checked at registration).
    pub const fn remote_write(self) -> Access<LW, RemoteWrite, RR, RA, MB> {
        Access::new()
    }
    /// Adds `IBV_ACCESS_REMOTE_READ`.
    pub const fn remote_read(self) -> Access<LW, RW, RemoteRead, RA, MB> {
        Access::new()
    }
    /// Adds `IBV_ACCESS_REMOTE_ATOMIC` (needs `local_write` too, checked at registration).
    pub const fn remote_atomic(self) -> Access<LW, RW, RR, RemoteAtomic, MB> {
        Access::new()
    }
    /// Adds `IBV_ACCESS_MW_BIND`.
    pub const fn mw_bind(self) -> Access<LW, RW, RR, RA, MwBind> {
        Access::new()
    }
}

/// Any access set (legal or not) whose positions hold flag markers or `()`.
///
/// Sealed: implemented only by [`Access`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an access set",
    label = "expected an `Access` set",
    note = "regions and queue pairs take the `access` module's values: `access::LOCAL_RW`, `access::REMOTE_RW`, `access::REMOTE_ALL`, ..., or a set built from `Access::NONE` (`.remote_write()`, `.remote_read()`, ...)"
)]
pub trait AccessSet: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The `IBV_ACCESS_*` bits of this set.
    const BITS: u32;
}

impl<LW, RW, RR, RA, MB> sealed::Sealed for Access<LW, RW, RR, RA, MB>
where
    LW: Flag<{ sys::IBV_ACCESS_LOCAL_WRITE }>,
    RW: Flag<{ sys::IBV_ACCESS_REMOTE_WRITE }>,
    RR: Flag<{ sys::IBV_ACCESS_REMOTE_READ }>,
    RA: Flag<{ sys::IBV_ACCESS_REMOTE_ATOMIC }>,
    MB: Flag<{ sys::IBV_ACCESS_MW_BIND }>,
{
}

const fn bit(set: bool, b: u32) -> u32 {
    if set {
        b
    } else {
        0
    }
}

impl<LW, RW, RR, RA, MB> AccessSet for Access<LW, RW, RR, RA, MB>
where
    LW: Flag<{ sys::IBV_ACCESS_LOCAL_WRITE }> + 'static,
    RW: Flag<{ sys::IBV_ACCESS_REMOTE_WRITE }> + 'static,
    RR: Flag<{ sys::IBV_ACCESS_REMOTE_READ }> + 'static,
    RA: Flag<{ sys::IBV_ACCESS_REMOTE_ATOMIC }> + 'static,
    MB: Flag<{ sys::IBV_ACCESS_MW_BIND }> + 'static,
{
    const BITS: u32 = bit(LW::SET, sys::IBV_ACCESS_LOCAL_WRITE)
        | bit(RW::SET, sys::IBV_ACCESS_REMOTE_WRITE)
        | bit(RR::SET, sys::IBV_ACCESS_REMOTE_READ)
        | bit(RA::SET, sys::IBV_ACCESS_REMOTE_ATOMIC)
        | bit(MB::SET, sys::IBV_ACCESS_MW_BIND);
}

impl<LW, RW, RR, RA, MB> fmt::Debug for Access<LW, RW, RR, RA, MB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::any::type_name::<Self>())
    }
}

impl<RW, RR, RA, ZB> fmt::Debug for WindowAccess<RW, RR, RA, ZB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::any::type_name::<Self>())
    }
}

/// `qp_access_flags` for a QP granted `A` (the [queue-pair rule](self#queue-pairs)): the remote
/// bits of the set.
pub(crate) fn qp_access_flags<A: AccessSet>(_: A) -> u32 {
    A::BITS & REMOTE_BITS
}

/// An access set that ibv_reg_mr(3) accepts.
///
/// "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE
/// must be set too." Implemented exactly for the sets that obey it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an access set ibv_reg_mr(3) accepts",
    label = "not a legal memory-region access set",
    note = "ibv_reg_mr(3): \"If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too.\"",
    note = "a set with IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC needs `.local_write()`; a region takes the `access` module's values (`access::LOCAL_RW`, `access::REMOTE_RW`, ...), not a window's rights (`access::window::*`)"
)]
pub trait LegalAccess: AccessSet {}
impl<RW, RR, RA, MB> LegalAccess for Access<LocalWrite, RW, RR, RA, MB> where Self: AccessSet {}
impl<RR, MB> LegalAccess for Access<(), (), RR, (), MB> where Self: AccessSet {}

/// The set includes `IBV_ACCESS_LOCAL_WRITE`: the device may write the memory for local
/// operations (receive buffers, RDMA READ and atomic results).
#[diagnostic::on_unimplemented(
    message = "this memory region was registered without IBV_ACCESS_LOCAL_WRITE, so the device may not write into it",
    label = "needs a region registered with `.local_write()`",
    note = "a receive buffer, the destination of an RDMA READ and the result of an atomic are written by the local device, which IBV_ACCESS_LOCAL_WRITE enables (ibv_reg_mr(3): \"Local read access is always enabled\", local write access only with the flag)"
)]
pub trait HasLocalWrite: LegalAccess {}
impl<RW, RR, RA, MB> HasLocalWrite for Access<LocalWrite, RW, RR, RA, MB> where Self: LegalAccess {}

/// The set includes `IBV_ACCESS_REMOTE_WRITE`.
#[diagnostic::on_unimplemented(
    message = "RDMA WRITE needs a target (region or window) with IBV_ACCESS_REMOTE_WRITE; `{Self}` lacks it",
    label = "this remote region does not allow remote writes",
    note = "ibv_reg_mr(3): IBV_ACCESS_REMOTE_WRITE enables remote write access"
)]
pub trait HasRemoteWrite: RemoteRights {}
impl<RR, RA, MB> HasRemoteWrite for Access<LocalWrite, RemoteWrite, RR, RA, MB> where Self: LegalAccess {}

/// The set includes `IBV_ACCESS_REMOTE_READ`.
#[diagnostic::on_unimplemented(
    message = "RDMA READ needs a source (region or window) with IBV_ACCESS_REMOTE_READ; `{Self}` lacks it",
    label = "this remote region does not allow remote reads",
    note = "ibv_reg_mr(3): IBV_ACCESS_REMOTE_READ enables remote read access"
)]
pub trait HasRemoteRead: RemoteRights {}
impl<LW, RW, RA, MB> HasRemoteRead for Access<LW, RW, RemoteRead, RA, MB> where Self: LegalAccess {}

/// The set includes `IBV_ACCESS_REMOTE_ATOMIC`.
#[diagnostic::on_unimplemented(
    message = "atomic operations need a target (region or window) with IBV_ACCESS_REMOTE_ATOMIC; `{Self}` lacks it",
    label = "this remote region does not allow remote atomics",
    note = "ibv_reg_mr(3): IBV_ACCESS_REMOTE_ATOMIC enables remote atomic operation access"
)]
pub trait HasRemoteAtomic: RemoteRights {}
impl<RW, RR, MB> HasRemoteAtomic for Access<LocalWrite, RW, RR, RemoteAtomic, MB> where Self: LegalAccess {}

/// The set includes `IBV_ACCESS_MW_BIND`.
#[diagnostic::on_unimplemented(
    message = "a memory window can only be bound to a region registered with IBV_ACCESS_MW_BIND; `{Self}` lacks it",
    label = "registered without `.mw_bind()`",
    note = "ibv_reg_mr(3): IBV_ACCESS_MW_BIND enables memory window binding"
)]
pub trait HasMwBind: LegalAccess {}
impl<LW, RW, RR, RA> HasMwBind for Access<LW, RW, RR, RA, MwBind> where Self: LegalAccess {}

/// No peer can ever write this memory: neither REMOTE_WRITE nor REMOTE_ATOMIC is set, and no
/// writable memory window can be bound to it (a writable window needs MW_BIND together with
/// LOCAL_WRITE, ibv_bind_mw(3)).
///
/// Only memory with this property is ever exposed as `&[u8]` / `&mut [u8]`; other memory is
/// reached through explicit volatile copies (see [`crate::mr::Mr`]).
#[diagnostic::on_unimplemented(
    message = "a peer may write this memory at any time (`{Self}`), so it is never exposed as a plain slice",
    label = "remote-writable memory",
    note = "use the copy methods (`read_volatile_into`, `write_volatile_from`) instead: a `&[u8]` would be a data race with the peer's RDMA WRITE or atomic"
)]
pub trait PeerCannotWrite: LegalAccess {}
impl<LW, RR> PeerCannotWrite for Access<LW, (), RR, (), ()> where Self: LegalAccess {}
impl<RR> PeerCannotWrite for Access<(), (), RR, (), MwBind> where Self: LegalAccess {}

/// No peer can reach this memory at all: no remote right and no MW_BIND (local read,
/// optionally local write). The access sets [`Pd::register_borrowed`](crate::pd::Pd::register_borrowed)
/// accepts.
///
/// A registration can be leaked (`mem::forget`), and a leaked registration of borrowed memory
/// outlives the borrow: with a remote right, or a window bound through MW_BIND, a peer could
/// then write memory that belongs to someone else again. Without them the device only reaches
/// the memory for local work requests, which need views that borrow the registration.
#[diagnostic::on_unimplemented(
    message = "a registration of borrowed memory takes local access only (`access::LOCAL_READ` or `access::LOCAL_RW`), not `{Self}`",
    label = "`Pd::register_borrowed` takes `access::LOCAL_READ` or `access::LOCAL_RW` only",
    note = "a leaked registration (`mem::forget`) outlives the borrow of its memory: a registration of borrowed memory must not let a peer write memory whose borrow has ended",
    note = "for remote access or MW_BIND use the closure form `Pd::with_registered`, which deregisters before the borrow ends, or move the buffer into the region with `Pd::register`"
)]
pub trait NoPeerAccess: PeerCannotWrite {}
impl NoPeerAccess for Access {}
impl NoPeerAccess for Access<LocalWrite> {}

/// Marker: `IBV_ACCESS_ZERO_BASED` is set on a memory window: remote addresses are offsets
/// from the window's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ZeroBased;

/// The rights behind an rkey: a region's [`Access`] set or a window's [`WindowAccess`].
/// [`RemoteSlice`](crate::mr::RemoteSlice) is typed by them. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` are not rights an rkey can carry",
    label = "neither a legal region access set nor a window's access",
    note = "ibv_reg_mr(3): \"If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too.\" No region is registered with this set, so no rkey grants it",
    note = "type a peer's region by the set it was registered with (`access::RemoteRw`, ...), a window by its rights (`access::window::Write`, ...)"
)]
pub trait RemoteRights: sealed::Sealed + Copy + Send + Sync + fmt::Debug + 'static {
    /// True when remote addresses are offsets from the start of a zero-based window.
    const ZERO_BASED: bool;
    /// The rights a peer holding the rkey has: the `IBV_ACCESS_REMOTE_WRITE`, `_READ` and
    /// `_ATOMIC` bits of the set.
    const REMOTE: u32;
}

/// The remote-access bits of `IBV_ACCESS_*` flags.
pub(crate) const REMOTE_BITS: u32 =
    sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_READ | sys::IBV_ACCESS_REMOTE_ATOMIC;

impl<LW, RW, RR, RA, MB> RemoteRights for Access<LW, RW, RR, RA, MB>
where
    Self: LegalAccess,
{
    const ZERO_BASED: bool = false;
    const REMOTE: u32 = <Self as AccessSet>::BITS & REMOTE_BITS;
}

/// The access a memory window grants (`mw_access_flags` of ibv_bind_mw(3)): each position is
/// the flag's marker or `()`: [`RemoteWrite`], [`RemoteRead`], [`RemoteAtomic`],
/// [`ZeroBased`].
///
/// ibv_bind_mw(3): REMOTE_WRITE and REMOTE_ATOMIC windows "require local write access to the
/// MR" ([`WindowOn`]).
pub struct WindowAccess<RW = (), RR = (), RA = (), ZB = ()>(PhantomData<WindowFlags<RW, RR, RA, ZB>>);

type WindowFlags<RW, RR, RA, ZB> = fn() -> (RW, RR, RA, ZB);

impl<RW, RR, RA, ZB> Clone for WindowAccess<RW, RR, RA, ZB> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<RW, RR, RA, ZB> Copy for WindowAccess<RW, RR, RA, ZB> {}
impl<RW, RR, RA, ZB> Default for WindowAccess<RW, RR, RA, ZB> {
    fn default() -> Self {
        WindowAccess(PhantomData)
    }
}

impl WindowAccess {
    /// No access: a window nobody can use (the start of the builder).
    pub const NONE: WindowAccess = WindowAccess(PhantomData);
}

impl<RW, RR, RA, ZB> WindowAccess<RW, RR, RA, ZB> {
    const fn new() -> Self {
        WindowAccess(PhantomData)
    }
    /// Adds `IBV_ACCESS_REMOTE_WRITE` (the MR needs LOCAL_WRITE).
    pub const fn remote_write(self) -> WindowAccess<RemoteWrite, RR, RA, ZB> {
        WindowAccess::new()
    }
    /// Adds `IBV_ACCESS_REMOTE_READ`.
    pub const fn remote_read(self) -> WindowAccess<RW, RemoteRead, RA, ZB> {
        WindowAccess::new()
    }
    /// Adds `IBV_ACCESS_REMOTE_ATOMIC` (the MR needs LOCAL_WRITE).
    pub const fn remote_atomic(self) -> WindowAccess<RW, RR, RemoteAtomic, ZB> {
        WindowAccess::new()
    }
    /// Adds `IBV_ACCESS_ZERO_BASED`: remote addresses become offsets from the window start
    /// (type 2 windows only).
    pub const fn zero_based(self) -> WindowAccess<RW, RR, RA, ZeroBased> {
        WindowAccess::new()
    }
}

mod window_sealed {
    pub trait Flag<const BIT: u32> {
        const SET: bool;
    }
}
macro_rules! window_flag {
    ($($marker:ident => $bit:path),* $(,)?) => {$(
        impl window_sealed::Flag<{ $bit }> for $marker { const SET: bool = true; }
        impl window_sealed::Flag<{ $bit }> for () { const SET: bool = false; }
    )*};
}
window_flag! {
    RemoteWrite => sys::IBV_ACCESS_REMOTE_WRITE,
    RemoteRead => sys::IBV_ACCESS_REMOTE_READ,
    RemoteAtomic => sys::IBV_ACCESS_REMOTE_ATOMIC,
    ZeroBased => sys::IBV_ACCESS_ZERO_BASED,
}

/// A window access set. Sealed; implemented by [`WindowAccess`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a set of memory window rights",
    label = "a window is bound with `WindowAccess` rights, not a memory region's `Access` set",
    note = "ibv_bind_mw(3): mw_access_flags are IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC and IBV_ACCESS_ZERO_BASED",
    note = "use `access::window::READ`, `WRITE`, `READ_WRITE` or `ALL`, or build the rights from `WindowAccess::NONE` (`.remote_read()`, `.remote_write()`, `.remote_atomic()`, `.zero_based()`)"
)]
pub trait WindowRights: RemoteRights {
    /// The `IBV_ACCESS_*` bits of `mw_access_flags`.
    const BITS: u32;
}

impl<RW, RR, RA, ZB> sealed::Sealed for WindowAccess<RW, RR, RA, ZB>
where
    RW: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_WRITE }>,
    RR: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_READ }>,
    RA: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_ATOMIC }>,
    ZB: window_sealed::Flag<{ sys::IBV_ACCESS_ZERO_BASED }>,
{
}

impl<RW, RR, RA, ZB> RemoteRights for WindowAccess<RW, RR, RA, ZB>
where
    Self: sealed::Sealed,
    RW: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_WRITE }> + 'static,
    RR: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_READ }> + 'static,
    RA: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_ATOMIC }> + 'static,
    ZB: window_sealed::Flag<{ sys::IBV_ACCESS_ZERO_BASED }> + 'static,
{
    const ZERO_BASED: bool = ZB::SET;
    const REMOTE: u32 = bit(RW::SET, sys::IBV_ACCESS_REMOTE_WRITE)
        | bit(RR::SET, sys::IBV_ACCESS_REMOTE_READ)
        | bit(RA::SET, sys::IBV_ACCESS_REMOTE_ATOMIC);
}

impl<RW, RR, RA, ZB> WindowRights for WindowAccess<RW, RR, RA, ZB>
where
    Self: RemoteRights,
    RW: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_WRITE }> + 'static,
    RR: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_READ }> + 'static,
    RA: window_sealed::Flag<{ sys::IBV_ACCESS_REMOTE_ATOMIC }> + 'static,
    ZB: window_sealed::Flag<{ sys::IBV_ACCESS_ZERO_BASED }> + 'static,
{
    const BITS: u32 = bit(RW::SET, sys::IBV_ACCESS_REMOTE_WRITE)
        | bit(RR::SET, sys::IBV_ACCESS_REMOTE_READ)
        | bit(RA::SET, sys::IBV_ACCESS_REMOTE_ATOMIC)
        | bit(ZB::SET, sys::IBV_ACCESS_ZERO_BASED);
}

impl<RR, RA, ZB> HasRemoteWrite for WindowAccess<RemoteWrite, RR, RA, ZB> where Self: RemoteRights {}
impl<RW, RA, ZB> HasRemoteRead for WindowAccess<RW, RemoteRead, RA, ZB> where Self: RemoteRights {}
impl<RW, RR, ZB> HasRemoteAtomic for WindowAccess<RW, RR, RemoteAtomic, ZB> where Self: RemoteRights {}

/// A region that can host a window granting REMOTE_WRITE or REMOTE_ATOMIC: MW_BIND and
/// LOCAL_WRITE.
#[diagnostic::on_unimplemented(
    message = "a window with REMOTE_WRITE or REMOTE_ATOMIC needs a region with IBV_ACCESS_LOCAL_WRITE; `{Self}` lacks it",
    label = "these window rights grant remote write or atomic access; the region they are bound to was registered without IBV_ACCESS_LOCAL_WRITE",
    note = "ibv_bind_mw(3): \"IBV_ACCESS_REMOTE_WRITE Enable Remote Write Access. Requires local write access to the MR.\" (likewise IBV_ACCESS_REMOTE_ATOMIC)",
    note = "register the region with LOCAL_WRITE and MW_BIND (`access::WINDOW_BINDABLE`, or an `Access` set with `.local_write().mw_bind()`), or bind a window without remote write or atomic access (`access::window::READ`)"
)]
pub trait HostsWritableWindow: HasMwBind {}
impl<RW, RR, RA> HostsWritableWindow for Access<LocalWrite, RW, RR, RA, MwBind> where Self: HasMwBind {}

/// The window access set `Self` may be bound to a region with access set `MA`: MA has MW_BIND,
/// and a window with REMOTE_WRITE or REMOTE_ATOMIC needs MA to have LOCAL_WRITE too.
///
/// Its own message only shows when `Self` is not window rights at all (e.g. a region's
/// [`Access`] set); for window rights the unmet requirement on `MA` is reported.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a set of memory window rights",
    label = "a window is bound with `WindowAccess` rights, not a memory region's `Access` set",
    note = "ibv_bind_mw(3): mw_access_flags are IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC and IBV_ACCESS_ZERO_BASED",
    note = "use `access::window::READ`, `WRITE`, `READ_WRITE` or `ALL`, or build the rights from `WindowAccess::NONE` (`.remote_read()`, `.remote_write()`, `.remote_atomic()`, `.zero_based()`)"
)]
pub trait WindowOn<MA>: WindowRights {}
impl<MA: HasMwBind, RR, ZB> WindowOn<MA> for WindowAccess<(), RR, (), ZB> where Self: WindowRights {}
impl<MA: HostsWritableWindow, RR, RA, ZB> WindowOn<MA> for WindowAccess<RemoteWrite, RR, RA, ZB> where Self: WindowRights
{}
impl<MA: HostsWritableWindow, RR, ZB> WindowOn<MA> for WindowAccess<(), RR, RemoteAtomic, ZB> where Self: WindowRights {}

/// Rights without ZERO_BASED (what a type 1 window may have): window rights without
/// `.zero_based()`, and a region's [`Access`] sets, which are never zero-based. The latter are
/// not window rights at all ([`WindowOn`] refuses them with its own message); they implement
/// this trait only so that passing one as window rights does not also report a zero-based
/// window.
#[diagnostic::on_unimplemented(
    message = "a type 1 memory window cannot be zero-based",
    label = "drop `.zero_based()` or use a type 2 window",
    note = "IBTA o10-36.2.2: type 1 windows are bound with virtual addresses; zero-based addressing (IBV_ACCESS_ZERO_BASED) is for type 2 windows"
)]
pub trait VirtuallyAddressed {}
impl<RW, RR, RA> VirtuallyAddressed for WindowAccess<RW, RR, RA, ()> where Self: WindowRights {}
impl<LW, RW, RR, RA, MB> VirtuallyAddressed for Access<LW, RW, RR, RA, MB> {}

/// Window presets.
pub mod window {
    use super::{RemoteAtomic, RemoteRead, RemoteWrite, WindowAccess};
    /// A window peers may read.
    pub type Read = WindowAccess<(), RemoteRead>;
    /// A window peers may write.
    pub type Write = WindowAccess<RemoteWrite>;
    /// A window peers may read and write.
    pub type ReadWrite = WindowAccess<RemoteWrite, RemoteRead>;
    /// A window peers may read, write and use atomics on.
    pub type All = WindowAccess<RemoteWrite, RemoteRead, RemoteAtomic>;
    /// Value of [`Read`].
    pub const READ: Read = WindowAccess::NONE.remote_read();
    /// Value of [`Write`].
    pub const WRITE: Write = WindowAccess::NONE.remote_write();
    /// Value of [`ReadWrite`].
    pub const READ_WRITE: ReadWrite = WindowAccess::NONE.remote_write().remote_read();
    /// Value of [`All`].
    pub const ALL: All = READ_WRITE.remote_atomic();
}

/// Local read only (no flag).
pub type LocalRead = Access;
/// `LOCAL_WRITE`: receive buffers, RDMA READ destinations.
pub type LocalRw = Access<LocalWrite>;
/// `REMOTE_READ`: a buffer peers may read but never write.
pub type RemoteReadOnly = Access<(), (), RemoteRead>;
/// `LOCAL_WRITE | REMOTE_WRITE`.
pub type LocalRemoteWrite = Access<LocalWrite, RemoteWrite>;
/// `LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ`: a buffer peers may read and write.
pub type RemoteRw = Access<LocalWrite, RemoteWrite, RemoteRead>;
/// `LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC`.
pub type RemoteAll = Access<LocalWrite, RemoteWrite, RemoteRead, RemoteAtomic>;
/// `LOCAL_WRITE | MW_BIND`: a region exposed only through memory windows.
pub type WindowBindable = Access<LocalWrite, (), (), (), MwBind>;
/// Every flag.
pub type Full = Access<LocalWrite, RemoteWrite, RemoteRead, RemoteAtomic, MwBind>;

/// Value of [`LocalRead`].
pub const LOCAL_READ: LocalRead = Access::NONE;
/// Value of [`LocalRw`].
pub const LOCAL_RW: LocalRw = Access::NONE.local_write();
/// Value of [`RemoteReadOnly`].
pub const REMOTE_READ_ONLY: RemoteReadOnly = Access::NONE.remote_read();
/// Value of [`LocalRemoteWrite`].
pub const LOCAL_REMOTE_WRITE: LocalRemoteWrite = Access::NONE.local_write().remote_write();
/// Value of [`RemoteRw`].
pub const REMOTE_RW: RemoteRw = Access::NONE.local_write().remote_write().remote_read();
/// Value of [`RemoteAll`].
pub const REMOTE_ALL: RemoteAll = REMOTE_RW.remote_atomic();
/// Value of [`WindowBindable`].
pub const WINDOW_BINDABLE: WindowBindable = Access::NONE.local_write().mw_bind();
/// Value of [`Full`].
pub const FULL: Full = REMOTE_ALL.mw_bind();

#[cfg(test)]
mod tests {
    use super::*;

    fn bits<A: AccessSet>(_: A) -> u32 {
        A::BITS
    }

    #[test]
    fn bits_match_the_c_flags() {
        assert_eq!(bits(LOCAL_READ), 0);
        assert_eq!(bits(LOCAL_RW), sys::IBV_ACCESS_LOCAL_WRITE);
        assert_eq!(
            bits(REMOTE_RW),
            sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_READ
        );
        assert_eq!(
            bits(FULL),
            sys::IBV_ACCESS_LOCAL_WRITE
                | sys::IBV_ACCESS_REMOTE_WRITE
                | sys::IBV_ACCESS_REMOTE_READ
                | sys::IBV_ACCESS_REMOTE_ATOMIC
                | sys::IBV_ACCESS_MW_BIND
        );
        assert_eq!(bits(Access::NONE.mw_bind().remote_read()), sys::IBV_ACCESS_MW_BIND | sys::IBV_ACCESS_REMOTE_READ);
    }

    #[test]
    fn a_qp_takes_the_remote_bits_of_a_set() {
        let remote = sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_READ | sys::IBV_ACCESS_REMOTE_ATOMIC;
        assert_eq!(qp_access_flags(Access::NONE), 0);
        assert_eq!(qp_access_flags(LOCAL_RW), 0);
        assert_eq!(qp_access_flags(WINDOW_BINDABLE), 0);
        assert_eq!(qp_access_flags(REMOTE_READ_ONLY), sys::IBV_ACCESS_REMOTE_READ);
        assert_eq!(qp_access_flags(Access::NONE.remote_write()), sys::IBV_ACCESS_REMOTE_WRITE);
        assert_eq!(qp_access_flags(REMOTE_RW), sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_READ);
        assert_eq!(qp_access_flags(REMOTE_ALL), remote);
        assert_eq!(qp_access_flags(FULL), remote);
    }

    fn legal<A: LegalAccess>(_: A) {}

    #[test]
    fn every_legal_preset_is_legal() {
        legal(LOCAL_READ);
        legal(LOCAL_RW);
        legal(REMOTE_READ_ONLY);
        legal(LOCAL_REMOTE_WRITE);
        legal(REMOTE_RW);
        legal(REMOTE_ALL);
        legal(WINDOW_BINDABLE);
        legal(FULL);
    }
}
