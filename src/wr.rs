//! Work requests: one struct per opcode of ibv_post_send(3), and [`Recv`] for
//! ibv_post_recv(3).
//!
//! Required arguments go to `new`; everything optional is a wrapper added by a method of
//! [`SendRequest`], and each rule of the man page is one trait bound checked when posting:
//!
//! | rule (ibv_post_send(3)) | trait | wrapper / type |
//! |---|---|---|
//! | the opcode table | [`SendWr<T>`] via the `Supports*` traits of [`crate::transport`] | one struct per opcode |
//! | `IBV_SEND_FENCE` only on RC | [`SupportsFence`] | [`Fenced`] (`.fence()`) |
//! | `IBV_SEND_SOLICITED` only for Send and RDMA Write with immediate | [`AllowsSolicited`] | [`Solicited`] (`.solicited()`) |
//! | `IBV_SEND_INLINE` only for Send and RDMA Write | [`InlineWr`] | [`InlineSend`], [`InlineSendImm`], [`InlineSendInv`], [`InlineWrite`], [`InlineWriteImm`] |
//! | `IBV_SEND_IP_CSUM` only where the device reports checksum offload | a [`IpCsum<T>`](crate::device::IpCsum) value | [`Checksummed`] (`.ip_csum(cap)`) |
//! | UD sends carry an address handle, remote QPN and Q_Key | [`AddressedFor<T>`] | [`To`] (`.to(&ah, qpn, qkey)`) |
//! | `IBV_SEND_SIGNALED` per request (QPs are created with `sq_sig_all = 0`) | — | [`Unsignaled`] (`.unsignaled()`) |
//!
//! A work request holds the views of registered memory it uses
//! ([`LocalBuf`](crate::mr::LocalBuf), [`LocalBufMut`](crate::mr::LocalBufMut)); posting it
//! in a [scope](crate::scope) moves them into a token, which hands them back with the
//! completion. Inline requests copy their bytes during the post and borrow them only for the
//! call.

use std::marker::PhantomData;

use typed_verbs_sys as sys;

use crate::access::{AccessSet, HasRemoteAtomic, HasRemoteRead, HasRemoteWrite, WindowOn, WindowRights};
use crate::ah::Ah;
use crate::device::{IpCsum, TsoCap, TsoTransport};
use crate::error::{Error, Result};
use crate::mr::{LocalSink, Mr, OdpTag, RemoteSlice, WindowRegion};
use crate::mw::{
    inc_rkey, BoundByWr, BoundMw, Invalidatable, Invalidated, InvalidationWatch, Mw, MwType, PendingBind,
    PendingUnbind, RegionBorrow, UnboundWindow,
};
use crate::sgl::{Gather, Scatter, SgeStore};
use crate::transport::{
    SupportsAtomics, SupportsBindMw, SupportsFence, SupportsLocalInv, SupportsRdmaRead, SupportsRdmaWrite,
    SupportsSend, SupportsSendImm, SupportsSendInv, Transport, Unaddressed, UD,
};

mod sealed {
    sealed_trait!();
}

/// The raw work request being built, with room for its scatter/gather entries (`S`, sized by
/// the request's type); only the library can look inside.
#[derive(Clone, Copy)]
pub struct RawSendWr<S = [sys::ibv_sge; 1]> {
    pub(crate) wr: sys::ibv_send_wr,
    pub(crate) sges: S,
    pub(crate) num_sge: i32,
    /// The ODP verification of the local memory, and the operation (`IBV_ODP_SUPPORT_*`).
    pub(crate) odp: OdpTag,
    pub(crate) odp_op: u32,
    /// The PD of the local memory or window the request names: checked against the QP's
    /// before posting.
    pub(crate) pd: Option<crate::pd::PdId>,
}

impl<S: SgeStore> RawSendWr<S> {
    pub(crate) fn new() -> Self {
        RawSendWr {
            wr: sys::ibv_send_wr::default(),
            sges: S::empty(),
            num_sge: 0,
            odp: OdpTag::default(),
            odp_op: 0,
            pd: None,
        }
    }

    /// Names `local` as the request's memory, for an operation `op` (`IBV_ODP_SUPPORT_*`).
    ///
    /// # Errors
    /// As [`Gather::collect`]: entries of different PDs, a misplaced ODP entry the device writes.
    #[inline(always)]
    fn local<G: Gather<Sges = S>>(&mut self, local: &G, op: u32) -> Result<()> {
        let c = local.collect("ibv_post_send")?;
        self.sges = c.sges;
        self.num_sge = c.num_sge;
        self.odp = c.odp;
        self.odp_op = op;
        self.pd = c.pd;
        Ok(())
    }

    /// The entries in use.
    pub(crate) fn used_sges(&self) -> &[sys::ibv_sge] {
        &self.sges.entries()[..self.num_sge as usize]
    }

    /// Points the request at its own entries (after the last move of `self`).
    #[inline(always)]
    pub(crate) fn link_sges(&mut self) {
        self.wr.sg_list = self.sges.entries_mut().as_mut_ptr();
        self.wr.num_sge = self.num_sge;
    }
}

/// The QP a request was posted on; only the library makes one.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct PostedOn<'a>(pub(crate) &'a crate::qp::QpShared);

/// A send work request, whatever the transport. Sealed; its methods add the optional flags.
pub trait SendRequest: sealed::Sealed + Sized {
    /// The memory views handed back with the completion.
    #[doc(hidden)]
    type Buffers: crate::scope::Completes;
    /// The storage of its scatter/gather entries.
    #[doc(hidden)]
    type Sges: SgeStore;
    /// Fills the raw work request, validating what can only be checked at run time.
    #[doc(hidden)]
    fn build(&self, raw: &mut RawSendWr<Self::Sges>) -> Result<()>;
    /// Gives up the memory views (a bind's: starts watching for the new rkey's invalidation,
    /// which only a posted bind may do). Only the library can call it
    /// ([`Completes`](crate::scope::Completes)' proof).
    #[doc(hidden)]
    fn into_buffers(self, _: crate::scope::sealed::Internal) -> Self::Buffers;
    /// The inline payload length, for inline requests (checked against `max_inline_data`).
    #[doc(hidden)]
    fn inline_len(&self) -> Option<usize> {
        None
    }
    /// The address handle the request uses, kept alive until it completes.
    #[doc(hidden)]
    fn address_handle(&self) -> Option<&Ah> {
        None
    }
    /// Whether every device capability the request carries ([`IpCsum`](crate::device::IpCsum),
    /// [`TsoCap`](crate::device::TsoCap)) was reported by the context `ctx`
    /// ([`ContextInner::id`](crate::device::ContextInner)): a capability is that device's word.
    #[doc(hidden)]
    fn capabilities_of(&self, ctx: u64) -> bool {
        let _ = ctx;
        true
    }
    /// The request needs the device's atomic operations: an atomic, or a window bind granting
    /// remote atomics (refused on a device without them, before the provider sees it).
    #[doc(hidden)]
    const ATOMICS: bool = false;
    /// The provider accepted the request on `qp`, or may have queued it: a type 2 window bind
    /// keeps the QP with the window (`MwInner::hold`).
    #[doc(hidden)]
    fn posted_on(&self, qp: PostedOn<'_>) {
        let _ = qp;
    }
    /// The last step of building a SEND_WITH_INV or a LOCAL_INV for `qp`: claims the window
    /// binding it invalidates, or refuses it if the binding was or is being invalidated
    /// (a second invalidation crashes rxe's kernel); given back by [`SendRequest::not_posted`].
    #[doc(hidden)]
    fn claim(&self, qp: PostedOn<'_>) -> Result<()> {
        let _ = qp;
        Ok(())
    }
    /// The request was built for `qp` but certainly not posted (the provider, or the library
    /// before it, refused it and it is handed back): a claim its build made on a window
    /// (`mw::claim_remote_invalidation`, a LOCAL_INV's) is given back.
    #[doc(hidden)]
    fn not_posted(&self, qp: PostedOn<'_>) {
        let _ = qp;
    }
    /// The request is a LOCAL_INV: the QP's receive completions are taken off its CQ first, so
    /// that an invalidation by a peer's SEND_WITH_INV is known before it is built.
    #[doc(hidden)]
    const LOCAL_INV: bool = false;
    /// The request is a SEND_WITH_INV: to a peer on the QP's own device, the rkey it
    /// invalidates ([`SendRequest::invalidated_rkey`]) must be a live binding of the process's
    /// windows there, which it claims (`mw::claim_remote_invalidation`).
    #[doc(hidden)]
    const SEND_INV: bool = false;
    /// The rkey a SEND_WITH_INV invalidates at the peer (0 for other requests).
    #[doc(hidden)]
    fn invalidated_rkey(&self) -> u32 {
        0
    }

