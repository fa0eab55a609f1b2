//! Work requests: one struct per opcode of ibv_post_send(3), and [`Recv`] for
//! ibv_post_recv(3).
//!
//! Required arguments go to `new`; flags are wrappers added by the methods of
//! [`SendRequest`]: [`unsignaled`](SendRequest::unsignaled), [`fence`](SendRequest::fence)
//! (RC only, checked by [`SupportsFence`]) and [`solicited`](SendRequest::solicited) (Send and
//! RDMA Write with immediate only, checked by [`AllowsSolicited`]). Which opcode may be posted
//! on which transport is [`SendWr<T>`]: implemented for an opcode exactly where the opcode
//! table of ibv_post_send(3) has an X (see [`crate::transport`]).
//!
//! A work request holds the views of registered memory it uses
//! ([`LocalBuf`](crate::mr::LocalBuf), [`LocalBufMut`](crate::mr::LocalBufMut)); posting it
//! in a [scope](crate::scope) moves them into a token, which hands them back with the
//! completion.

use typed_verbs_sys as sys;

use crate::access::{HasRemoteAtomic, HasRemoteRead, HasRemoteWrite};
use crate::error::{Error, Result};
use crate::mr::{LocalBuf, LocalBufMut, RemoteSlice};
use crate::transport::{
    SupportsAtomics, SupportsFence, SupportsRdmaRead, SupportsRdmaWrite, SupportsSend,
    SupportsSendImm, Transport,
};

mod sealed {
    pub trait Sealed {}
}

/// The raw work request being built; only the library can look inside.
pub struct RawSendWr {
    pub(crate) wr: sys::ibv_send_wr,
    pub(crate) sge: sys::ibv_sge,
    pub(crate) num_sge: i32,
}

impl RawSendWr {
    pub(crate) fn new() -> Self {
        RawSendWr {
            wr: sys::ibv_send_wr::default(),
            sge: sys::ibv_sge::default(),
            num_sge: 0,
        }
    }

    fn local(&mut self, sge: sys::ibv_sge) {
        self.sge = sge;
        self.num_sge = 1;
    }
}

/// A work request that may be posted to the send queue of a `T` queue pair.
///
/// Implemented exactly for the opcode/transport pairs the ibv_post_send(3) opcode table
/// allows. Sealed.
pub trait SendWr<T: Transport>: SendRequest {
    /// The memory views handed back with the completion.
    type Buffers;
    /// Fills the raw work request, validating what can only be checked at run time.
    #[doc(hidden)]
    fn build(&self, raw: &mut RawSendWr) -> Result<()>;
    /// Gives up the memory views.
    #[doc(hidden)]
    fn into_buffers(self) -> Self::Buffers;
}

/// Flags common to every send work request. Sealed.
pub trait SendRequest: sealed::Sealed + Sized {
    /// Clears `IBV_SEND_SIGNALED`: no completion of its own; the request is known complete
    /// when a later signaled request of the same send queue completes.
    fn unsignaled(self) -> Unsignaled<Self> {
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
}

/// Opcodes that may carry `IBV_SEND_SOLICITED`.
#[diagnostic::on_unimplemented(
    message = "IBV_SEND_SOLICITED is not valid on `{Self}`",
    label = "no solicited event for this opcode",
    note = "ibv_post_send(3): \"IBV_SEND_SOLICITED Set the solicited event indicator. Valid only for Send and RDMA Write with immediate\""
)]
pub trait AllowsSolicited: SendRequest {}

/// `IBV_WR_SEND`: sends `local` to the peer's next receive buffer.
#[derive(Debug)]
pub struct Send<'a> {
    local: LocalBuf<'a>,
}

impl<'a> Send<'a> {
    /// Sends the bytes of `local`.
    pub fn new(local: LocalBuf<'a>) -> Self {
        Send { local }
    }
}

/// `IBV_WR_SEND_WITH_IMM`: a send that also delivers 32 bits of immediate data.
#[derive(Debug)]
pub struct SendImm<'a> {
    local: LocalBuf<'a>,
    imm: u32,
}

