//! # typed-verbs
//!
//! RDMA verbs (libibverbs / rdma-core) whose type system makes misuse fail to compile.
//!
//! - Queue pairs are [`Qp<Transport, State>`](qp::Qp): an opcode that the ibv_post_send(3)
//!   table does not allow on a transport, or a post in the wrong state, does not compile
//!   ([`transport`]).
//! - Memory regions are [`Mr<Access>`](mr::Mr): an illegal access set, or an operation the
//!   region's rights do not permit, does not compile ([`access`]).
//! - Work requests borrow registered memory through a [`scope`](scope::scope) that does not
//!   return before the device is done with it, even if a token is leaked.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//!
//! # fn main() -> typed_verbs::Result<()> {
//! let ctx = Context::open("rxe0")?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64)?;
//! let src = pd.alloc_mr(4096, access::LOCAL_READ)?;
//! let dst = pd.alloc_mr(4096, access::REMOTE_RW)?;
//! # let qp: Qp<RC, RTS> = todo!();
//! scope(|s| -> typed_verbs::Result<()> {
//!     let token = s.post_send(&qp, wr::Write::new(src.slice(..)?, dst.remote(..)?))?;
//!     let (completion, _src) = s.wait(token, Duration::from_secs(10))?;
//!     completion.ok()?;
//!     Ok(())
//! })??;
//! # Ok(()) }
//! ```
//!
//! The [`guide`] walks through the library chapter by chapter: connecting queue pairs, memory
//! and access rights, the three ways to post (scopes, owned tokens, lanes) and what each
//! costs, memory windows, On-Demand Paging, UD, shared receive queues, completions and errors,
//! teardown. `DESIGN.md` in the repository has the architecture and the soundness argument.
#![deny(unsafe_code)]
#![warn(missing_docs)]

/// A module's private supertrait `Sealed`: public traits built on it cannot be implemented
/// outside the library, and an attempt reads why.
macro_rules! sealed_trait {
    () => {
        /// Sealed: only the library's own types implement the public traits built on it.
        #[diagnostic::on_unimplemented(
            message = "`{Self}` cannot implement this trait: it is sealed, implemented by typed-verbs' own types only",
            label = "not one of the library's own types",
            note = "the library's checks and its soundness argument rely on knowing every implementation (DESIGN.md)"
        )]
        pub trait Sealed {}
    };
}

pub mod access;
pub mod ah;
pub mod caller;
pub mod channel;
pub mod cm;
pub mod cq;
pub mod device;
pub mod dmabuf;
pub mod error;
pub mod event;
pub mod guide;
pub mod lane;
pub mod mr;
pub mod mw;
pub mod odp;
pub mod owned;
pub mod pd;
pub mod qp;
mod queue;
pub mod raw;
pub mod scope;
pub mod sgl;
pub mod srq;
mod sync;
pub mod transport;
pub mod wc;
pub mod wr;

#[cfg(test)]
mod test_util;

#[cfg(all(test, not(loom)))]
mod async_races;

pub use error::{Error, Result, Verb};
/// The raw bindings ([`raw`] handles name their types).
pub use typed_verbs_sys as sys;

/// The code blocks of README.md, compiled as doc tests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The names most programs need, for `use typed_verbs::prelude::*`.
///
/// Safe to glob-import next to std: no name here shadows an item of the std prelude or a
/// common std trait. The work requests, one struct per opcode, are reached through their
/// module, [`wr`] (`wr::Send::new(..)`, `wr::Write::new(..)`, `wr::Read::new(..)`),
/// as `io::Write` and `fmt::Write` are: imported bare, `Send` would hide the auto trait
/// (`T: Send`) and `Read`/`Write` would collide with `std::io`'s. [`Result`]
/// defaults its error type to [`Error`] and takes another as its second
/// parameter, so `Result<(), String>` still means std's.
pub mod prelude {
    pub use crate::access::{self, Access};
    pub use crate::ah::{AddressVector, Ah, Grh};
    pub use crate::caller::{BorrowedMr, Registered, ScopedMr, StableBuffer};
    pub use crate::channel::{CompChannel, CqEvent};
    pub use crate::cq::Cq;
    pub use crate::device::{devices, Context, Gid, Mtu};
    pub use crate::error::{Error, Result, Verb};
    pub use crate::event::{AsyncEvent, AsyncEvents};
    pub use crate::lane::{
        LaneToken, OrderedRecvLane, Prepared, PreparedList, PreparedRecv, RecvLane, RecvToken, SendLane,
    };
    pub use crate::mr::{Chunk, LocalBuf, LocalBufMut, Mr, RemoteSlice};
    pub use crate::owned::OwnedToken;
    pub use crate::pd::Pd;
    pub use crate::qp::{
        ConnectedInit, Endpoint, Link, Qp, QpCaps, QpConfig, RcRtr, RcRts, SqPsn, UcRtr, UdInit, UdRtr,
    };
    pub use crate::scope::{scope, scope_with_timeout, Scope, Token};
    pub use crate::srq::Srq;
    pub use crate::transport::{ERR, INIT, RAW_PACKET, RC, RESET, RTR, RTS, UC, UD, XRC_SEND};
    pub use crate::wc::{Completion, WcOpcode, WcStatus};
    pub use crate::wr::{self, SendRequest};
}