    /// Clears `IBV_SEND_SIGNALED`: no completion of its own; the request is known complete
    /// when a later signaled request of the same send queue completes. Not for a window bind
    /// ([`MaySkipCompletion`]).
    fn unsignaled(self) -> Unsignaled<Self>
    where
        Self: MaySkipCompletion,
    {
        Unsignaled(self)
    }
    /// Sets `IBV_SEND_FENCE` (RC only): wait for prior RDMA READ and atomic requests first.
    fn fence(self) -> Fenced<Self> {
        Fenced(self)
    }
    /// Sets `IBV_SEND_SOLICITED`: the receiver gets a solicited event. Valid only for Send and
    /// RDMA Write with immediate.
    fn solicited(self) -> Solicited<Self>
    where
        Self: AllowsSolicited,
    {
        Solicited(self)
    }
    /// Sets `IBV_SEND_IP_CSUM`: the device computes the IPv4 and TCP/UDP checksums. Needs the
    /// capability value from [`DeviceAttr::ip_csum`](crate::device::DeviceAttr::ip_csum),
    /// which exists only when the device reports checksum offload for transport `T`.
    fn ip_csum<T: Transport>(self, cap: IpCsum<T>) -> Checksummed<Self, T> {
        Checksummed(self, cap)
    }
    /// The destination of a UD send: an address handle, the remote QP number and its Q_Key.
    /// The address handle stays borrowed until the request completes. A request has one
    /// destination: `.to` on a request that already has one does not compile ([`Undirected`]).
    /// A `remote_qpn` beyond 24 bits is refused when posting ([`Error::InvalidArgument`]).
    fn to(self, ah: &Ah, remote_qpn: u32, remote_qkey: u32) -> To<'_, Self>
    where
        Self: Undirected,
    {
        To { wr: self, ah, remote_qpn, remote_qkey }
    }
}

/// A work request that may be posted to the send queue of a `T` queue pair: implemented
/// exactly for the opcode/transport pairs the ibv_post_send(3) opcode table allows.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be posted on a {T} queue pair",
    label = "not a valid send work request for this transport",
    note = "ibv_post_send(3): the opcode table and the flag rules decide what each transport accepts; a destination (`.to(&ah, qpn, qkey)`) applies to UD queue pairs only, an IpCsum<T> capability to T queue pairs only"
)]
pub trait SendWr<T: Transport>: SendRequest {}

/// Whether the request carries the destination transport `T` needs: nothing for the
/// [`Unaddressed`] transports, an address handle, remote QPN and Q_Key ([`To`]) for UD.
///
/// On UD it holds for `To<_>`, for a flag wrapper around a request that holds it (so the flags
/// may come before or after `.to(...)`), and for the requests whose opcode UD does not accept
/// at all (RDMA, atomics, SEND_WITH_INV, BIND_MW, LOCAL_INV): those carry no destination
/// because they cannot be posted on UD, which [`SendWr<UD>`] reports with the opcode table's
/// words instead of a request for a destination.
#[diagnostic::on_unimplemented(
    message = "a send on a {T} queue pair needs a destination: an address handle, the remote QPN and its Q_Key",
    label = "add `.to(&ah, remote_qpn, remote_qkey)` to the work request",
    note = "ibv_post_send(3): UD work requests carry wr.ud.ah, wr.ud.remote_qpn and wr.ud.remote_qkey"
)]
pub trait AddressedFor<T: Transport> {}
impl<T: Unaddressed, W> AddressedFor<T> for W {}
impl<W> AddressedFor<UD> for To<'_, W> {}

/// A request without a destination yet: what [`SendRequest::to`] accepts. Every request and
/// flag wrapper holds it until `.to(...)` gives it one; a second `.to` would leave one address
/// handle borrowed and unused beside the one the provider reads, so it does not compile.
#[diagnostic::on_unimplemented(
    message = "`{Self}` already has a destination",
    label = "a second `.to(...)` on a request that has one",
    note = "ibv_post_send(3): a UD work request carries one destination (wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey): call `.to(&ah, remote_qpn, remote_qkey)` once",
    note = "in generic code, a request type that gets its destination here needs the bound `Undirected`"
)]
pub trait Undirected: SendRequest {}
impl<W: Undirected> Undirected for Unsignaled<W> {}
impl<W: Undirected> Undirected for Fenced<W> {}
impl<W: Undirected> Undirected for Solicited<W> {}
impl<W: Undirected, T: Transport> Undirected for Checksummed<W, T> {}
impl<W: AddressedFor<UD>> AddressedFor<UD> for Unsignaled<W> {}
impl<W: AddressedFor<UD>> AddressedFor<UD> for Fenced<W> {}
impl<W: AddressedFor<UD>> AddressedFor<UD> for Solicited<W> {}
impl<W: AddressedFor<UD>, T: Transport> AddressedFor<UD> for Checksummed<W, T> {}

/// A request that may go without a completion of its own ([`SendRequest::unsignaled`]): every
/// request but a window bind ([`BindMw`]). ibv_bind_mw(3) NOTES: "the user should keep a copy
/// of the old R_key, and fix the mw structure if the subsequent CQE for the bind operation
/// indicates a failure": the bound window is handed back by the bind's own completion. An
/// unsignaled bind has none; if its QP is then flushed or reset (another scope's drain may
/// force it), the library could not tell a bind that ran from one that did not, and would hand
/// the window back unbound while the device holds it bound.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be unsignaled: a window bind needs its own completion",
    label = "`.unsignaled()` on a window bind",
    note = "ibv_bind_mw(3) NOTES: \"the user should keep a copy of the old R_key, and fix the mw structure if the subsequent CQE for the bind operation indicates a failure\": the library hands the bound window back from the bind's own completion",
    note = "post the bind without `.unsignaled()`; `Scope::wait` on its token returns the `BoundMw`, or the window back if the bind failed"
)]
pub trait MaySkipCompletion: SendRequest {}
// The flag wrappers and `To` carry their request's (`wrapper!`).
impl<L: Gather, T: TsoTransport> MaySkipCompletion for Tso<'_, L, T> {}
impl<K: MwType, R: WindowRights> MaySkipCompletion for LocalInv<'_, K, R> {}