impl<'a> SendImm<'a> {
    /// Sends `local` with immediate data `imm` (host byte order; converted to network order).
    pub fn new(local: LocalBuf<'a>, imm: u32) -> Self {
        SendImm { local, imm }
    }
}

/// `IBV_WR_RDMA_WRITE`: writes `local` into the peer's memory at `remote`.
#[derive(Debug)]
pub struct Write<'a, A> {
    local: LocalBuf<'a>,
    remote: RemoteSlice<A>,
}

impl<'a, A: HasRemoteWrite> Write<'a, A> {
    /// Writes the bytes of `local` to the start of `remote`, which must allow remote writes.
    pub fn new(local: LocalBuf<'a>, remote: RemoteSlice<A>) -> Self {
        Write { local, remote }
    }
}

/// `IBV_WR_RDMA_WRITE_WITH_IMM`: an RDMA WRITE that also consumes a receive at the peer and
/// delivers immediate data.
#[derive(Debug)]
pub struct WriteImm<'a, A> {
    local: LocalBuf<'a>,
    remote: RemoteSlice<A>,
    imm: u32,
}

impl<'a, A: HasRemoteWrite> WriteImm<'a, A> {
    /// Writes `local` to `remote` with immediate data `imm` (host byte order).
    pub fn new(local: LocalBuf<'a>, remote: RemoteSlice<A>, imm: u32) -> Self {
        WriteImm { local, remote, imm }
    }
}

/// `IBV_WR_RDMA_READ`: reads the peer's memory at `remote` into `local`.
#[derive(Debug)]
pub struct Read<'a, A> {
    local: LocalBufMut<'a>,
    remote: RemoteSlice<A>,
}

impl<'a, A: HasRemoteRead> Read<'a, A> {
    /// Reads `local.len()` bytes from `remote`, which must allow remote reads, into `local`.
    pub fn new(local: LocalBufMut<'a>, remote: RemoteSlice<A>) -> Self {
        Read { local, remote }
    }
}

/// `IBV_WR_ATOMIC_CMP_AND_SWP`: if the 8 bytes at `remote` equal `compare`, replace them with
/// `swap`; the original value lands in `result`.
#[derive(Debug)]
pub struct CompareSwap<'a, A> {
    result: LocalBufMut<'a>,
    remote: RemoteSlice<A>,
    compare: u64,
    swap: u64,
}

impl<'a, A: HasRemoteAtomic> CompareSwap<'a, A> {
    /// Compare-and-swap on the 8 bytes at the start of `remote`. `result` must be 8 bytes and
    /// `remote` 8-byte aligned; checked when posting ([`Error::InvalidArgument`]).
    pub fn new(result: LocalBufMut<'a>, remote: RemoteSlice<A>, compare: u64, swap: u64) -> Self {
        CompareSwap {
            result,
            remote,
            compare,
            swap,
        }
    }
}

/// `IBV_WR_ATOMIC_FETCH_AND_ADD`: add `add` to the 8 bytes at `remote`; the original value
/// lands in `result`.
#[derive(Debug)]
pub struct FetchAdd<'a, A> {
    result: LocalBufMut<'a>,
    remote: RemoteSlice<A>,
    add: u64,
}

impl<'a, A: HasRemoteAtomic> FetchAdd<'a, A> {
    /// Fetch-and-add on the 8 bytes at the start of `remote`. Same checks as
    /// [`CompareSwap::new`].
    pub fn new(result: LocalBufMut<'a>, remote: RemoteSlice<A>, add: u64) -> Self {
        FetchAdd {
            result,
            remote,
            add,
        }
    }
}

fn check_fits<A>(verb: &'static str, len: u32, remote: &RemoteSlice<A>) -> Result<()> {
    if u64::from(len) > remote.len {
        return Err(Error::invalid(
            verb,
            format!(
                "{len} bytes do not fit the remote range of {} bytes",
                remote.len
            ),
        ));
    }
    Ok(())
}

