//! On-Demand Paging: regions whose pages are not pinned.
//!
//! An ODP region (`IBV_ACCESS_ON_DEMAND`) is registered without pinning its memory: the device
//! faults pages in as it touches them and follows the process's page tables. The region type
//! is `Mr<A, Odp>` ([`Odp`](crate::mr::Odp)); it lends the same views as a pinned one and is
//! posted through the same three paths ([`posting`](super::posting)).
//!
//! # The capability is a value
//!
//! What a device supports for ODP is per transport and per operation
//! ([`OdpOps`](crate::odp::OdpOps): SEND, RECV, WRITE, READ, ATOMIC, SRQ_RECV).
//! [`Context::query_odp`](crate::device::Context::query_odp) reads it
//! (`ibv_query_device_ex`), and [`OdpCaps::check`](crate::odp::OdpCaps::check) turns "ODP on
//! transport `T` for these operations" into an [`OdpCap<T>`](crate::odp::OdpCap), or a typed
//! [`Error::Unsupported`](crate::Error::Unsupported) there and then. Registering needs that
//! value, which nothing else can make, so no ODP region exists on a device without ODP.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::odp::{OdpOps, Prefetch};
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn odp(ctx: &Context, pd: &Pd, qp: &Qp<RC, RTS>, peer: RemoteSlice<access::RemoteRw>) -> typed_verbs::Result<()> {
//!     let cap = ctx.query_odp()?.check::<RC>(OdpOps::SEND | OdpOps::RECV | OdpOps::WRITE | OdpOps::READ)?;
//!     // 1 GiB, of which nothing is resident until touched.
//!     let mut mr = pd.alloc_mr_odp(1 << 30, access::LOCAL_RW, &cap)?;
//!     mr.prefetch(..1 << 20, Prefetch::Write)?; // best effort; Unsupported where the provider lacks it
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let t = s.post_send(qp, wr::Read::new(mr.slice_mut(..4096)?, peer.slice(0, 4096)?))?;
//!         s.wait(t, Duration::from_secs(5))?.0.ok()?;
//!         Ok(())
//!     })??;
//!     mr.discard_pages(..1 << 20)?; // gives the pages back; they read as zeros afterwards
//!     Ok(())
//! }
//! ```
//!
//! The views of an ODP region carry what its capability verified (transport and operations).
//! Posting one on a QP of another transport, or for an operation the capability did not
//! cover, is refused before the provider sees it
//! ([`Error::InvalidArgument`](crate::Error::InvalidArgument)). An SRQ has no transport of its
//! own: an ODP receive on it needs SRQ_RECV verified for the transport of every QP attached.
//!
//! # Memory
//!
//! [`Pd::alloc_mr_odp`](crate::pd::Pd::alloc_mr_odp) maps a new memory file
//! (`memfd`, `MAP_SHARED | MAP_NORESERVE`, `MADV_DONTFORK`): no page exists until the program or
//! the device touches it and no swap is reserved, so a region may be larger than the machine's
//! memory. [`Mr::discard_pages`](crate::mr::Mr::discard_pages) (`madvise(MADV_REMOVE)`, whole
//! pages, `&mut self`) frees pages; the device's mapping of them is invalidated. It does not
//! exist for pinned regions (the device would keep the pinned pages while the program got new
//! ones), nor does [`prefetch`](crate::mr::Mr::prefetch) (`ibv_advise_mr`). Memory windows are
//! for pinned regions only.
//!
//! # The implicit region
//!
//! [`Pd::register_implicit_odp`](crate::pd::Pd::register_implicit_odp) registers the whole
//! address space under one lkey ([`ImplicitMr`](crate::odp::ImplicitMr), needs an
//! [`ImplicitOdpCap`](crate::odp::ImplicitOdpCap) from
//! [`OdpCaps::check_implicit`](crate::odp::OdpCaps::check_implicit)). It has local access only
//! (no rkey: remote rights do not compile) and lends views of ordinary Rust memory of at most
//! [`IMPLICIT_MAX_OP`](crate::odp::IMPLICIT_MAX_OP) bytes per operation:
//!
//! ```no_run
//! use typed_verbs::odp::OdpOps;
//! use typed_verbs::prelude::*;
//!
//! fn implicit(ctx: &Context, pd: &Pd) -> typed_verbs::Result<()> {
//!     let cap = ctx.query_odp()?.check_implicit::<RC>(OdpOps::SEND | OdpOps::RECV)?;
//!     let all = pd.register_implicit_odp(access::LOCAL_RW, &cap)?;
//!     let data = vec![7u8; 4096];
//!     let _view: LocalBuf<'_> = all.buf(&data)?; // borrows `data` and the region
//!     Ok(())
//! }
//! ```
//!
//! # Devices
//!
//! Soft-RoCE has no ODP on Linux 6.12 (the capability check refuses) and ODP on RC and UD
//! (not UC, no implicit regions, no `ibv_advise_mr`) on the 6.18 backport the tests run, whose
//! ODP path has bugs the tests assert (DESIGN.md §9, "The test devices"). One of them, writes
//! landing at their page's start, is a device property, assumed of every Soft-RoCE:
//! [`OdpCaps::writes_land_at_page_starts`](crate::odp::OdpCaps::writes_land_at_page_starts).
//! Where it holds, a buffer of ODP memory the device writes must start on a page boundary;
//! others are refused before posting.
