//! Raw handles: the C objects behind the library's types, for code that lives beside other C
//! (a GPU library that registers its own memory on our PD, an existing C verbs program that
//! queries a QP, a tool that prints a device's attributes).
//!
//! Each `as_raw` returns the pointer libibverbs gave the library. Getting it is safe; using it
//! takes `unsafe` code of the caller's, whose contract is the same for every handle:
//!
//! - **Lifetime.** The pointer is valid while the value it came from (or a clone of it, or an
//!   object made from it that keeps it alive) exists. The library destroys the object when the
//!   last of those goes; the caller must not use the pointer afterwards.
//! - **Ownership stays with the library.** The caller must not destroy, deallocate, close or
//!   deregister the object, and must not change state the types record: no `ibv_modify_qp`
//!   (the QP's state is its type), no posting to a QP or SRQ (the library numbers work requests
//!   and keeps their buffers until their completions), no polling or arming a CQ and no reading
//!   of a completion channel's events (completions and events the library does not see leave
//!   buffers kept until teardown), no `ibv_rereg_mr`, no `ibv_get_async_event` on the context
//!   while [`Context::next_async_event`](crate::device::Context::next_async_event) is in use.
//! - **What is fine:** queries (`ibv_query_device`, `ibv_query_port`, `ibv_query_qp`,
//!   `ibv_query_srq`, reading `lkey`/`rkey`/`qp_num`), and creating the caller's own objects
//!   on a context or PD (its own MRs, CQs, QPs), which the caller destroys before the last
//!   value keeping the context or PD alive is dropped (otherwise `ibv_dealloc_pd` /
//!   `ibv_close_device` fail and the library leaks the object rather than free it in use).
//!
//! There are no constructors from raw handles: the library's safety rests on knowing every
//! request outstanding on an object, which an object made elsewhere cannot promise.

use std::os::fd::RawFd;

use typed_verbs_sys as sys;

use crate::access::AccessSet;
use crate::ah::Ah;
use crate::channel::CompChannel;
use crate::cq::Cq;
use crate::device::Context;
use crate::mr::{Mr, MrKind};
use crate::pd::Pd;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::transport::{QpState, Transport};

impl Context {
    /// The `struct ibv_context` of this device context, under the contract of [`crate::raw`].
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.as_ptr()
    }
}

impl Pd {
    /// The `struct ibv_pd`, under the contract of [`crate::raw`].
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.as_ptr()
    }
}

impl Cq {
    /// The `struct ibv_cq`, under the contract of [`crate::raw`] (never polled, armed or
    /// resized by the caller).
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.as_ptr()
    }
}

impl<T: Transport, S: QpState> Qp<T, S> {
    /// The `struct ibv_qp`, under the contract of [`crate::raw`] (never modified or posted to
    /// by the caller).
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.shared.as_ptr()
    }
}

impl<A: AccessSet, K: MrKind> Mr<A, K> {
    /// The `struct ibv_mr`, under the contract of [`crate::raw`] (never deregistered or
    /// re-registered by the caller).
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.as_ptr()
    }
}

impl Srq {
    /// The `struct ibv_srq`, under the contract of [`crate::raw`] (never modified or posted
    /// to by the caller).
    pub fn as_raw(&self) -> *mut sys::ibv_srq {
        self.as_ptr()
    }
}

impl Ah {
    /// The `struct ibv_ah`, under the contract of [`crate::raw`] (the caller's own UD posts may
    /// name it while the `Ah` lives).
    pub fn as_raw(&self) -> *mut sys::ibv_ah {
        self.as_ptr()
    }
}

impl CompChannel {
    /// The `struct ibv_comp_channel`, under the contract of [`crate::raw`] (its events are
    /// read and acknowledged by the library only).
    pub fn as_raw(&self) -> *mut sys::ibv_comp_channel {
        self.as_ptr()
    }

    /// The channel's file descriptor (non-blocking), to register with an event loop for
    /// readability; reading it is the library's ([`CompChannel::wait`]).
    pub fn fd(&self) -> RawFd {
        self.raw_fd()
    }
}