fn check_atomic<A>(result: &LocalBufMut<'_>, remote: &RemoteSlice<A>) -> Result<()> {
    if result.len != 8 {
        return Err(Error::invalid(
            "ibv_post_send",
            format!(
                "an atomic result buffer must be 8 bytes, not {}",
                result.len
            ),
        ));
    }
    if result.addr % 8 != 0 {
        return Err(Error::invalid(
            "ibv_post_send",
            format!(
                "the atomic result buffer at {:#x} is not 8-byte aligned",
                result.addr
            ),
        ));
    }
    if remote.len < 8 || remote.addr % 8 != 0 {
        return Err(Error::invalid(
            "ibv_post_send",
            format!("an atomic target must be 8 bytes at an 8-byte aligned address (got {} bytes at {:#x})", remote.len, remote.addr),
        ));
    }
    Ok(())
}

fn rdma(raw: &mut RawSendWr, addr: u64, rkey: u32) {
    raw.wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
        remote_addr: addr,
        rkey,
    };
}

macro_rules! send_op {
    ($ty:ident <$($lt:lifetime),* $(, $a:ident)?>, $cap:ident, $bufs:ty, |$s:ident, $raw:ident| $build:block, |$s2:ident| $into:expr) => {
        impl<$($lt,)* $($a)?> sealed::Sealed for $ty<$($lt,)* $($a)?> {}
        impl<$($lt,)* $($a)?> SendRequest for $ty<$($lt,)* $($a)?> {}
        impl<$($lt,)* T: $cap $(, $a)?> SendWr<T> for $ty<$($lt,)* $($a)?> {
            type Buffers = $bufs;
            fn build(&self, $raw: &mut RawSendWr) -> Result<()> {
                let $s = self;
                $raw.wr.send_flags = sys::IBV_SEND_SIGNALED;
                $build
                Ok(())
            }
            fn into_buffers(self) -> $bufs {
                let $s2 = self;
                $into
            }
        }
    };
}

send_op!(
    Send<'a>,
    SupportsSend,
    LocalBuf<'a>,
    |s, raw| {
        raw.wr.opcode = sys::IBV_WR_SEND;
        raw.local(s.local.sge());
    },
    |s| s.local
);

send_op!(
    SendImm<'a>,
    SupportsSendImm,
    LocalBuf<'a>,
    |s, raw| {
        raw.wr.opcode = sys::IBV_WR_SEND_WITH_IMM;
        raw.wr.__bindgen_anon_1.imm_data = s.imm.to_be();
        raw.local(s.local.sge());
    },
    |s| s.local
);

