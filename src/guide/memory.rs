//! Memory kinds and access rights.
//!
//! # Access rights are a type
//!
//! A region is [`Mr<A, K>`](crate::mr::Mr): `A` is its access set
//! [`Access<LW, RW, RR, RA, MB>`](crate::access::Access), one position per flag
//! (LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND), each the flag's marker or
//! `()`; `K` is [`Pinned`](crate::mr::Pinned) or [`Odp`](crate::mr::Odp) ([`on_demand_paging`](super::on_demand_paging)).
//! Use the presets of [`crate::access`] or its builder:
//!
//! | preset | flags | for |
//! |---|---|---|
//! | [`LOCAL_READ`](crate::access::LOCAL_READ) | none | send and RDMA WRITE sources |
//! | [`LOCAL_RW`](crate::access::LOCAL_RW) | LOCAL_WRITE | receive buffers, RDMA READ destinations, atomic results |
//! | [`REMOTE_READ_ONLY`](crate::access::REMOTE_READ_ONLY) | REMOTE_READ | memory peers read, never write |
//! | [`LOCAL_REMOTE_WRITE`](crate::access::LOCAL_REMOTE_WRITE) | LOCAL_WRITE, REMOTE_WRITE | RDMA WRITE targets |
//! | [`REMOTE_RW`](crate::access::REMOTE_RW) | LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ | memory peers read and write |
//! | [`REMOTE_ALL`](crate::access::REMOTE_ALL) | as `REMOTE_RW`, REMOTE_ATOMIC | atomics targets |
//! | [`WINDOW_BINDABLE`](crate::access::WINDOW_BINDABLE) | LOCAL_WRITE, MW_BIND | memory reached only through windows |
//! | [`FULL`](crate::access::FULL) | all five | |
//!
//! What the type decides, at compile time:
//!
//! - registration needs [`LegalAccess`](crate::access::LegalAccess): REMOTE_WRITE or
//!   REMOTE_ATOMIC without LOCAL_WRITE (ibv_reg_mr(3)'s EINVAL) does not compile;
//! - a view the device writes ([`Mr::slice_mut`](crate::mr::Mr::slice_mut): receives, READ
//!   destinations, atomic results) needs LOCAL_WRITE;
//! - [`wr::Write`](crate::wr::Write), [`wr::Read`](crate::wr::Read) and the atomics take a
//!   [`RemoteSlice<A>`](crate::mr::RemoteSlice) whose `A` has REMOTE_WRITE, REMOTE_READ or
//!   REMOTE_ATOMIC;
//! - the bytes are a plain `&[u8]` / `&mut [u8]` ([`Mr::as_slice`](crate::mr::Mr::as_slice))
//!   only where no peer can write them ([`PeerCannotWrite`](crate::access::PeerCannotWrite));
//!   other memory is read and written with copies,
//!   [`Mr::read_volatile_into`](crate::mr::Mr::read_volatile_into) and
//!   [`Mr::write_volatile_from`](crate::mr::Mr::write_volatile_from).
//!
//! ```compile_fail,E0277
//! # use typed_verbs::prelude::*;
//! # fn f(pd: &Pd) -> typed_verbs::Result<()> {
//! // REMOTE_WRITE without LOCAL_WRITE: ibv_reg_mr(3) refuses it, so this does not compile.
//! let mr = pd.alloc_mr(4096, Access::NONE.remote_write())?;
//! # Ok(()) }
//! ```
//!
//! # Views instead of addresses
//!
//! Work requests never take an address and a key. They take views, which borrow the region:
//!
//! - [`LocalBuf<'a>`](crate::mr::LocalBuf) ([`Mr::slice`](crate::mr::Mr::slice), `&self`):
//!   memory the local device reads;
//! - [`LocalBufMut<'a>`](crate::mr::LocalBufMut) ([`Mr::slice_mut`](crate::mr::Mr::slice_mut),
//!   `&mut self`): memory the local device writes (and may also read as a send source);
//!   [`split_at`](crate::mr::LocalBufMut::split_at) divides it;
//! - [`RemoteSlice<A>`](crate::mr::RemoteSlice) ([`Mr::remote`](crate::mr::Mr::remote)):
//!   address, length and rkey for a peer, typed by the rights of what it names. A peer's
//!   region arrives as numbers: [`RemoteSlice::from_wire`](crate::mr::RemoteSlice::from_wire)
//!   states the rights the program was told it has; a false claim cannot corrupt local memory,
//!   the remote device refuses the access (`REM_ACCESS_ERR`).
//!
//! While a view is posted, the region is borrowed (shared or exclusive), so it cannot be
//! written, read as a slice, moved or dropped until the completion hands the view back
//! ([`posting`](super::posting)).
//!
//! ```no_run
//! use std::time::Duration;
//! use typed_verbs::prelude::*;
//! use typed_verbs::wr;
//!
//! fn regions(pd: &Pd, qp: &Qp<RC, RTS>, peer: RemoteSlice<access::RemoteRw>) -> typed_verbs::Result<()> {
//!     let mut src = pd.alloc_mr(4096, access::LOCAL_READ)?; // zeroed, page-aligned
//!     src.as_mut_slice()[..5].copy_from_slice(b"hello"); // no peer can write it: a plain slice
//!     let mut back = pd.alloc_mr(4096, access::LOCAL_RW)?;
//!     let exposed = pd.alloc_mr(4096, access::REMOTE_RW)?;
//!     let _for_the_peer: RemoteSlice<access::RemoteRw> = exposed.remote(..)?; // send it over
//!     scope(|s| -> typed_verbs::Result<()> {
//!         let t = s.post_send(qp, wr::Write::new(src.slice(..5)?, peer))?;
//!         s.wait(t, Duration::from_secs(5))?.0.ok()?;
//!         let t = s.post_send(qp, wr::Read::new(back.slice_mut(..5)?, peer.slice(0, 5)?))?;
//!         s.wait(t, Duration::from_secs(5))?.0.ok()?;
//!         Ok(())
//!     })??;
//!     assert_eq!(&back.as_slice()[..5], b"hello");
//!     // A peer may write `exposed` at any time: copies only, no `&[u8]`.
//!     let mut seen = [0u8; 16];
//!     exposed.read_volatile_into(0, &mut seen)?;
//!     Ok(())
//! }
//! ```
//!
//! A request may take several views as one scatter/gather list (an array, or a tuple of up to
//! four of different regions): [`crate::sgl`].
//!
//! # Kinds of memory
//!
//! | how | memory | rights | notes |
//! |---|---|---|---|
//! | [`Pd::alloc_mr`](crate::pd::Pd::alloc_mr) | allocated by the library: page-aligned, zeroed | any legal set | freed after deregistration |
//! | [`Pd::alloc_mr_huge`](crate::pd::Pd::alloc_mr_huge) | the same in huge pages (`MAP_HUGETLB`) | any legal set | needs reserved huge pages (`ENOMEM` otherwise) |
//! | [`Pd::alloc_mr_odp`](crate::pd::Pd::alloc_mr_odp) | On-Demand Paging, not pinned | any legal set | needs a capability value ([`on_demand_paging`](super::on_demand_paging)) |
//! | [`Pd::register`](crate::pd::Pd::register) | an owned buffer moved in: `Vec<u8>`, `Box<[u8]>`, `memmap2::MmapMut` (feature `memmap2`) | any legal set | [`Registered::deregister`](crate::caller::Registered::deregister) gives the same buffer back |
//! | [`Pd::register_borrowed`](crate::pd::Pd::register_borrowed) | a `&mut [u8]` | `LOCAL_READ`, `LOCAL_RW` only | no rkey a peer could keep using |
//! | [`Pd::with_registered`](crate::pd::Pd::with_registered) | a `&mut [u8]`, for a closure | any legal set | deregistered when the closure returns or unwinds |
//! | [`Pd::register_raw`](crate::pd::Pd::register_raw) (`unsafe`) | memory the library cannot see | any legal set | the caller's contract |
//! | [`Pd::reg_dmabuf_mr`](crate::pd::Pd::reg_dmabuf_mr) | a dma-buf of another driver | any legal set | device views only, no bytes ([`crate::dmabuf`]) |
//!
//! Each is sound when the program leaks the registration (`mem::forget`): [`crate::caller`]
//! and DESIGN.md §5 say why. Dropping a region deregisters it; if `ibv_dereg_mr` fails (a
//! window still bound) memory the region owns is leaked rather than freed under the device
//! (over borrowed or raw memory the process aborts: [`teardown`](super::teardown)), and
//! [`Mr::deregister`](crate::mr::Mr::deregister) reports the error instead.
//!
//! ```no_run
//! use typed_verbs::prelude::*;
//!
//! fn own_memory(pd: &Pd, data: Vec<u8>, scratch: &mut [u8]) -> typed_verbs::Result<Vec<u8>> {
//!     // A buffer the program already has, moved in and given back.
//!     let mr = pd.register(data, access::REMOTE_RW)?;
//!     let _peer_view = mr.remote(..)?;
//!     let data = mr.deregister().map_err(|(error, _region)| error)?;
//!
//!     // Borrowed memory with remote rights, for the duration of a closure.
//!     let rkey = pd.with_registered(scratch, access::REMOTE_RW, |mr| mr.remote(..).map(|r| r.rkey()))??;
//!     let _ = rkey; // names nothing once the closure returned
//!     Ok(data)
//! }
//! ```
//!
//! # Owned chunks
//!
//! [`Mr::into_chunks`](crate::mr::Mr::into_chunks) splits a region into disjoint
//! [`Chunk`](crate::mr::Chunk)s, each keeping the region alive (deregistered with the last
//! one). A chunk is owned memory: it moves into a request and comes back with the completion,
//! and it is what owned tokens and SRQs post ([`posting`](super::posting),
//! [`shared_receive_queues`](super::shared_receive_queues)). A chunk's bytes are a slice where no peer can write them
//! ([`Chunk::as_mut_slice`](crate::mr::Chunk::as_mut_slice)), volatile copies otherwise.
//!
//! # Protection domains
//!
//! Every object a request names (each scatter/gather entry's region, a window, a UD address
//! handle) must be of the QP's protection domain, and a QP's CQs of the PD's context: checked
//! when posting or creating, before the provider sees them
//! ([`Error::InvalidArgument`](crate::Error::InvalidArgument)).
