//! Memory windows: lending part of a region under its own rkey and taking it back.
//!
//! A window ([`Mw<K>`](crate::mw::Mw), `ibv_alloc_mw`) is bound to a range of a region with
//! MW_BIND and gets an rkey of its own with rights of its own
//! ([`WindowAccess`](crate::access::WindowAccess); presets in
//! [`access::window`](crate::access::window)). Revoking it revokes that rkey without
//! deregistering the region. Binds are posted on a UC or RC QP and complete like any request,
//! so they go through a [scope](crate::scope::scope).
//!
//! | | type 1 ([`Type1`](crate::mw::Type1)) | type 2 ([`Type2`](crate::mw::Type2)) |
//! |---|---|---|
//! | bind | `ibv_bind_mw`: [`Scope::bind_mw`](crate::scope::Scope::bind_mw) | a BIND_MW request: [`wr::BindMw`](crate::wr::BindMw) |
//! | revoke | a zero-length bind: [`Scope::unbind_mw`](crate::scope::Scope::unbind_mw); deallocation (drop) | LOCAL_INV: [`wr::LocalInv`](crate::wr::LocalInv); a peer's SEND_WITH_INV ([`wr::SendInv`](crate::wr::SendInv)); deallocation |
//! | zero-based | no | yes ([`WindowAccess::zero_based`](crate::access::WindowAccess::zero_based)) |
//!
//! Each row is a type rule: the wrong verb, a writable window on a region without
//! LOCAL_WRITE, a region without MW_BIND, a zero-based type 1 window do not compile. The range
//! (inside the region, not empty) and the PDs (window, region and QP in one) are checked
//! before posting. [`Pd::alloc_mw`](crate::pd::Pd::alloc_mw) returns
//! [`Error::Unsupported`](crate::Error::Unsupported) where the device lacks the type.
//!
//! # The rkey exists only after a successful bind
//!
//! ibv_bind_mw(3) NOTES: the new rkey may not reach the peer before the bind's successful
//! completion, except "using a send request on the same QP" after the bind. So the token of a
//! bind has no rkey; [`Scope::wait`](crate::scope::Scope::wait) turns a successful bind into a
//! [`BoundMw`](crate::mw::BoundMw), whose [`remote`](crate::mw::BoundMw::remote) is the
//! peer's view, and a failed one back into the unbound `Mw` with its old rkey. The one way to
//! send the rkey earlier is [`Scope::advertise_window`](crate::scope::Scope::advertise_window):
//! an inline SEND of a [`WindowAdvert`](crate::mw::WindowAdvert) (21 bytes: the QP needs
//! `max_inline_data` of at least 21) on the bind's QP, behind the bind.
//!
//! A `BoundMw` borrows its region: the region cannot be dropped, deregistered or sliced
//! mutably while a window is bound to it.
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::access::window;
//! use typed_verbs::mw::Type2;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! /// Lends `buffer[1024..2048]` for RDMA WRITEs, lets the peer work, then revokes it.
//! fn lend(pd: &Pd, qp: &Qp<RC, RTS>, buffer: &Mr<access::WindowBindable>) -> typed_verbs::Result<()> {
//!     let t = Duration::from_secs(5);
//!     let mw = pd.alloc_mw::<Type2>()?;
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let bind = s.post_send(qp, wr::BindMw::new(mw, buffer, 1024, 1024, window::WRITE))?;
//!         // The advertisement travels behind the bind on the same QP (the peer posts a receive).
//!         let advert = s.advertise_window(qp, &bind)?;
//!         let (c, bound) = s.wait(bind, t)?;
//!         let bound = bound.map_err(|_unbound| typed_verbs::wc::CompletionError { completion: c })?;
//!         s.wait(advert, t)?.0.ok()?;
//!         let _peers_view: RemoteSlice<window::Write> = bound.remote(..)?;
//!         // ... the peer writes through the window ...
//!         let inv = s.post_send(qp, wr::LocalInv::new(bound))?;
//!         let (c, unbound) = s.wait(inv, t)?;
//!         // Success: the window is unbound (its rkey grants nothing); failure: still bound.
//!         let _mw = unbound.map_err(|_still_bound| typed_verbs::wc::CompletionError { completion: c })?;
//!         Ok(())
//!     })??;
//!     Ok(())
//! }
//! ```
//!
//! On the peer's side the advertisement is decoded with
//! [`WindowAdvert::decode`](crate::mw::WindowAdvert::decode) and
//! [`WindowAdvert::remote`](crate::mw::WindowAdvert::remote), which states the rights the peer
//! was told it has. A type 1 window bound with [`Scope::bind_mw`](crate::scope::Scope::bind_mw)
//! is sent after its bind completed, in any message. The receiver of a SEND_WITH_INV hands its
//! window and the receive's completion to
//! [`BoundMw::invalidated_by`](crate::mw::BoundMw::invalidated_by), which unbinds it only if
//! that completion invalidated this binding.
//!
//! A bound window's drop deallocates it (`ibv_dealloc_mw`), which also revokes it. A bound
//! window leaked with `mem::forget` keeps its region registered: `ibv_dereg_mr` then fails,
//! [`Mr::deregister`](crate::mr::Mr::deregister) reports it and the region's drop leaks the
//! memory (see [`teardown`](super::teardown)). `examples/memory_window.rs` runs both types
//! against a peer, revocation included.