/// Requests whose opcode the ibv_post_send(3) opcode table does not allow on UD: nothing to
/// address there (see [`AddressedFor`]); posting them on UD fails [`SendWr<UD>`].
macro_rules! not_on_ud {
    ($([$($gen:tt)*] $ty:ty;)*) => {$(
        impl<$($gen)*> AddressedFor<UD> for $ty {}
    )*};
}
not_on_ud! {
    [L, A] Write<L, A>;
    [L, A] WriteImm<L, A>;
    [L, A] Read<L, A>;
    [L, A] CompareSwap<L, A>;
    [L, A] FetchAdd<L, A>;
    ['d, A, const N: usize] InlineWrite<'d, A, N>;
    ['d, A, const N: usize] InlineWriteImm<'d, A, N>;
    [L] SendInv<L>;
    ['d, const N: usize] InlineSendInv<'d, N>;
    ['m, K: MwType, MA: AccessSet, R] BindMw<'m, K, MA, R>;
    ['m, K: MwType, R] LocalInv<'m, K, R>;
}

/// Opcodes that may carry `IBV_SEND_SOLICITED`.
#[diagnostic::on_unimplemented(
    message = "IBV_SEND_SOLICITED is not valid on `{Self}`",
    label = "no solicited event for this opcode",
    note = "ibv_post_send(3): \"IBV_SEND_SOLICITED Set the solicited event indicator. Valid only for Send and RDMA Write with immediate\""
)]
pub trait AllowsSolicited: SendRequest {}

/// Requests whose payload is copied into the work queue entry (`IBV_SEND_INLINE`), so that the
/// memory is released when the post returns.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an inline request: IBV_SEND_INLINE is valid only for Send and RDMA Write, whose inline forms are the `Inline*` requests",
    label = "not an inline request",
    note = "ibv_post_send(3): \"IBV_SEND_INLINE Send data in given gather list as inline data in a send WQE. Valid only for Send and RDMA Write.\"",
    note = "use InlineSend, InlineSendImm, InlineSendInv, InlineWrite or InlineWriteImm"
)]
pub trait InlineWr: SendRequest {}

/// `IBV_WR_SEND`: sends `local` to the peer's next receive buffer. `L` is borrowed
/// ([`LocalBuf`](crate::mr::LocalBuf)) or owned ([`Chunk`](crate::mr::Chunk)) memory the device reads.
#[derive(Debug)]
pub struct Send<L> {
    local: L,
}

impl<L: Gather> Send<L> {
    /// Sends the bytes of `local`.
    pub fn new(local: L) -> Self {
        Send { local }
    }
}

/// `IBV_WR_SEND_WITH_IMM`: a send that also delivers 32 bits of immediate data.
#[derive(Debug)]
pub struct SendImm<L> {
    local: L,
    imm: u32,
}

impl<L: Gather> SendImm<L> {
    /// Sends `local` with immediate data `imm` (host byte order; sent in network order).
    pub fn new(local: L, imm: u32) -> Self {
        SendImm { local, imm }
    }
}

/// `IBV_WR_RDMA_WRITE`: writes `local` into the peer's memory at `remote`.
#[derive(Debug)]
pub struct Write<L, A> {
    local: L,
    remote: RemoteSlice<A>,
}

impl<L: Gather, A: HasRemoteWrite> Write<L, A> {
    /// Writes the bytes of `local` to the start of `remote`, which must allow remote writes.
    pub fn new(local: L, remote: RemoteSlice<A>) -> Self {
        Write { local, remote }
    }
}

/// `IBV_WR_RDMA_WRITE_WITH_IMM`: an RDMA WRITE that also consumes a receive at the peer and
/// delivers immediate data.
#[derive(Debug)]
pub struct WriteImm<L, A> {
    local: L,
    remote: RemoteSlice<A>,
    imm: u32,
}

impl<L: Gather, A: HasRemoteWrite> WriteImm<L, A> {
    /// Writes `local` to `remote` with immediate data `imm` (host byte order).
    pub fn new(local: L, remote: RemoteSlice<A>, imm: u32) -> Self {
        WriteImm { local, remote, imm }
    }
}

/// `IBV_WR_RDMA_READ`: reads the peer's memory at `remote` into `local`, which the device
/// writes (LOCAL_WRITE for every entry, checked by [`Scatter`]).
#[derive(Debug)]
pub struct Read<L, A> {
    local: L,
    remote: RemoteSlice<A>,
}

impl<L: Scatter, A: HasRemoteRead> Read<L, A> {
    /// Reads `local.len()` bytes from `remote`, which must allow remote reads, into `local`.
    pub fn new(local: L, remote: RemoteSlice<A>) -> Self {
        Read { local, remote }
    }
}

/// `IBV_WR_ATOMIC_CMP_AND_SWP`: if the 8 bytes at `remote` equal `compare`, replace them with
/// `swap`; the original value lands in `result` (in the remote's byte order, i.e. as stored).
#[derive(Debug)]
pub struct CompareSwap<L, A> {
    result: L,
    remote: RemoteSlice<A>,
    compare: u64,
    swap: u64,
}

impl<L: LocalSink, A: HasRemoteAtomic> CompareSwap<L, A> {
    /// Compare-and-swap on the 8 bytes at the start of `remote`. `result` must be 8 bytes at
    /// an 8-byte aligned address and `remote` 8-byte aligned; checked when posting
    /// ([`Error::InvalidArgument`], the request handed back).
    pub fn new(result: L, remote: RemoteSlice<A>, compare: u64, swap: u64) -> Self {
        CompareSwap { result, remote, compare, swap }
    }
}

impl<L, A> CompareSwap<L, A> {
    /// Gives the result buffer back (e.g. after a refused post).
    pub fn into_result(self) -> L {
        self.result
    }
}

/// `IBV_WR_ATOMIC_FETCH_AND_ADD`: add `add` to the 8 bytes at `remote`; the original value
/// lands in `result`.
#[derive(Debug)]
pub struct FetchAdd<L, A> {
    result: L,
    remote: RemoteSlice<A>,
    add: u64,
}

impl<L: LocalSink, A: HasRemoteAtomic> FetchAdd<L, A> {
    /// Fetch-and-add on the 8 bytes at the start of `remote`. Same checks as
    /// [`CompareSwap::new`].
    pub fn new(result: L, remote: RemoteSlice<A>, add: u64) -> Self {
        FetchAdd { result, remote, add }
    }
}

impl<L, A> FetchAdd<L, A> {
    /// Gives the result buffer back (e.g. after a refused post).
    pub fn into_result(self) -> L {
        self.result
    }
}

/// `IBV_WR_SEND` with `IBV_SEND_INLINE`: the bytes are copied into the work request, so they
/// are borrowed only for the call and need no registration. `N` pieces are gathered in order
/// ([`InlineSend::gather`]); their total must fit the QP's `max_inline_data`.
#[derive(Debug)]
pub struct InlineSend<'d, const N: usize = 1> {
    data: [&'d [u8]; N],
}

impl<'d> InlineSend<'d> {
    /// Sends `data` inline (at most the QP's `max_inline_data` bytes, checked when posting).
    pub fn new(data: &'d [u8]) -> Self {
        InlineSend { data: [data] }
    }
}

impl<'d, const N: usize> InlineSend<'d, N> {
    /// Sends the `parts` one after the other, inline: one scatter/gather entry each (at most
    /// the QP's `max_send_sge` entries and `max_inline_data` bytes in all, checked when
    /// posting).
    pub fn gather(parts: [&'d [u8]; N]) -> Self {
        InlineSend { data: parts }
    }
}

/// `IBV_WR_SEND_WITH_IMM` with `IBV_SEND_INLINE`.
#[derive(Debug)]
pub struct InlineSendImm<'d, const N: usize = 1> {
    data: [&'d [u8]; N],
    imm: u32,
}

impl<'d> InlineSendImm<'d> {
    /// Sends `data` inline with immediate data `imm` (host byte order).
    pub fn new(data: &'d [u8], imm: u32) -> Self {
        InlineSendImm { data: [data], imm }
    }
}

impl<'d, const N: usize> InlineSendImm<'d, N> {
    /// Sends the `parts` inline, gathered in order, with immediate data `imm` (see
    /// [`InlineSend::gather`]).
    pub fn gather(parts: [&'d [u8]; N], imm: u32) -> Self {
        InlineSendImm { data: parts, imm }
    }
}

/// `IBV_WR_RDMA_WRITE` with `IBV_SEND_INLINE`.
#[derive(Debug)]
pub struct InlineWrite<'d, A, const N: usize = 1> {
    data: [&'d [u8]; N],
    remote: RemoteSlice<A>,
}

impl<'d, A: HasRemoteWrite> InlineWrite<'d, A> {
    /// Writes `data` inline to the start of `remote`.
    pub fn new(data: &'d [u8], remote: RemoteSlice<A>) -> Self {
        InlineWrite { data: [data], remote }
    }
}

impl<'d, A: HasRemoteWrite, const N: usize> InlineWrite<'d, A, N> {
    /// Writes the `parts` inline, gathered in order, to the start of `remote` (see
    /// [`InlineSend::gather`]).
    pub fn gather(parts: [&'d [u8]; N], remote: RemoteSlice<A>) -> Self {
        InlineWrite { data: parts, remote }
    }
}

/// `IBV_WR_RDMA_WRITE_WITH_IMM` with `IBV_SEND_INLINE`.
#[derive(Debug)]
pub struct InlineWriteImm<'d, A, const N: usize = 1> {
    data: [&'d [u8]; N],
    remote: RemoteSlice<A>,
    imm: u32,
}

impl<'d, A: HasRemoteWrite> InlineWriteImm<'d, A> {
    /// Writes `data` inline to `remote` with immediate data `imm` (host byte order).
    pub fn new(data: &'d [u8], remote: RemoteSlice<A>, imm: u32) -> Self {
        InlineWriteImm { data: [data], remote, imm }
    }
}

impl<'d, A: HasRemoteWrite, const N: usize> InlineWriteImm<'d, A, N> {
    /// Writes the `parts` inline, gathered in order, to `remote` with immediate data `imm`
    /// (see [`InlineSend::gather`]).
    pub fn gather(parts: [&'d [u8]; N], remote: RemoteSlice<A>, imm: u32) -> Self {
        InlineWriteImm { data: parts, remote, imm }
    }
}

/// The total length of inline pieces, `usize::MAX` for pieces that add up past it (the same
/// slice gathered many times): above every QP's `max_inline_data`, so refused as too large.
fn inline_total(data: &[&[u8]]) -> usize {
    data.iter().fold(0, |total: usize, d| total.saturating_add(d.len()))
}

fn check_fits<A>(what: &'static str, len: u64, remote: &RemoteSlice<A>) -> Result<()> {
    if len > remote.len {
        return Err(Error::invalid(what, format!("{len} bytes do not fit the remote range of {} bytes", remote.len)));
    }
    Ok(())
}

fn check_atomic<L: LocalSink, A>(result: &L, remote: &RemoteSlice<A>) -> Result<()> {
    let result = result.sge();
    if result.length != 8 || result.addr % 8 != 0 {
        return Err(Error::invalid(
            "ibv_post_send (atomic)",
            format!(
                "the result buffer must be 8 bytes at an 8-byte aligned address (got {} bytes at {:#x})",
                result.length, result.addr
            ),
        ));
    }
    if remote.len < 8 || remote.addr % 8 != 0 {
        return Err(Error::invalid(
            "ibv_post_send (atomic)",
            format!(
                "the target must be 8 bytes at an 8-byte aligned address (got {} bytes at {:#x})",
                remote.len, remote.addr
            ),
        ));
    }
    Ok(())
}

fn rdma<A, S>(raw: &mut RawSendWr<S>, remote: &RemoteSlice<A>) {
    raw.wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: remote.addr, rkey: remote.rkey };
}

fn imm<S>(raw: &mut RawSendWr<S>, imm: u32) {
    raw.wr.__bindgen_anon_1.imm_data = imm.to_be();
}

fn inline_sge<const N: usize>(raw: &mut RawSendWr<[sys::ibv_sge; N]>, data: &[&[u8]; N]) -> Result<()> {
    raw.wr.send_flags |= sys::IBV_SEND_INLINE;
    // The provider copies the bytes during ibv_post_send; "The L_Key will not be checked".
    let mut n = 0;
    for d in data.iter().filter(|d| !d.is_empty()) {
        let length = u32::try_from(d.len())
            .map_err(|_| Error::invalid("ibv_post_send (inline)", "an inline piece is longer than u32::MAX bytes"))?;
        raw.sges[n] = sys::ibv_sge { addr: d.as_ptr() as u64, length, lkey: 0 };
        n += 1;
    }
    raw.num_sge = n as i32;
    Ok(())
}

macro_rules! request {
    ([$($gen:tt)*] $ty:ty, $bufs:ty, $sges:ty, |$s:ident, $raw:ident| $build:block, |$s2:ident| $into:expr $(, inline: |$s3:ident| $len:expr)? $(, atomics: $atomics:expr)? $(, invalidates: |$s4:ident| $rkey:expr)?) => {
        impl<$($gen)*> sealed::Sealed for $ty {}
        impl<$($gen)*> Undirected for $ty {}
        impl<$($gen)*> MaySkipCompletion for $ty {}
        impl<$($gen)*> SendRequest for $ty {
            type Buffers = $bufs;
            type Sges = $sges;
            $(const ATOMICS: bool = $atomics;)?
            $(const SEND_INV: bool = true;
            fn invalidated_rkey(&self) -> u32 {
                let $s4 = self;
                $rkey
            }
            fn claim(&self, qp: PostedOn<'_>) -> Result<()> {
                if !qp.0.peer_on_device() {
                    return Ok(());
                }
                crate::mw::claim_remote_invalidation(qp.0.device_tag(), self.invalidated_rkey())
            }
            fn not_posted(&self, qp: PostedOn<'_>) {
                if qp.0.peer_on_device() {
                    crate::mw::release_remote_claim(qp.0.device_tag(), self.invalidated_rkey());
                }
            })?
            #[inline(always)]
            fn build(&self, $raw: &mut RawSendWr<$sges>) -> Result<()> {
                let $s = self;
                $raw.wr.send_flags = sys::IBV_SEND_SIGNALED;
                $build
                Ok(())
            }
            fn into_buffers(self, _: crate::scope::sealed::Internal) -> $bufs {
                let $s2 = self;
                $into
            }
            $(fn inline_len(&self) -> Option<usize> {
                let $s3 = self;
                Some($len)
            })?
        }
    };
}

macro_rules! valid_on {
    ($cap:ident: [$($gen:tt)*] $ty:ty) => {
        impl<$($gen)*, T: $cap> SendWr<T> for $ty {}
    };
}

request!(
    [L: Gather] Send<L>,
    L,
    L::Sges,
    |s, raw| {
        raw.wr.opcode = sys::IBV_WR_SEND;
        raw.local(&s.local, sys::IBV_ODP_SUPPORT_SEND)?;
    },
    |s| s.local
);
valid_on!(SupportsSend: [L: Gather] Send<L>);

request!(
    [L: Gather] SendImm<L>,
    L,
    L::Sges,
    |s, raw| {
        raw.wr.opcode = sys::IBV_WR_SEND_WITH_IMM;
        imm(raw, s.imm);
        raw.local(&s.local, sys::IBV_ODP_SUPPORT_SEND)?;
    },
    |s| s.local
);
valid_on!(SupportsSendImm: [L: Gather] SendImm<L>);

request!(
    [L: Gather, A] Write<L, A>,
    L,
    L::Sges,
    |s, raw| {
        check_fits("ibv_post_send (RDMA WRITE)", s.local.total_len(), &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_RDMA_WRITE;
        rdma(raw, &s.remote);
        raw.local(&s.local, sys::IBV_ODP_SUPPORT_WRITE)?;
    },
    |s| s.local
);
valid_on!(SupportsRdmaWrite: [L: Gather, A] Write<L, A>);

request!(
    [L: Gather, A] WriteImm<L, A>,
    L,
    L::Sges,
    |s, raw| {
        check_fits("ibv_post_send (RDMA WRITE with immediate)", s.local.total_len(), &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
        imm(raw, s.imm);
        rdma(raw, &s.remote);
        raw.local(&s.local, sys::IBV_ODP_SUPPORT_WRITE)?;
    },
    |s| s.local
);
valid_on!(SupportsRdmaWrite: [L: Gather, A] WriteImm<L, A>);

request!(
    [L: Scatter, A] Read<L, A>,
    L,
    L::Sges,
    |s, raw| {
        check_fits("ibv_post_send (RDMA READ)", s.local.total_len(), &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_RDMA_READ;
        rdma(raw, &s.remote);
        raw.local(&s.local, sys::IBV_ODP_SUPPORT_READ)?;
    },
    |s| s.local
);
valid_on!(SupportsRdmaRead: [L: Scatter, A] Read<L, A>);

request!(
    [L: LocalSink, A] CompareSwap<L, A>,
    L,
    [sys::ibv_sge; 1],
    |s, raw| {
        check_atomic(&s.result, &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
        raw.wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: s.remote.addr,
            compare_add: s.compare,
            swap: s.swap,
            rkey: s.remote.rkey,
        };
        raw.local(&s.result, sys::IBV_ODP_SUPPORT_ATOMIC)?;
    },
    |s| s.result,
    atomics: true
);
valid_on!(SupportsAtomics: [L: LocalSink, A] CompareSwap<L, A>);

request!(
    [L: LocalSink, A] FetchAdd<L, A>,
    L,
    [sys::ibv_sge; 1],
    |s, raw| {
        check_atomic(&s.result, &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
        raw.wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: s.remote.addr,
            compare_add: s.add,
            swap: 0,
            rkey: s.remote.rkey,
        };
        raw.local(&s.result, sys::IBV_ODP_SUPPORT_ATOMIC)?;
    },
    |s| s.result,
    atomics: true
);
valid_on!(SupportsAtomics: [L: LocalSink, A] FetchAdd<L, A>);

request!(['d, const N: usize] InlineSend<'d, N>, (), [sys::ibv_sge; N], |s, raw| {
    raw.wr.opcode = sys::IBV_WR_SEND;
    inline_sge(raw, &s.data)?;
}, |_s| (), inline: |s| inline_total(&s.data));
valid_on!(SupportsSend: ['d, const N: usize] InlineSend<'d, N>);

request!(['d, const N: usize] InlineSendImm<'d, N>, (), [sys::ibv_sge; N], |s, raw| {
    raw.wr.opcode = sys::IBV_WR_SEND_WITH_IMM;
    imm(raw, s.imm);
    inline_sge(raw, &s.data)?;
}, |_s| (), inline: |s| inline_total(&s.data));
valid_on!(SupportsSendImm: ['d, const N: usize] InlineSendImm<'d, N>);

request!(['d, A, const N: usize] InlineWrite<'d, A, N>, (), [sys::ibv_sge; N], |s, raw| {
    check_fits("ibv_post_send (inline RDMA WRITE)", inline_total(&s.data) as u64, &s.remote)?;
    raw.wr.opcode = sys::IBV_WR_RDMA_WRITE;
    rdma(raw, &s.remote);
    inline_sge(raw, &s.data)?;
}, |_s| (), inline: |s| inline_total(&s.data));
valid_on!(SupportsRdmaWrite: ['d, A, const N: usize] InlineWrite<'d, A, N>);

request!(['d, A, const N: usize] InlineWriteImm<'d, A, N>, (), [sys::ibv_sge; N], |s, raw| {
    check_fits("ibv_post_send (inline RDMA WRITE with immediate)", inline_total(&s.data) as u64, &s.remote)?;
    raw.wr.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
    imm(raw, s.imm);
    rdma(raw, &s.remote);
    inline_sge(raw, &s.data)?;
}, |_s| (), inline: |s| inline_total(&s.data));
valid_on!(SupportsRdmaWrite: ['d, A, const N: usize] InlineWriteImm<'d, A, N>);

impl<const N: usize> InlineWr for InlineSend<'_, N> {}
impl<const N: usize> InlineWr for InlineSendImm<'_, N> {}
impl<A, const N: usize> InlineWr for InlineWrite<'_, A, N> {}
impl<A, const N: usize> InlineWr for InlineWriteImm<'_, A, N> {}

impl<L: Gather> AllowsSolicited for Send<L> {}
impl<L: Gather> AllowsSolicited for SendImm<L> {}
impl<L: Gather, A> AllowsSolicited for WriteImm<L, A> {}
impl<const N: usize> AllowsSolicited for InlineSend<'_, N> {}
impl<const N: usize> AllowsSolicited for InlineSendImm<'_, N> {}
impl<A, const N: usize> AllowsSolicited for InlineWriteImm<'_, A, N> {}

/// `IBV_WR_SEND_WITH_INV`: a send that also invalidates the peer's type 2 window with rkey
/// `invalidate_rkey`; the peer's receive completion carries `IBV_WC_WITH_INV` and the rkey.
///
/// When the peer is on the sending QP's own device, the rkey must be the live binding of one
/// of this process's windows there, which nothing invalidated or is invalidating; otherwise
/// the post is refused (`Error::InvalidArgument`): an invalidation of a window that is not
/// bound crashes rxe's kernel, and other processes' windows cannot be checked. A send lane
/// does not prepare a SEND_WITH_INV to such a peer at all. DESIGN.md, "Memory windows".
#[derive(Debug)]
pub struct SendInv<L> {
    local: L,
    invalidate_rkey: u32,
}

impl<L: Gather> SendInv<L> {
    /// Sends `local` and invalidates the peer's window `invalidate_rkey`.
    pub fn new(local: L, invalidate_rkey: u32) -> Self {
        SendInv { local, invalidate_rkey }
    }
}

request!(
    [L: Gather] SendInv<L>,
    L,
    L::Sges,
    |s, raw| {
        raw.wr.opcode = sys::IBV_WR_SEND_WITH_INV;
        raw.wr.__bindgen_anon_1.invalidate_rkey = s.invalidate_rkey;
        raw.local(&s.local, sys::IBV_ODP_SUPPORT_SEND)?;
    },
    |s| s.local,
    invalidates: |s| s.invalidate_rkey
);
valid_on!(SupportsSendInv: [L: Gather] SendInv<L>);
// A Send operation: ibv_post_send(3)'s "Send" for IBV_SEND_SOLICITED (the IBTA lets every Send,
// with invalidate included, carry the solicited event bit).
impl<L: Gather> AllowsSolicited for SendInv<L> {}

/// `IBV_WR_SEND_WITH_INV` with `IBV_SEND_INLINE`: [`SendInv`] whose bytes are copied into the
/// work request (borrowed only for the call, no registration); a Send operation, which
/// ibv_post_send(3) lets carry INLINE. The peer's window is checked and claimed as for
/// [`SendInv`].
#[derive(Debug)]
pub struct InlineSendInv<'d, const N: usize = 1> {
    data: [&'d [u8]; N],
    invalidate_rkey: u32,
}

impl<'d> InlineSendInv<'d> {
    /// Sends `data` inline and invalidates the peer's window `invalidate_rkey`.
    pub fn new(data: &'d [u8], invalidate_rkey: u32) -> Self {
        InlineSendInv { data: [data], invalidate_rkey }
    }
}

impl<'d, const N: usize> InlineSendInv<'d, N> {
    /// Sends the `parts` inline, gathered in order (see [`InlineSend::gather`]), and
    /// invalidates the peer's window `invalidate_rkey`.
    pub fn gather(parts: [&'d [u8]; N], invalidate_rkey: u32) -> Self {
        InlineSendInv { data: parts, invalidate_rkey }
    }
}

request!(['d, const N: usize] InlineSendInv<'d, N>, (), [sys::ibv_sge; N], |s, raw| {
    raw.wr.opcode = sys::IBV_WR_SEND_WITH_INV;
    raw.wr.__bindgen_anon_1.invalidate_rkey = s.invalidate_rkey;
    inline_sge(raw, &s.data)?;
}, |_s| (), inline: |s| inline_total(&s.data), invalidates: |s| s.invalidate_rkey);
valid_on!(SupportsSendInv: ['d, const N: usize] InlineSendInv<'d, N>);
impl<const N: usize> InlineWr for InlineSendInv<'_, N> {}
impl<const N: usize> AllowsSolicited for InlineSendInv<'_, N> {}

/// `IBV_WR_BIND_MW`: binds a type 2 window to `len` bytes of `mr` at `offset`, granting `R`.
/// The region stays borrowed for `'m`, as long as the window is bound.
pub struct BindMw<'m, K: MwType, MA: AccessSet, R> {
    mw: Mw<K>,
    mr: &'m Mr<MA>,
    offset: u64,
    len: u64,
    _rights: PhantomData<fn() -> R>,
}

impl<K: MwType, MA: AccessSet, R> std::fmt::Debug for BindMw<'_, K, MA, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindMw").field("mw", &self.mw).field("offset", &self.offset).field("len", &self.len).finish()
    }
}

impl<'m, K: BoundByWr, MA: AccessSet, R: WindowOn<MA>> BindMw<'m, K, MA, R> {
    /// Binds the type 2 window `mw` to `mr[offset..offset + len]` with rights `access`.
    ///
    /// The window (unbound: [`UnboundWindow`]; type 2 only), the region (a [`WindowRegion`]:
    /// pinned, not On-Demand Paging, [`WindowHost`](crate::mr::WindowHost)), and the window's
    /// rights against the region's (MW_BIND; LOCAL_WRITE for a writable or atomic window) are
    /// checked at compile time. The range must lie inside the region and be non-empty, the window
    /// must belong to the region's PD, and a zero-based window granting remote atomics must start
    /// on an 8-byte boundary (an atomic's target is checked aligned as the peer addresses it, from
    /// the window's start), and the window must not come from a bind that completed with an error
    /// after it may have run (any error but `IBV_WC_MW_BIND_ERR`, a flush above all: the window may
    /// still be bound, and IBTA o10-37.2.30 forbids binding a bound type 2 window; such a bind's
    /// result deallocates that window and hands back a new one of the same PD, and only when
    /// `ibv_alloc_mw` fails the window itself, which can only be dropped): checked when posting
    /// ([`Error::InvalidArgument`], the request handed back).
    pub fn new<W, H>(mw: W, mr: &'m H, offset: u64, len: u64, access: R) -> Self
    where
        W: UnboundWindow<Kind = K>,
        H: WindowRegion<Access = MA> + ?Sized,
    {
        let _ = access;
        BindMw { mw: mw.into_unbound(), mr: mr.window_region(), offset, len, _rights: PhantomData }
    }
}

impl<K: MwType, MA: AccessSet, R> BindMw<'_, K, MA, R> {
    /// Gives the window back (e.g. after a refused post).
    pub fn into_window(self) -> Mw<K> {
        self.mw
    }
}

impl<K: MwType, MA: AccessSet, R> sealed::Sealed for BindMw<'_, K, MA, R> {}
impl<K: MwType, MA: AccessSet, R: WindowRights> Undirected for BindMw<'_, K, MA, R> {}
// `BindMw` is only built by `new`, which requires `BoundByWr`.
impl<'m, K: MwType, MA: AccessSet, R: WindowRights> SendRequest for BindMw<'m, K, MA, R> {
    type Buffers = PendingBind<'m, K, R>;
    type Sges = [sys::ibv_sge; 0];
    const ATOMICS: bool = R::BITS & sys::IBV_ACCESS_REMOTE_ATOMIC != 0;
    fn posted_on(&self, qp: PostedOn<'_>) {
        // A type 2 binding holds its QP on the device (rxe: `mw->qp`); a type 1 binding none.
        if K::RAW == sys::IBV_MW_TYPE_2 {
            self.mw.inner.hold(qp.0);
        }
    }
    fn build(&self, raw: &mut RawSendWr<[sys::ibv_sge; 0]>) -> Result<()> {
        if self.mw.maybe_bound() {
            return Err(Error::invalid(
                "ibv_post_send (BIND_MW)",
                "an earlier bind of this type 2 window completed with an error after it may have run (a flushed \
                 queue): the window may still be bound, and a bound type 2 window is not bound again before it \
                 is invalidated (IBTA o10-37.2.30); drop it, which deallocates it",
            ));
        }
        check_window_range("ibv_post_send (BIND_MW)", self.offset, self.len, self.mr.len() as u64)?;
        let start = self.mr.addr() + self.offset;
        let zero_based_atomics = sys::IBV_ACCESS_ZERO_BASED | sys::IBV_ACCESS_REMOTE_ATOMIC;
        if R::BITS & zero_based_atomics == zero_based_atomics && start % 8 != 0 {
            // Atomic targets are checked 8-byte aligned as the peer addresses them: from the
            // window's start, which must then be aligned too.
            return Err(Error::invalid(
                "ibv_post_send (BIND_MW)",
                format!("a zero-based window granting remote atomics starts at {start:#x}, not on an 8-byte boundary"),
            ));
        }
        if !self.mw.same_pd(self.mr.pd()) {
            return Err(Error::invalid(
                "ibv_post_send (BIND_MW)",
                "the window and the region belong to different protection domains",
            ));
        }
        raw.pd = Some(self.mr.pd().id());
        raw.wr.send_flags = sys::IBV_SEND_SIGNALED;
        raw.wr.opcode = sys::IBV_WR_BIND_MW;
        raw.wr.__bindgen_anon_2.bind_mw = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
            mw: self.mw.as_ptr(),
            rkey: inc_rkey(self.mw.raw_rkey()),
            bind_info: sys::ibv_mw_bind_info {
                mr: self.mr.as_ptr(),
                addr: start,
                length: self.len,
                mw_access_flags: R::BITS,
            },
        };
        Ok(())
    }
    fn into_buffers(self, _: crate::scope::sealed::Internal) -> Self::Buffers {
        let old_rkey = self.mw.raw_rkey();
        let new_rkey = inc_rkey(old_rkey);
        PendingBind {
            new_rkey,
            old_rkey,
            mr: self.mr.raw(),
            addr: self.mr.addr() + self.offset,
            len: self.len,
            watch: InvalidationWatch::of(&self.mw, new_rkey),
            mw: self.mw,
            _region: RegionBorrow::new(),
            _rights: PhantomData,
        }
    }
}
impl<K: MwType, MA: AccessSet, R: WindowRights, T: SupportsBindMw> SendWr<T> for BindMw<'_, K, MA, R> {}

pub(crate) fn check_window_range(what: &'static str, offset: u64, len: u64, mr_len: u64) -> Result<()> {
    if len == 0 {
        return Err(Error::invalid(what, "a window binding needs at least one byte (a zero-length bind unbinds)"));
    }
    match offset.checked_add(len) {
        Some(end) if end <= mr_len => Ok(()),
        _ => Err(Error::invalid(what, format!("window {offset}+{len} is outside the region of {mr_len} bytes"))),
    }
}

/// `IBV_WR_LOCAL_INV`: invalidates a bound type 2 window; on success its rkey is dead and the
/// window comes back unbound.
#[derive(Debug)]
pub struct LocalInv<'m, K: MwType, R> {
    bound: BoundMw<'m, K, R>,
}

impl<'m, K: Invalidatable, R: WindowRights> LocalInv<'m, K, R> {
    /// Invalidates `bound`.
    pub fn new(bound: BoundMw<'m, K, R>) -> Self {
        LocalInv { bound }
    }

    /// The window back, still bound: what a refused request returns
    /// ([`PostError::wr`](crate::scope::PostError)). A request certainly not posted has given
    /// its claim on the binding back already ([`SendRequest::not_posted`]).
    pub fn into_bound(self) -> BoundMw<'m, K, R> {
        self.bound
    }
}

// `LocalInv` is only built by `new`, which requires `Invalidatable`.
impl<K: MwType, R> sealed::Sealed for LocalInv<'_, K, R> {}
impl<K: MwType, R: WindowRights> Undirected for LocalInv<'_, K, R> {}
impl<'m, K: MwType, R: WindowRights> SendRequest for LocalInv<'m, K, R> {
    type Buffers = PendingUnbind<'m, K, R>;
    type Sges = [sys::ibv_sge; 0];
    const LOCAL_INV: bool = true;
    fn build(&self, raw: &mut RawSendWr<[sys::ibv_sge; 0]>) -> Result<()> {
        raw.pd = Some(self.bound.mw().pd_id());
        raw.wr.send_flags = sys::IBV_SEND_SIGNALED;
        raw.wr.opcode = sys::IBV_WR_LOCAL_INV;
        raw.wr.__bindgen_anon_1.invalidate_rkey = self.bound.rkey();
        Ok(())
    }
    fn into_buffers(self, _: crate::scope::sealed::Internal) -> Self::Buffers {
        PendingUnbind { bound: self.bound, new_rkey: None }
    }
    /// A second invalidation of one binding is refused: rxe (Linux 6.12 and 6.18) takes it for
    /// a live window and dereferences the binding's NULL QP in the kernel. The binding is
    /// claimed, so that no SEND_WITH_INV of this process invalidates it meanwhile.
    fn claim(&self, _qp: PostedOn<'_>) -> Result<()> {
        self.bound.claim_local_invalidation().map_err(|how| already_invalidated(self.bound.rkey(), how))
    }
    fn not_posted(&self, _qp: PostedOn<'_>) {
        self.bound.release_local_claim();
    }
}
impl<K: MwType, R: WindowRights, T: SupportsLocalInv> SendWr<T> for LocalInv<'_, K, R> {}

/// The LOCAL_INV of a window whose rkey may already be invalidated (`how`).
#[cold]
fn already_invalidated(rkey: u32, how: Invalidated) -> Error {
    let reason = match how {
        Invalidated::ByPeer => format!(
            "the window's rkey {rkey:#x} was already invalidated by a peer's SEND_WITH_INV (a receive \
             completion with IBV_WC_WITH_INV): take the window back with BoundMw::invalidated_by"
        ),
        Invalidated::MaybeLocally => format!(
            "an earlier LOCAL_INV of the window's rkey {rkey:#x} completed with an error after it may have \
             run (a flushed queue): the window can only be dropped, which deallocates it"
        ),
        Invalidated::SentHere => format!(
            "this process posted a SEND_WITH_INV of the window's rkey {rkey:#x} to a QP of its device: take \
             the window back with BoundMw::invalidated_by and its receive completion, or drop it"
        ),
        // Cannot happen: the LOCAL_INV holds the window, and a request certainly not posted
        // gives its claim back.
        Invalidated::LocalPosted => format!("a LOCAL_INV of the window's rkey {rkey:#x} is already posted"),
    };
    Error::invalid("ibv_post_send (LOCAL_INV)", reason)
}

/// `IBV_WR_TSO`: TCP segmentation offload of `payload` behind `header`, cut into `mss`-byte
/// segments by the device. UD and RAW_PACKET only, and only with the [`TsoCap`] the device
/// query gives where it supports TSO (see there for providers that also need a
/// `max_tso_header` at QP creation, which the library does not set).
#[derive(Debug)]
pub struct Tso<'h, L, T: Transport> {
    payload: L,
    header: &'h [u8],
    mss: u16,
    cap: TsoCap<T>,
}

impl<'h, L: Gather, T: TsoTransport> Tso<'h, L, T> {
    /// Segments `payload` (at most `cap.max_tso()` bytes, checked when posting) into `mss`-byte
    /// segments, each sent behind a copy of `header` (at most 65535 bytes).
    pub fn new(payload: L, header: &'h [u8], mss: u16, cap: TsoCap<T>) -> Self {
        Tso { payload, header, mss, cap }
    }
}

impl<L, T: Transport> sealed::Sealed for Tso<'_, L, T> {}
impl<L: Gather, T: TsoTransport> Undirected for Tso<'_, L, T> {}
impl<L: Gather, T: TsoTransport> SendRequest for Tso<'_, L, T> {
    type Buffers = L;
    type Sges = L::Sges;
    fn build(&self, raw: &mut RawSendWr<L::Sges>) -> Result<()> {
        let hdr_sz = u16::try_from(self.header.len())
            .map_err(|_| Error::invalid("ibv_post_send (TSO)", "the header is longer than 65535 bytes"))?;
        let len = self.payload.total_len();
        if len > u64::from(self.cap.max_tso()) || self.mss == 0 {
            return Err(Error::invalid(
                "ibv_post_send (TSO)",
                format!("payload {len} bytes (max_tso {}), mss {}", self.cap.max_tso(), self.mss),
            ));
        }
        raw.wr.send_flags = sys::IBV_SEND_SIGNALED;
        raw.wr.opcode = sys::IBV_WR_TSO;
        raw.wr.__bindgen_anon_2.tso = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_2 {
            hdr: self.header.as_ptr() as *mut std::ffi::c_void,
            hdr_sz,
            mss: self.mss,
        };
        raw.local(&self.payload, sys::IBV_ODP_SUPPORT_SEND)?;
        Ok(())
    }
    fn into_buffers(self, _: crate::scope::sealed::Internal) -> L {
        self.payload
    }
    fn capabilities_of(&self, ctx: u64) -> bool {
        self.cap.ctx == ctx
    }
}
// The capability is for one transport: the request is valid on that one only.
impl<L: Gather, T: TsoTransport> SendWr<T> for Tso<'_, L, T> {}

/// A send work request without `IBV_SEND_SIGNALED`.
#[derive(Debug)]
pub struct Unsignaled<W>(W);
/// A send work request with `IBV_SEND_FENCE`.
#[derive(Debug)]
pub struct Fenced<W>(W);
/// A send work request with `IBV_SEND_SOLICITED`.
#[derive(Debug)]
pub struct Solicited<W>(W);
/// A send work request with `IBV_SEND_IP_CSUM`, for transport `T` whose checksum offload the
/// device reported.
#[derive(Debug)]
pub struct Checksummed<W, T: Transport>(W, IpCsum<T>);
/// A UD send work request with its destination.
#[derive(Debug)]
pub struct To<'a, W> {
    wr: W,
    ah: &'a Ah,
    remote_qpn: u32,
    remote_qkey: u32,
}

macro_rules! wrapper {
    ($ty:ident <$($lt:lifetime,)? W $(, $t:ident: $tb:path)?>, |$s:ident, $raw:ident| $extra:block, $inner:tt) => {
        impl<$($lt,)? W: SendRequest $(, $t: $tb)?> sealed::Sealed for $ty<$($lt,)? W $(, $t)?> {}
        // A flag or a destination changes nothing of what the request needs of its completion.
        impl<$($lt,)? W: MaySkipCompletion $(, $t: $tb)?> MaySkipCompletion for $ty<$($lt,)? W $(, $t)?> {}
        impl<$($lt,)? W: SendRequest $(, $t: $tb)?> SendRequest for $ty<$($lt,)? W $(, $t)?> {
            type Buffers = W::Buffers;
            type Sges = W::Sges;
            const ATOMICS: bool = W::ATOMICS;
            const LOCAL_INV: bool = W::LOCAL_INV;
            const SEND_INV: bool = W::SEND_INV;
            fn invalidated_rkey(&self) -> u32 {
                self.$inner.invalidated_rkey()
            }
            #[inline(always)]
            fn build(&self, $raw: &mut RawSendWr<W::Sges>) -> Result<()> {
                let $s = self;
                $s.$inner.build($raw)?;
                $extra
                Ok(())
            }
            fn into_buffers(self, internal: crate::scope::sealed::Internal) -> W::Buffers {
                self.$inner.into_buffers(internal)
            }
            fn inline_len(&self) -> Option<usize> {
                self.$inner.inline_len()
            }
            fn address_handle(&self) -> Option<&Ah> {
                wrapper!(@ah $ty, self, $inner)
            }
            fn capabilities_of(&self, ctx: u64) -> bool {
                wrapper!(@cap $ty, self, $inner, ctx)
            }
            fn posted_on(&self, qp: PostedOn<'_>) {
                self.$inner.posted_on(qp)
            }
            fn claim(&self, qp: PostedOn<'_>) -> Result<()> {
                self.$inner.claim(qp)
            }
            fn not_posted(&self, qp: PostedOn<'_>) {
                self.$inner.not_posted(qp)
            }
        }
        impl<$($lt,)? W: InlineWr $(, $t: $tb)?> InlineWr for $ty<$($lt,)? W $(, $t)?> {}
    };
    (@ah To, $self:ident, $inner:tt) => { Some($self.ah) };
    (@ah $other:ident, $self:ident, $inner:tt) => { $self.$inner.address_handle() };
    (@cap Checksummed, $self:ident, $inner:tt, $ctx:ident) => { $self.1.ctx == $ctx && $self.$inner.capabilities_of($ctx) };
    (@cap $other:ident, $self:ident, $inner:tt, $ctx:ident) => { $self.$inner.capabilities_of($ctx) };
}

wrapper!(
    Unsignaled<W>,
    |_s, raw| {
        raw.wr.send_flags &= !sys::IBV_SEND_SIGNALED;
    },
    0
);
wrapper!(
    Fenced<W>,
    |_s, raw| {
        raw.wr.send_flags |= sys::IBV_SEND_FENCE;
    },
    0
);
wrapper!(
    Solicited<W>,
    |_s, raw| {
        raw.wr.send_flags |= sys::IBV_SEND_SOLICITED;
    },
    0
);
wrapper!(Checksummed<W, T: Transport>, |_s, raw| { raw.wr.send_flags |= sys::IBV_SEND_IP_CSUM; }, 0);
wrapper!(
    To<'a, W>,
    |s, raw| {
        // A QP number beyond the wire's 24 bits: a device would send the datagram to the QP
        // its low 24 bits name.
        crate::qp::check_bits("ibv_post_send", "remote_qpn", s.remote_qpn, 24)?;
        raw.wr.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: s.ah.as_ptr(),
            remote_qpn: s.remote_qpn,
            remote_qkey: s.remote_qkey,
        };
    },
    wr
);

impl<T: Transport, W: SendWr<T>> SendWr<T> for Unsignaled<W> {}
impl<T: SupportsFence, W: SendWr<T>> SendWr<T> for Fenced<W> {}
// `Solicited` is only built by `solicited()`, which already requires `AllowsSolicited`.
impl<T: Transport, W: SendWr<T>> SendWr<T> for Solicited<W> {}
impl<T: Transport, W: SendWr<T>> SendWr<T> for Checksummed<W, T> {}
impl<W: SendWr<UD>> SendWr<UD> for To<'_, W> {}

impl<W: AllowsSolicited> AllowsSolicited for Unsignaled<W> {}
impl<W: AllowsSolicited> AllowsSolicited for Fenced<W> {}
impl<W: AllowsSolicited, T: Transport> AllowsSolicited for Checksummed<W, T> {}
impl<W: AllowsSolicited> AllowsSolicited for To<'_, W> {}

/// A receive work request (ibv_post_recv(3)): the device writes an incoming message into
/// `buf`, which must come from a region with LOCAL_WRITE. On UD the first 40 bytes receive the
/// GRH (or are left untouched without one).
#[derive(Debug)]
pub struct Recv<L> {
    pub(crate) buf: L,
}

impl<L: Scatter> Recv<L> {
    /// Receives into `buf`: a [`LocalBufMut`](crate::mr::LocalBufMut), an owned
    /// [`Chunk`](crate::mr::Chunk) of a region with LOCAL_WRITE, or a [scatter
    /// list](crate::sgl) of them (the message fills the entries in order).
    pub fn new(buf: L) -> Self {
        Recv { buf }
    }
}

impl<L> Recv<L> {
    /// Gives the buffer back (e.g. after a refused post).
    pub fn into_buffer(self) -> L {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::{LocalBuf, LocalBufMut};
    use crate::test_util::assert_refused;

    /// A result buffer of `len` bytes at `addr` (lkey 1) and a remote range of `rlen` bytes at
    /// `raddr` (rkey 2).
    fn atomic_args(
        addr: u64,
        len: u32,
        raddr: u64,
        rlen: u64,
    ) -> (LocalBufMut<'static>, RemoteSlice<crate::access::RemoteAll>) {
        (
            LocalBufMut::from_parts(addr, len, 1, OdpTag::default(), crate::pd::PdId::dummy()),
            RemoteSlice::new(raddr, rlen, 2),
        )
    }

    /// A TSO request (ibv_post_send(3): `IBV_WR_TSO`, `tso.hdr_sz`, `tso.mss`) carries at most
    /// `max_tso` payload bytes, in segments of a non-zero `mss`, behind a header of at most
    /// 65535 bytes; each is checked in `build`, before the provider sees the request.
    #[test]
    fn tso_requests_keep_to_the_devices_max_tso_and_a_nonzero_mss() {
        let cap = crate::device::TsoCap::<crate::transport::UD>::reported(4096, 1);
        let pd = crate::pd::PdId::dummy();
        let payload = |len| LocalBuf::from_parts(0x1000, len, 1, OdpTag::default(), pd);
        let header = [0u8; 54];
        let build = |len, hdr: &[u8], mss| {
            let mut raw = RawSendWr::new();
            Tso::new(payload(len), hdr, mss, cap).build(&mut raw).map(|()| raw)
        };
        let raw = build(4096, &header, 1460).expect("max_tso bytes");
        assert_eq!((raw.wr.opcode, raw.num_sge, raw.used_sges()[0].length), (sys::IBV_WR_TSO, 1, 4096));
        for (len, mss, why) in [(4097, 1460, "max_tso + 1"), (64, 0, "mss 0")] {
            let e = build(len, &header, mss).map(|_| ()).expect_err(why);
            assert!(matches!(&e, Error::InvalidArgument { verb: "ibv_post_send (TSO)", .. }), "{why}: {e:?}");
        }
        let long = vec![0u8; 65536];
        let e = build(64, &long, 1460).map(|_| ()).expect_err("a header above 65535 bytes");
        assert!(matches!(&e, Error::InvalidArgument { reason, .. } if reason.contains("65535")), "{e:?}");
        assert!(build(64, &long[..65535], 1460).is_ok(), "a header of 65535 bytes");
    }

    /// The atomic-argument rules of ibv_post_send(3) and the IBTA, as a table written by hand
    /// (not derived from `check_atomic`): the local result buffer is exactly 8 bytes at an
    /// 8-byte aligned address; the remote target is 8-byte aligned and holds at least the 8
    /// bytes the atomic acts on (a longer advertised range is fine). Each case goes through
    /// both atomics' `build`, and the refusal names which side is wrong.
    #[test]
    fn atomic_arguments_follow_the_man_page_rules() {
        const TOP: u64 = u64::MAX - 7; // 0xffff_ffff_ffff_fff8: aligned
        #[rustfmt::skip]
        let cases: &[(u64, u32, u64, u64, Option<&str>)] = &[
            // result addr, len, remote addr, len: None = accepted, Some(side) = refused
            (0x1000, 8, 0x2000, 8, None),
            (0x1000, 8, 0x2000, 64, None),
            (0, 8, 0, 8, None),
            (TOP, 8, TOP, 8, None),
            (0x1008, 8, 0x2ff8, 8, None),
            (0x1004, 8, 0x2000, 8, Some("result")),
            (0x1001, 8, 0x2000, 8, Some("result")),
            (0x1000, 4, 0x2000, 8, Some("result")),
            (0x1000, 16, 0x2000, 8, Some("result")),
            (0x1000, 0, 0x2000, 8, Some("result")),
            (0x1000, 7, 0x2000, 8, Some("result")),
            (u64::MAX, 8, 0x2000, 8, Some("result")),
            (0x1000, 8, 0x2004, 8, Some("target")),
            (0x1000, 8, 0x2001, 8, Some("target")),
            (0x1000, 8, 0x2000, 7, Some("target")),
            (0x1000, 8, 0x2000, 0, Some("target")),
            (0x1000, 8, u64::MAX, 8, Some("target")),
            (0x1004, 4, 0x2004, 4, Some("result")), // both wrong: the result is checked first
        ];
        for &(addr, len, raddr, rlen, refused) in cases {
            let (result, remote) = atomic_args(addr, len, raddr, rlen);
            let mut raw = RawSendWr::new();
            let faa = FetchAdd::new(result, remote, 5).build(&mut raw);
            let (result, remote) = atomic_args(addr, len, raddr, rlen);
            let cas = CompareSwap::new(result, remote, 1, 2).build(&mut RawSendWr::new());
            let case = format!("result {len} B at {addr:#x}, target {rlen} B at {raddr:#x}");
            for (op, r) in [("FETCH_AND_ADD", &faa), ("COMPARE_AND_SWAP", &cas)] {
                match (refused, r) {
                    (None, Ok(())) => {}
                    (Some(side), Err(Error::InvalidArgument { reason, .. })) => {
                        assert!(reason.starts_with(&format!("the {side} ")), "{op} {case}: {reason}")
                    }
                    (want, got) => {
                        panic!("{op} {case}: expected {}, got {got:?}", want.map_or("acceptance", |_| "a refusal"))
                    }
                }
            }
            if refused.is_none() {
                // An accepted FETCH_AND_ADD carries its arguments unchanged.
                assert_eq!(raw.wr.opcode, sys::IBV_WR_ATOMIC_FETCH_AND_ADD, "{case}");
                assert_eq!(
                    (raw.sges[0].addr, raw.sges[0].length, raw.sges[0].lkey, raw.num_sge),
                    (addr, 8, 1, 1),
                    "{case}"
                );
            }
        }
    }

    /// Requests with several entries carry them in order in their own storage, leave empty
    /// ones out, and check the total length against the remote range; inline pieces too.
    #[test]
    fn lists_reach_the_request_in_order() {
        let pd = crate::pd::PdId::dummy();
        let view = |addr, len| LocalBuf::from_parts(addr, len, 3, OdpTag::default(), pd);
        let sink = |addr, len| LocalBufMut::from_parts(addr, len, 4, OdpTag::default(), pd);
        let remote = |len| RemoteSlice::<crate::access::RemoteAll>::new(0x9000, len, 2);
        let entries =
            |raw: &RawSendWr<_>| raw.used_sges().iter().map(|s| (s.addr, s.length, s.lkey)).collect::<Vec<_>>();

        let mut raw = RawSendWr::new();
        Send::new((view(0x1000, 16), view(0x2000, 0), sink(0x3000, 8))).build(&mut raw).expect("valid");
        assert_eq!(entries(&raw), [(0x1000, 16, 3), (0x3000, 8, 4)]);
        assert_eq!(raw.pd, Some(pd));

        let mut raw = RawSendWr::new();
        Read::new([sink(0x1000, 8), sink(0x2000, 8)], remote(16)).build(&mut raw).expect("16 bytes fit 16");
        assert_eq!((raw.num_sge, raw.wr.opcode), (2, sys::IBV_WR_RDMA_READ));
        let r = Read::new([sink(0x1000, 8), sink(0x2000, 9)], remote(16)).build(&mut RawSendWr::new());
        // 17 bytes do not fit 16.
        assert_refused(r, "ibv_post_send (RDMA READ)", "bytes do not fit the remote range of");
        let r = Write::new((view(0x1000, 8), view(0x2000, 8)), remote(15)).build(&mut RawSendWr::new());
        // 16 bytes do not fit 15.
        assert_refused(r, "ibv_post_send (RDMA WRITE)", "bytes do not fit the remote range of");

        let (a, b) = ([1u8; 5], [2u8; 7]);
        let w = InlineSend::gather([&a[..], &[], &b[..]]);
        assert_eq!(w.inline_len(), Some(12));
        let mut raw = RawSendWr::new();
        w.build(&mut raw).expect("valid");
        assert_eq!(entries(&raw), [(a.as_ptr() as u64, 5, 0), (b.as_ptr() as u64, 7, 0)]);
        assert_ne!(raw.wr.send_flags & sys::IBV_SEND_INLINE, 0);
        let r = InlineWrite::gather([&a[..], &b[..]], remote(11)).build(&mut RawSendWr::new());
        // 12 inline bytes do not fit 11.
        assert_refused(r, "ibv_post_send (inline RDMA WRITE)", "bytes do not fit the remote range of");
    }

    /// An RDMA READ scattered into entries of more than `u32::MAX` bytes in all (and a remote
    /// range that holds them) is refused when built: the provider would read the sum modulo
    /// 2^32, and a lane would report that wrapped sum as the READ's `byte_len`. Likewise a
    /// SEND gathered from 32 copies of one shared view of 128 MiB + 1 (2^32 + 32 bytes: a
    /// message of 32 bytes once wrapped).
    #[test]
    fn lists_of_more_than_u32_max_bytes_are_refused_when_built() {
        let pd = crate::pd::PdId::dummy();
        let sink = |addr, len| LocalBufMut::from_parts(addr, len, 4, OdpTag::default(), pd);
        let remote = |len| RemoteSlice::<crate::access::RemoteAll>::new(0x9000, len, 2);
        let mut raw = RawSendWr::new();
        let r = Read::new([sink(0x1000, u32::MAX), sink(0x1_0000_1000, 2)], remote(1 << 33)).build(&mut raw);
        let summed = raw.used_sges().iter().fold(0u32, |n, s| n.wrapping_add(s.length));
        // What was accepted: the entries and the bytes as the provider sums them.
        let r = r.map(|()| (raw.num_sge, summed));
        assert_refused(r, "ibv_post_send", "one work request moves at most u32::MAX");
        let view = LocalBuf::from_parts(0x1000, (1 << 27) + 1, 3, OdpTag::default(), pd);
        let mut raw = RawSendWr::new();
        let r = Send::new([view; 32]).build(&mut raw);
        assert_refused(r.map(|()| raw.num_sge), "ibv_post_send", "one work request moves at most u32::MAX");
    }

    /// A window range is accepted exactly when it has at least one byte and ends inside the
    /// region: hand-written cases at the edges (end at, one past, overflowing).
    #[test]
    fn window_ranges_are_checked_at_their_edges() {
        let m = u64::MAX;
        #[rustfmt::skip]
        let cases = [
            // offset, len, region length, accepted
            (0, 1, 1, true), (0, 4096, 4096, true), (4095, 1, 4096, true), (0, m, m, true),
            (0, 0, 4096, false), (4096, 0, 4096, false), (0, 4097, 4096, false), (4096, 1, 4096, false),
            (1, m, m, false), (m, 1, m, false), (m, m, m, false), (0, 1, 0, false),
        ];
        for (offset, len, mr_len, ok) in cases {
            assert_eq!(check_window_range("t", offset, len, mr_len).is_ok(), ok, "{offset}+{len} in {mr_len}");
        }
    }

    /// A local length fits a remote range exactly when it is no longer.
    #[test]
    fn lengths_fit_remote_ranges_at_their_edges() {
        let remote = |len| RemoteSlice::<crate::access::RemoteAll>::new(0x1000, len, 1);
        #[rustfmt::skip]
        let cases = [(0, 0, true), (0, 8, true), (8, 8, true), (9, 8, false), (1, 0, false), (u64::MAX, u64::MAX, true), (u64::MAX, u64::MAX - 1, false)];
        for (len, rlen, ok) in cases {
            assert_eq!(check_fits("t", len, &remote(rlen)).is_ok(), ok, "{len} into {rlen}");
        }
    }

    /// `.fence()` and `.solicited()` set `IBV_SEND_FENCE` and `IBV_SEND_SOLICITED` in the
    /// request's `send_flags` (the device test cannot tell a fenced request from an unfenced
    /// one on rxe, which serves requests in order), keep `IBV_SEND_SIGNALED`, and set nothing
    /// else; `.unsignaled()` clears only `IBV_SEND_SIGNALED`.
    #[test]
    fn fence_and_solicited_reach_the_send_flags() {
        let local = || LocalBuf::from_parts(0x1000, 64, 1, OdpTag::default(), crate::pd::PdId::dummy());
        let remote = || RemoteSlice::<crate::access::RemoteAll>::new(0x2000, 64, 2);
        let flags = |wr: &dyn Fn(&mut RawSendWr) -> Result<()>| {
            let mut raw = RawSendWr::new();
            wr(&mut raw).expect("valid request");
            raw.wr.send_flags
        };
        let (signaled, fence, solicited) = (sys::IBV_SEND_SIGNALED, sys::IBV_SEND_FENCE, sys::IBV_SEND_SOLICITED);
        assert_eq!(flags(&|r| Write::new(local(), remote()).build(r)), signaled);
        assert_eq!(flags(&|r| Write::new(local(), remote()).fence().build(r)), signaled | fence);
        assert_eq!(flags(&|r| Send::new(local()).build(r)), signaled);
        assert_eq!(flags(&|r| Send::new(local()).solicited().build(r)), signaled | solicited);
        assert_eq!(flags(&|r| WriteImm::new(local(), remote(), 7).solicited().build(r)), signaled | solicited);
        assert_eq!(flags(&|r| Send::new(local()).fence().solicited().build(r)), signaled | fence | solicited);
        assert_eq!(flags(&|r| Send::new(local()).solicited().unsignaled().build(r)), solicited);
        assert_eq!(flags(&|r| Write::new(local(), remote()).unsignaled().fence().build(r)), fence);
        // The bits are the ones of verbs.h, not zero or shared.
        assert_eq!((fence, signaled, solicited), (1, 2, 4));
    }
}
