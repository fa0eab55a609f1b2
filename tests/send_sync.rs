//! Host test: the Send / Sync / Unpin table of every public type (tokio's
//! `tests/async_send_sync.rs` style). A change in any of these is an API change; this file
//! makes it visible.
#![allow(dead_code)]

use static_assertions::{assert_impl_all, assert_not_impl_any};
use typed_verbs::access::{self, window, Access, LocalWrite, MwBind, RemoteAtomic, RemoteRead, RemoteWrite, ZeroBased};
use typed_verbs::ah::{AddressVector, Ah, Grh};
use typed_verbs::caller::{BorrowedMr, Registered, ScopedMr};
use typed_verbs::channel::{CompChannel, CqEvent};
use typed_verbs::cm::{
    Accepting, AddrResolved, CmEvent, CmId, CmListener, ConnParam, ConnRequest, Connecting, Connection, Idle,
    RouteResolved,
};
use typed_verbs::cq::Cq;
use typed_verbs::device::{Context, DeviceAttr, DeviceInfo, Gid, IpCsum, LinkLayer, Mtu, PortAttr, PortState, TsoCap};
use typed_verbs::error::{Error, Verb};
use typed_verbs::event::{AsyncEvent, AsyncEvents, HandleId};
use typed_verbs::lane::{
    LaneToken, LaneWaitError, OrderedRecvLane, Prepared, PreparedList, PreparedRecv, RecvLane, RecvToken,
    RecvWaitError, SendLane,
};
use typed_verbs::mr::{Chunk, LocalBuf, LocalBufMut, Mr, Odp, OdpTag, Pinned, RemoteSlice};
use typed_verbs::mw::{BoundMw, Mw, PendingBind, PendingRebind, PendingUnbind, Type1, Type2, WindowAdvert};
use typed_verbs::odp::{ImplicitMr, ImplicitOdpCap, OdpCap, OdpCaps, OdpOps, Prefetch};
use typed_verbs::owned::{OwnedCompletion, OwnedToken, OwnedWaitError};
use typed_verbs::pd::Pd;
use typed_verbs::qp::{
    ConnectedInit, Endpoint, ObservedState, PeerPath, Qp, QpCaps, QpConfig, RcRtr, RcRts, SqPsn, TransitionError,
    UcRtr, UdInit, UdRtr,
};
use typed_verbs::scope::{PostError, PostListError, Scope, Token, WaitError};
use typed_verbs::srq::Srq;
use typed_verbs::transport::{ERR, INIT, RAW_PACKET, RC, RESET, RTR, RTS, UC, UD, XRC_SEND};
use typed_verbs::wc::{Completion, CompletionError, CompletionSource, WcOpcode, WcStatus};
use typed_verbs::wr::{
    self, BindMw, Checksummed, Fenced, LocalInv, RawSendWr, SendInv, Solicited, To, Tso, Unsignaled,
};

