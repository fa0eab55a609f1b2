//! When the compiler refuses: the misuses rustc words itself, and the rule behind each.
//!
//! Most misuses are refused with the library's own message, which quotes the rule it enforces
//! (the opcode table, access rights, window types, the connection manager's states). Some are
//! caught by the borrow checker or by a type or lifetime mismatch, and rustc has no room for a
//! library's words there. This chapter lists those: what rustc says, which rule it is, and
//! what to write instead. Each example below fails to compile (a `compile_fail` test of
//! `cargo test --doc`); the `ui-tests/fail/` suite keeps the exact messages.
//!
//! # A borrowed view in an owned post
//!
//! rustc: E0597 "`src` does not live long enough ... argument requires that `src` is borrowed
//! for `'static`", or E0521 "borrowed data escapes outside of function", with a note pointing at
//! `W::Buffers: Send + 'static` in `post_send_owned`.
//!
//! The rule: an owned request's buffers stay with the library until the device is done with
//! them, however the token ends (waited for, dropped, leaked, its future dropped). A borrow
//! cannot be made to last that long, so owned posts take memory they can own: chunks of a
//! region ([`Mr::into_chunks`](crate::mr::Mr::into_chunks)), inline bytes, `'static` views.
//! Borrowed views go through a [`scope`](crate::scope::scope) instead (ui
//! `ownership/owned_post_of_borrowed_memory`).
//!
//! ```compile_fail,E0597
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn send(qp: &Qp<RC, RTS>, pd: &Pd) -> typed_verbs::Result<()> {
//!     let src = pd.alloc_mr(64, access::LOCAL_READ)?;
//!     let _token = qp.post_send_owned(wr::Send::new(src.slice(..)?)); // borrowed: refused
//!     Ok(())
//! }
//! ```
//!
//! # A scope token, lane token or receive token awaited
//!
//! rustc: E0277 "`Token<'_, LocalBuf<'_>>` is not a future" (or `LaneToken`, `RecvToken`).
//!
//! The rule: a future can be forgotten or dropped at any await point, and these tokens borrow
//! their buffers, so nothing could keep the borrow alive while the device uses the memory.
//! Await an [`OwnedToken`](crate::owned::OwnedToken) (owned posts); collect scope and lane tokens
//! with their `wait`. [`owned::completion`](crate::owned::completion) takes the same token and
//! says this in the library's words (ui `async/scope_token_awaited`,
//! `async/scope_token_as_future`).
//!
//! ```compile_fail,E0277
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! async fn send(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
//!     let _ = scope(|s| {
//!         let t = s.post_send(qp, wr::Send::new(src.slice(..).unwrap())).unwrap();
//!         async move {
//!             let _ = t.await; // a scope token is not a future
//!         }
//!     });
//! }
//! ```
//!
//! # Something of a scope leaving it
//!
//! rustc: E0521 "borrowed data escapes outside of closure", or "lifetime may not live long
//! enough" with a note that the scope's lifetime is invariant; for a thread spawned outside the
//! scope, E0521 or E0373 on the closure.
//!
//! The rule: [`scope`](crate::scope::scope) returns only after the device is done with every
//! request posted through it, so nothing that names such a request (a token, a lane, a prepared
//! request, a view moved into one) may outlive the closure. Collect completions inside the
//! scope, or use owned tokens for work that must outlive a function (ui
//! `ownership/token_escapes_scope`, `lanes/prepared_outlives_scope`).
//!
//! ```compile_fail
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn leak_a_token(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>) {
//!     let mut kept = Vec::new();
//!     let _ = scope(|s| {
//!         kept.push(s.post_send(qp, wr::Send::new(src.slice(..).unwrap())).unwrap()); // escapes
//!     });
//! }
//! ```
//!
//! # Memory touched while the device uses it
//!
//! rustc: E0502 "cannot borrow `dst` as mutable because it is also borrowed as immutable" (or
//! E0499, E0505 "cannot move out of `mr` because it is borrowed" for a drop or a
//! deregistration).
//!
//! The rule: ibv_post_send(3), "the buffers used by a WR can only be safely reused after the
//! request is fully executed and a work completion has been retrieved". A view moved into a
//! token keeps its region borrowed until the token is collected, which hands the view back;
//! a window keeps its region borrowed while bound (ibv_reg_mr(3): deregistration fails while a
//! window is bound). ui `ownership/write_source_while_posted`, `read_recv_buffer_while_posted`,
//! `drop_mr_while_posted`, `windows/drop_mr_with_bound_window`.
//!
//! ```compile_fail,E0502
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn overwrite(qp: &Qp<RC, RTS>, src: &mut Mr<access::LocalRead>) {
//!     let _ = scope(|s| {
//!         let t = s.post_send(qp, wr::Send::new(src.slice(..).unwrap())).unwrap();
//!         src.as_mut_slice()[0] = 1; // the device may be reading it
//!         let _ = s.wait(t, Duration::from_secs(1));
//!     });
//! }
//! ```
//!
//! # A QP moved or reset while requests are outstanding
//!
//! rustc: E0505 "cannot move out of `qp` because it is borrowed", or E0597 "`qp` does not
//! live long enough".
//!
//! The rule: a scope drains the queues it posted to before it returns, and a reset would flush
//! them under it; owned tokens and lanes hold the QP for the same reason. Transitions take the
//! QP by value: finish the scope (or collect the tokens) first (ui
//! `state/reset_qp_with_outstanding_recv`).
//!
//! # A zero-based window's range used as a virtually addressed one
//!
//! rustc: E0308 "mismatched types: expected `RemoteSlice<WindowAccess<..., ()>>`, found
//! `RemoteSlice<WindowAccess<..., ZeroBased>>`".
//!
//! The rule: a zero-based window is addressed by offset from its start
//! (`IBV_ACCESS_ZERO_BASED`, ibv_bind_mw(3)), so its remote range carries `ZeroBased` in its
//! rights and cannot stand for an address range (ui
//! `windows/zero_based_offsets_as_virtual_addresses`).