send_op!(
    Write<'a, A>,
    SupportsRdmaWrite,
    LocalBuf<'a>,
    |s, raw| {
        check_fits("ibv_post_send (RDMA WRITE)", s.local.len, &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_RDMA_WRITE;
        rdma(raw, s.remote.addr, s.remote.rkey);
        raw.local(s.local.sge());
    },
    |s| s.local
);

send_op!(
    WriteImm<'a, A>,
    SupportsRdmaWrite,
    LocalBuf<'a>,
    |s, raw| {
        check_fits(
            "ibv_post_send (RDMA WRITE with immediate)",
            s.local.len,
            &s.remote,
        )?;
        raw.wr.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
        raw.wr.__bindgen_anon_1.imm_data = s.imm.to_be();
        rdma(raw, s.remote.addr, s.remote.rkey);
        raw.local(s.local.sge());
    },
    |s| s.local
);

send_op!(
    Read<'a, A>,
    SupportsRdmaRead,
    LocalBufMut<'a>,
    |s, raw| {
        check_fits("ibv_post_send (RDMA READ)", s.local.len, &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_RDMA_READ;
        rdma(raw, s.remote.addr, s.remote.rkey);
        raw.local(s.local.sge());
    },
    |s| s.local
);

send_op!(
    CompareSwap<'a, A>,
    SupportsAtomics,
    LocalBufMut<'a>,
    |s, raw| {
        check_atomic(&s.result, &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_ATOMIC_CMP_AND_SWP;
        raw.wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: s.remote.addr,
            compare_add: s.compare,
            swap: s.swap,
            rkey: s.remote.rkey,
        };
        raw.local(s.result.sge());
    },
    |s| s.result
);

send_op!(
    FetchAdd<'a, A>,
    SupportsAtomics,
    LocalBufMut<'a>,
    |s, raw| {
        check_atomic(&s.result, &s.remote)?;
        raw.wr.opcode = sys::IBV_WR_ATOMIC_FETCH_AND_ADD;
        raw.wr.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: s.remote.addr,
            compare_add: s.add,
            swap: 0,
            rkey: s.remote.rkey,
        };
        raw.local(s.result.sge());
    },
    |s| s.result
);

impl AllowsSolicited for Send<'_> {}
impl AllowsSolicited for SendImm<'_> {}
impl<A> AllowsSolicited for WriteImm<'_, A> {}

/// A send work request without `IBV_SEND_SIGNALED`.
#[derive(Debug)]
pub struct Unsignaled<W>(W);
/// A send work request with `IBV_SEND_FENCE`.
#[derive(Debug)]
pub struct Fenced<W>(W);
/// A send work request with `IBV_SEND_SOLICITED`.
#[derive(Debug)]
pub struct Solicited<W>(W);

impl<W: SendRequest> sealed::Sealed for Unsignaled<W> {}
impl<W: SendRequest> SendRequest for Unsignaled<W> {}
impl<W: SendRequest> sealed::Sealed for Fenced<W> {}
impl<W: SendRequest> SendRequest for Fenced<W> {}
impl<W: SendRequest> sealed::Sealed for Solicited<W> {}
impl<W: SendRequest> SendRequest for Solicited<W> {}
impl<W: AllowsSolicited> AllowsSolicited for Unsignaled<W> {}
impl<W: AllowsSolicited> AllowsSolicited for Fenced<W> {}

impl<T: Transport, W: SendWr<T>> SendWr<T> for Unsignaled<W> {
    type Buffers = W::Buffers;
    fn build(&self, raw: &mut RawSendWr) -> Result<()> {
        self.0.build(raw)?;
        raw.wr.send_flags &= !sys::IBV_SEND_SIGNALED;
        Ok(())
    }
    fn into_buffers(self) -> W::Buffers {
        self.0.into_buffers()
    }
}

impl<T: SupportsFence, W: SendWr<T>> SendWr<T> for Fenced<W> {
    type Buffers = W::Buffers;
    fn build(&self, raw: &mut RawSendWr) -> Result<()> {
        self.0.build(raw)?;
        raw.wr.send_flags |= sys::IBV_SEND_FENCE;
        Ok(())
    }
    fn into_buffers(self) -> W::Buffers {
        self.0.into_buffers()
    }
}

// `Solicited` is only built by `solicited()`, which already requires `AllowsSolicited`.
impl<T: Transport, W: SendWr<T>> SendWr<T> for Solicited<W> {
    type Buffers = W::Buffers;
    fn build(&self, raw: &mut RawSendWr) -> Result<()> {
        self.0.build(raw)?;
        raw.wr.send_flags |= sys::IBV_SEND_SOLICITED;
        Ok(())
    }
    fn into_buffers(self) -> W::Buffers {
        self.0.into_buffers()
    }
}

/// A receive work request (ibv_post_recv(3)): the device writes an incoming message into
/// `buf`, which must come from a region with LOCAL_WRITE.
#[derive(Debug)]
pub struct Recv<'a> {
    pub(crate) buf: LocalBufMut<'a>,
}

impl<'a> Recv<'a> {
    /// Receives into `buf`.
    pub fn new(buf: LocalBufMut<'a>) -> Self {
        Recv { buf }
    }
}