// Verbs objects: thread-safe handles.
assert_impl_all!(Context: Send, Sync, Unpin, Clone);
assert_impl_all!(Pd: Send, Sync, Unpin, Clone);
assert_impl_all!(Cq: Send, Sync, Unpin, Clone);
assert_impl_all!(Srq: Send, Sync, Unpin, Clone);
assert_impl_all!(Ah: Send, Sync, Unpin, Clone);
assert_impl_all!(CompChannel: Send, Sync, Unpin, Clone);
assert_impl_all!(Qp<RC, RESET>: Send, Sync, Unpin);
assert_impl_all!(Qp<UC, RTS>: Send, Sync, Unpin);
assert_impl_all!(Qp<UD, RTR>: Send, Sync, Unpin);
assert_impl_all!(Qp<XRC_SEND, INIT>: Send, Sync, Unpin);
assert_impl_all!(Qp<RAW_PACKET, ERR>: Send, Sync, Unpin);
assert_impl_all!(Mr<access::LocalRw>: Send, Sync, Unpin);
assert_impl_all!(Mr<access::Full>: Send, Sync, Unpin);
assert_impl_all!(Mr<access::RemoteRw, Odp>: Send, Sync, Unpin);
assert_impl_all!(ImplicitMr<Access<LocalWrite>>: Send, Sync, Unpin);
assert_impl_all!(typed_verbs::dmabuf::DmabufMr<access::RemoteRw>: Send, Sync, Unpin);
// Regions over memory the caller owns (typed_verbs::caller): like `Mr`.
assert_impl_all!(Registered<access::RemoteRw, Vec<u8>>: Send, Sync, Unpin);
assert_impl_all!(Registered<access::LocalRw, Box<[u8]>>: Send, Sync, Unpin);
#[cfg(feature = "memmap2")]
assert_impl_all!(Registered<access::Full, memmap2::MmapMut>: Send, Sync, Unpin);
assert_impl_all!(BorrowedMr<'static, access::LocalRw>: Send, Sync, Unpin);
assert_impl_all!(ScopedMr<'static, access::Full>: Send, Sync, Unpin);
assert_impl_all!(Mw<Type1>: Send, Sync, Unpin);
assert_impl_all!(Mw<Type2>: Send, Sync, Unpin);
assert_impl_all!(BoundMw<'static, Type2, window::ReadWrite>: Send, Sync, Unpin);
assert_impl_all!(PendingBind<'static, Type1, window::Read>: Send, Sync, Unpin);
assert_impl_all!(PendingUnbind<'static, Type2, window::All>: Send, Sync, Unpin);
assert_impl_all!(PendingRebind<'static, 'static, Type1, window::Read, window::Write>: Send, Sync, Unpin);

// Memory views and owned buffers.
assert_impl_all!(LocalBuf<'static>: Send, Sync, Unpin, Copy);
assert_impl_all!(LocalBufMut<'static>: Send, Sync, Unpin);
assert_impl_all!(Chunk<access::LocalRw>: Send, Sync, Unpin);
assert_impl_all!(Chunk<access::LocalRw, Odp>: Send, Sync, Unpin);
assert_impl_all!(RemoteSlice<access::RemoteRw>: Send, Sync, Unpin, Copy);
assert_impl_all!(RemoteSlice<window::Write>: Send, Sync, Unpin, Copy);

// Tokens: owned tokens move between threads; scoped tokens too (with their scope's borrow).
assert_impl_all!(OwnedToken<Chunk<access::LocalRw>>: Send, Sync, Unpin);
assert_impl_all!(OwnedToken<()>: Send, Sync, Unpin);
// The future of an awaited owned token: movable between threads (a multi-threaded runtime's
// tasks), and Unpin whatever its buffers.
assert_impl_all!(OwnedCompletion<Chunk<access::LocalRw>>: Send, Sync, Unpin);
assert_impl_all!(typed_verbs::channel::Dispatch: Send, Sync, Unpin, Copy);
assert_impl_all!(OwnedWaitError<Chunk<access::LocalRw>>: Send, Sync, Unpin);
assert_impl_all!(Token<'static, LocalBuf<'static>>: Send, Sync, Unpin);
assert_impl_all!(Scope<'static, 'static>: Send, Sync, Unpin);
assert_impl_all!(PostError<wr::Send<LocalBuf<'static>>>: Send, Sync, Unpin);
assert_impl_all!(WaitError<'static, LocalBufMut<'static>>: Send, Sync, Unpin);

// Send lanes: a lane and its prepared requests may move to another thread of the scope.
assert_impl_all!(SendLane<'static, RC, RTS>: Send, Sync, Unpin);
assert_impl_all!(SendLane<'static, UD, RTS>: Send, Sync, Unpin);
assert_impl_all!(Prepared<'static, wr::Write<LocalBuf<'static>, access::RemoteRw>>: Send, Sync, Unpin);
assert_impl_all!(Prepared<'static, wr::Read<LocalBufMut<'static>, access::RemoteRw>>: Send, Sync, Unpin);
assert_impl_all!(PreparedList<'static, wr::Write<LocalBuf<'static>, access::RemoteRw>>: Send, Sync, Unpin);
assert_impl_all!(LaneToken<'static>: Send, Sync, Unpin);
assert_impl_all!(LaneWaitError<'static>: Send, Sync, Unpin);
assert_impl_all!(RecvLane<'static, RC>: Send, Sync, Unpin);
assert_impl_all!(RecvLane<'static, UD>: Send, Sync, Unpin);
assert_impl_all!(OrderedRecvLane<'static, RC>: Send, Sync, Unpin);
assert_impl_all!(OrderedRecvLane<'static, UD>: Send, Sync, Unpin);
assert_impl_all!(PreparedRecv<'static, LocalBufMut<'static>>: Send, Sync, Unpin);
assert_impl_all!(RecvToken<'static>: Send, Sync, Unpin);
assert_impl_all!(RecvWaitError<'static>: Send, Sync, Unpin);

// Work requests.
type Rw = access::RemoteRw;
assert_impl_all!(wr::Send<LocalBuf<'static>>: Send, Sync, Unpin);
assert_impl_all!(wr::SendImm<Chunk<access::LocalRead>>: Send, Sync, Unpin);
assert_impl_all!(SendInv<LocalBuf<'static>>: Send, Sync, Unpin);
assert_impl_all!(wr::Write<LocalBuf<'static>, Rw>: Send, Sync, Unpin);
assert_impl_all!(wr::WriteImm<LocalBuf<'static>, Rw>: Send, Sync, Unpin);
assert_impl_all!(wr::Read<LocalBufMut<'static>, Rw>: Send, Sync, Unpin);
assert_impl_all!(wr::CompareSwap<LocalBufMut<'static>, access::RemoteAll>: Send, Sync, Unpin);
assert_impl_all!(wr::FetchAdd<Chunk<access::LocalRw>, access::RemoteAll>: Send, Sync, Unpin);
assert_impl_all!(wr::InlineSend<'static>: Send, Sync, Unpin);
assert_impl_all!(wr::InlineSend<'static, 3>: Send, Sync, Unpin);
assert_impl_all!(wr::InlineWrite<'static, Rw, 2>: Send, Sync, Unpin);
assert_impl_all!(wr::InlineSendImm<'static>: Send, Sync, Unpin);
assert_impl_all!(wr::InlineSendInv<'static>: Send, Sync, Unpin);
assert_impl_all!(wr::InlineWrite<'static, Rw>: Send, Sync, Unpin);
assert_impl_all!(wr::InlineWriteImm<'static, Rw>: Send, Sync, Unpin);
assert_impl_all!(wr::Recv<LocalBufMut<'static>>: Send, Sync, Unpin);
assert_impl_all!(Unsignaled<wr::Send<LocalBuf<'static>>>: Send, Sync, Unpin);
assert_impl_all!(Fenced<wr::Write<LocalBuf<'static>, Rw>>: Send, Sync, Unpin);
assert_impl_all!(Solicited<wr::Send<LocalBuf<'static>>>: Send, Sync, Unpin);
assert_impl_all!(Checksummed<wr::Send<LocalBuf<'static>>, UD>: Send, Sync, Unpin);
assert_impl_all!(To<'static, wr::Send<LocalBuf<'static>>>: Send, Sync, Unpin);
assert_impl_all!(BindMw<'static, Type2, access::WindowBindable, window::Write>: Send, Sync, Unpin);
assert_impl_all!(LocalInv<'static, Type2, window::Write>: Send, Sync, Unpin);

// Plain values.
assert_impl_all!(Completion: Send, Sync, Unpin, Copy);
assert_impl_all!(CompletionError: Send, Sync, Unpin, Copy);
assert_impl_all!(CompletionSource: Send, Sync, Unpin, Copy);
assert_impl_all!(WcStatus: Send, Sync, Unpin, Copy);
assert_impl_all!(WcOpcode: Send, Sync, Unpin, Copy);
assert_impl_all!(Error: Send, Sync, Unpin, std::error::Error);
assert_impl_all!(Verb: Send, Sync, Unpin, Copy);
assert_impl_all!(TransitionError<Qp<RC, RESET>>: Send, Sync, Unpin, std::error::Error);
assert_impl_all!(DeviceInfo: Send, Sync, Unpin, Clone);
assert_impl_all!(DeviceAttr: Send, Sync, Unpin, Clone);
assert_impl_all!(PortAttr: Send, Sync, Unpin, Clone);
assert_impl_all!(Gid: Send, Sync, Unpin, Copy);
assert_impl_all!(Mtu: Send, Sync, Unpin, Copy);
assert_impl_all!(PortState: Send, Sync, Unpin, Copy);
assert_impl_all!(LinkLayer: Send, Sync, Unpin, Copy);
assert_impl_all!(IpCsum<UD>: Send, Sync, Unpin, Copy);
assert_impl_all!(AddressVector: Send, Sync, Unpin, Copy);
assert_impl_all!(Grh: Send, Sync, Unpin, Copy);
assert_impl_all!(QpCaps: Send, Sync, Unpin, Copy);
assert_impl_all!(QpConfig<'static>: Send, Sync, Unpin, Clone);
assert_impl_all!(Endpoint: Send, Sync, Unpin, Copy);
assert_impl_all!(PeerPath: Send, Sync, Unpin, Copy);
assert_impl_all!(ObservedState: Send, Sync, Unpin, Copy);
assert_impl_all!(ConnectedInit: Send, Sync, Unpin, Copy);
assert_impl_all!(UdInit: Send, Sync, Unpin, Copy);
assert_impl_all!(RcRtr: Send, Sync, Unpin, Copy);
assert_impl_all!(UcRtr: Send, Sync, Unpin, Copy);
assert_impl_all!(UdRtr: Send, Sync, Unpin, Copy);
assert_impl_all!(RcRts: Send, Sync, Unpin, Copy);
assert_impl_all!(SqPsn: Send, Sync, Unpin, Copy);
assert_impl_all!(WindowAdvert: Send, Sync, Unpin, Copy);
assert_impl_all!(OdpCaps: Send, Sync, Unpin, Copy);
assert_impl_all!(OdpOps: Send, Sync, Unpin, Copy);
assert_impl_all!(OdpCap<RC>: Send, Sync, Unpin, Copy);
assert_impl_all!(ImplicitOdpCap<RC>: Send, Sync, Unpin, Copy);
assert_impl_all!(Prefetch: Send, Sync, Unpin, Copy);
assert_impl_all!(CqEvent: Send, Sync, Unpin);
assert_impl_all!(AsyncEvent: Send, Sync, Unpin);
assert_impl_all!(AsyncEvents: Send, Sync, Unpin);
assert_not_impl_any!(AsyncEvents: Clone);
assert_impl_all!(HandleId: Send, Sync, Unpin, Copy);

// Zero-sized markers.
assert_impl_all!(RC: Send, Sync, Unpin, Copy, Default);
assert_impl_all!(UD: Send, Sync, Unpin, Copy, Default);
assert_impl_all!(RTS: Send, Sync, Unpin, Copy, Default);
assert_impl_all!(Access<LocalWrite, RemoteWrite, RemoteRead, RemoteAtomic, MwBind>: Send, Sync, Unpin, Copy);
assert_impl_all!(window::All: Send, Sync, Unpin, Copy);
// The named rights sets (type aliases of `Access` and `WindowAccess`).
assert_impl_all!(access::LocalRead: Send, Sync, Unpin, Copy);
assert_impl_all!(access::LocalRw: Send, Sync, Unpin, Copy);
assert_impl_all!(access::RemoteReadOnly: Send, Sync, Unpin, Copy);
assert_impl_all!(access::LocalRemoteWrite: Send, Sync, Unpin, Copy);
assert_impl_all!(access::RemoteRw: Send, Sync, Unpin, Copy);
assert_impl_all!(access::RemoteAll: Send, Sync, Unpin, Copy);
assert_impl_all!(access::WindowBindable: Send, Sync, Unpin, Copy);
assert_impl_all!(access::Full: Send, Sync, Unpin, Copy);
assert_impl_all!(window::Read: Send, Sync, Unpin, Copy);
assert_impl_all!(window::Write: Send, Sync, Unpin, Copy);
assert_impl_all!(window::ReadWrite: Send, Sync, Unpin, Copy);
assert_impl_all!(typed_verbs::access::WindowAccess<RemoteWrite, (), (), ZeroBased>: Send, Sync, Unpin, Copy);
assert_impl_all!(Type1: Send, Sync, Unpin, Copy);
assert_impl_all!(Pinned: Send, Sync, Unpin, Copy);
assert_impl_all!(Odp: Send, Sync, Unpin, Copy);

// The types the table above did not list.
assert_impl_all!(PostListError<'static, wr::Send<LocalBuf<'static>>>: Send, Sync, Unpin);
assert_impl_all!(Tso<'static, LocalBuf<'static>, UD>: Send, Sync, Unpin);
assert_impl_all!(TsoCap<UD>: Send, Sync, Unpin, Copy);
assert_impl_all!(OdpTag: Send, Sync, Unpin, Copy);

// --- What must NOT hold --------------------------------------------------------------------
// Send / Sync / Unpin: by their fields, every public type above is Send, Sync and Unpin (the
// handles share `Arc`s of thread-safe verbs objects, the views and tokens hold integers and
// `PhantomData<&mut _>` of Send + Sync types, nothing is self-referential). The one exception is
// the raw work request: it holds `struct ibv_send_wr`, whose `next` and `sg_list` are raw
// pointers into the request being posted; it must stay on the thread that builds and posts it.
assert_not_impl_any!(RawSendWr: Send, Sync);
// Unpin all the same: the library points it at its own entries only after its last move, just
// before posting it.
assert_impl_all!(RawSendWr: Unpin);

// Clone / Copy: a copy of any of these would break the library's accounting. A token is
// consumed exactly once by the wait that hands its buffer back (a copy would take one
// completion twice); a mutable view or an owned chunk is exclusive access to memory the device
// may write; a `Qp<T, S>` is the only handle of a typestate (a copy could be moved to another
// state while this one still claims the old); a region, window, binding or lane is deregistered,
// unbound or drained exactly once; a scope and its lanes are exclusive posters.
assert_not_impl_any!(Token<'static, LocalBuf<'static>>: Clone, Copy);
assert_not_impl_any!(OwnedToken<Chunk<access::LocalRw>>: Clone, Copy);
assert_not_impl_any!(OwnedCompletion<Chunk<access::LocalRw>>: Clone, Copy);
assert_not_impl_any!(LaneToken<'static>: Clone, Copy);
assert_not_impl_any!(RecvToken<'static>: Clone, Copy);
assert_not_impl_any!(LocalBufMut<'static>: Clone, Copy);
assert_not_impl_any!(Chunk<access::LocalRw>: Clone, Copy);
assert_not_impl_any!(Qp<RC, RTS>: Clone, Copy);
assert_not_impl_any!(Qp<UD, RESET>: Clone, Copy);
assert_not_impl_any!(Mr<access::LocalRw>: Clone, Copy);
assert_not_impl_any!(Mr<access::RemoteRw, Odp>: Clone, Copy);
assert_not_impl_any!(ImplicitMr<Access<LocalWrite>>: Clone, Copy);
assert_not_impl_any!(typed_verbs::dmabuf::DmabufMr<access::RemoteRw>: Clone, Copy);
assert_impl_all!(typed_verbs::dmabuf::DeviceBuf<'static>: Send, Sync, Unpin, Copy);
assert_impl_all!(typed_verbs::dmabuf::DeviceBufMut<'static>: Send, Sync, Unpin);
assert_not_impl_any!(typed_verbs::dmabuf::DeviceBufMut<'static>: Clone, Copy);
assert_not_impl_any!(Mw<Type1>: Clone, Copy);
assert_not_impl_any!(Mw<Type2>: Clone, Copy);
assert_not_impl_any!(BoundMw<'static, Type2, window::ReadWrite>: Clone, Copy);
assert_not_impl_any!(PendingBind<'static, Type1, window::Read>: Clone, Copy);
assert_not_impl_any!(PendingUnbind<'static, Type2, window::All>: Clone, Copy);
assert_not_impl_any!(PendingRebind<'static, 'static, Type1, window::Read, window::Write>: Clone, Copy);
assert_not_impl_any!(Scope<'static, 'static>: Clone, Copy);
assert_not_impl_any!(SendLane<'static, RC, RTS>: Clone, Copy);
assert_not_impl_any!(RecvLane<'static, RC>: Clone, Copy);
assert_not_impl_any!(OrderedRecvLane<'static, RC>: Clone, Copy);
assert_not_impl_any!(Prepared<'static, wr::Write<LocalBuf<'static>, access::RemoteRw>>: Clone, Copy);
assert_not_impl_any!(PreparedRecv<'static, LocalBufMut<'static>>: Clone, Copy);
assert_not_impl_any!(wr::Recv<LocalBufMut<'static>>: Clone, Copy);
assert_not_impl_any!(wr::Read<LocalBufMut<'static>, Rw>: Clone, Copy);
assert_not_impl_any!(WaitError<'static, LocalBufMut<'static>>: Clone, Copy);
assert_not_impl_any!(OwnedWaitError<Chunk<access::LocalRw>>: Clone, Copy);

// The connection manager: identifiers may move between threads (a listener's requests are
// accepted on another thread, tests/device/cm.rs); not clonable (each destroys its identifier).
assert_impl_all!(CmId<Idle>: Send, Sync, Unpin);
assert_impl_all!(CmId<AddrResolved>: Send, Sync, Unpin);
assert_impl_all!(CmId<RouteResolved>: Send, Sync, Unpin);
assert_impl_all!(CmListener: Send, Sync, Unpin);
assert_impl_all!(ConnRequest: Send, Sync, Unpin);
assert_impl_all!(Connection: Send, Sync, Unpin);
assert_impl_all!(Connecting: Send, Sync, Unpin);
assert_impl_all!(Accepting: Send, Sync, Unpin);
assert_impl_all!(typed_verbs::qp::Link: Send, Sync, Unpin, Copy);
assert_impl_all!(typed_verbs::device::GidEntry: Send, Sync, Unpin, Copy);
assert_impl_all!(typed_verbs::device::GidType: Send, Sync, Unpin, Copy);
assert_impl_all!(ConnParam: Send, Sync, Unpin, Clone);
assert_impl_all!(CmEvent: Send, Sync, Unpin, Copy);
assert_impl_all!(typed_verbs::cm::PeerEnded: Send, Sync, Unpin, Copy);
assert_not_impl_any!(CmId<Idle>: Clone, Copy);
assert_not_impl_any!(CmListener: Clone, Copy);
assert_not_impl_any!(ConnRequest: Clone, Copy);
assert_not_impl_any!(Connection: Clone, Copy);
assert_not_impl_any!(Connecting: Clone, Copy);
assert_not_impl_any!(Accepting: Clone, Copy);
// UD through the CM: the same for its identifiers; the resolved peer is a shareable value (its
// address handle is reference-counted).
assert_impl_all!(CmId<Idle, UD>: Send, Sync, Unpin);
assert_impl_all!(CmId<AddrResolved, UD>: Send, Sync, Unpin);
assert_impl_all!(CmId<RouteResolved, UD>: Send, Sync, Unpin);
assert_impl_all!(CmListener<UD>: Send, Sync, Unpin);
assert_impl_all!(ConnRequest<UD>: Send, Sync, Unpin);
assert_impl_all!(typed_verbs::cm::UdPeer: Send, Sync, Unpin, Clone);
assert_impl_all!(typed_verbs::cm::McGroup<'static>: Send, Sync, Unpin);
assert_not_impl_any!(typed_verbs::cm::McGroup<'static>: Clone, Copy);
assert_not_impl_any!(CmId<RouteResolved, UD>: Clone, Copy);
assert_not_impl_any!(CmListener<UD>: Clone, Copy);
assert_not_impl_any!(ConnRequest<UD>: Clone, Copy);

/// The table is checked at compile time; this test makes the file part of the run.
#[test]
fn the_table_compiles() {
    assert_eq!(std::mem::size_of::<RC>(), 0);
    assert_eq!(std::mem::size_of::<Access<LocalWrite>>(), 0);
    assert_eq!(std::mem::size_of::<Qp<RC, RTS>>(), std::mem::size_of::<usize>(), "the typestate is zero-cost");
}
