//! Memory the caller owns, registered: `ibv_reg_mr` over the program's own buffers instead of
//! memory the library allocates.
//!
//! Four forms, by who owns the memory and how long the registration may outlive what the
//! program does with it. Each is leak-safe in its own way (DESIGN.md §5, "Memory the caller
//! owns"):
//!
//! - [`Pd::register`] moves an owned buffer ([`StableBuffer`]: `Vec<u8>`, `Box<[u8]>`, and
//!   `memmap2::MmapMut` with the `memmap2` feature) into a [`Registered<A, B>`], a region like
//!   any other ([`Mr<A>`] through `Deref`), which owns the buffer until it is deregistered
//!   ([`Registered::deregister`] hands it back). The region releases the buffer only after a
//!   successful `ibv_dereg_mr`, and leaks it otherwise, as it does with its own memory.
//! - [`Pd::register_borrowed`] registers a `&'a mut [u8]` for local work requests only
//!   ([`NoPeerAccess`]: no remote right, no MW_BIND) as a [`BorrowedMr<'a, A>`]. Its views
//!   borrow it, so a leaked `BorrowedMr` has no views left, and no peer can reach the memory.
//! - [`Pd::with_registered`] registers a `&mut [u8]` with any access set for the duration of a
//!   closure, which receives a branded [`ScopedMr<'id, A>`]: deregistered when the closure
//!   returns or unwinds; if that fails (a memory window leaked while bound keeps the region
//!   busy) the process aborts, as the borrow cannot end safely.
//! - [`Pd::register_raw`] (`unsafe`) registers memory the library cannot see (a C library's, a
//!   device's mapping) under the caller's contract; the library never frees it.
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, RangeBounds};
use std::ptr::NonNull;

use crate::access::{AccessSet, HasLocalWrite, LegalAccess, NoPeerAccess, PeerCannotWrite};
use crate::error::{Error, Result};
use crate::mr::{region_sealed, Backing, CallerBuffer, LocalBufMut, Mr, OdpTag, Pinned, WindowRegion};
use crate::pd::Pd;

/// An owned buffer whose memory may be registered with the device for as long as the value
/// lives: the memory of a [`Registered<A, B>`](Registered).
///
/// The library boxes the value, takes the memory's address once ([`StableBuffer::stable_bytes`]),
/// registers it, and from then on reaches the memory only through the region (its views,
/// `as_slice`, volatile copies) and the device; it never touches the value again until the
/// region is deregistered, when it drops the value or hands it back. `Send + Sync`: the region
/// may be moved to, used from and dropped on any thread.
///
/// The value's drop runs where the region's last handle goes, which may be inside a poll of a
/// completion queue, with that queue's routing lock held (the poll that completes the last
/// request of a chunk whose token was dropped). It must not poll, wait on or post to the
/// library's queues, nor read the device's async events (`Context::next_async_event` looks for
/// the CQ an event names under every CQ's routing lock): either would wait for the lock its
/// own thread holds.
///
/// # Safety
/// An implementation promises, for every value of the type:
/// - **Fixed memory.** [`stable_bytes`](StableBuffer::stable_bytes) returns the same memory
///   (address and length) every time it is called, for as long as the value lives and nothing
///   but moves and `stable_bytes` calls happen to it; moving the value does not move the memory
///   (it is not stored inline in the value).
/// - **Valid.** That memory is initialised and valid for reads and writes, for as long as the
///   value lives.
/// - **Exclusive.** Nothing else reads or writes it except through the value: no other owner,
///   no pointer or reference kept elsewhere, no other mapping of it written by this or another
///   process.
/// - **Released by the drop only.** The memory is not freed, unmapped, remapped or reused
///   before the value is dropped; dropping the value is its only release.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an owned buffer `Pd::register` can move into a region",
    label = "not a `StableBuffer`",
    note = "`Pd::register` takes the buffer over for as long as the region lives: `Vec<u8>`, `Box<[u8]>`, `memmap2::MmapMut` (feature `memmap2`), or a type of yours that implements `StableBuffer`",
    note = "for memory you only borrow, use `Pd::register_borrowed` (local access only) or the closure form `Pd::with_registered`, which deregisters before the borrow ends"
)]
pub unsafe trait StableBuffer: Send + Sync + 'static {
    /// The buffer's memory: always the same address and length for a given value.
    fn stable_bytes(&mut self) -> &mut [u8];
}

// SAFETY: a `Vec`'s elements live in a heap allocation of its own: moving the `Vec` moves only
// its pointer, length and capacity, and the allocation changes only through `&mut` methods that
// grow, shrink or replace it, none of which `stable_bytes` calls (`as_mut_slice`); the first
// `len` elements are initialised `u8`s; the allocation is released only by the drop (or by those
// methods). The `Vec` is the allocation's one owner.
unsafe impl StableBuffer for Vec<u8> {
    /// Its `len` bytes (not its capacity).
    fn stable_bytes(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

// SAFETY: a boxed slice's bytes live in its own heap allocation, of fixed length, initialised,
// owned by the box alone and freed by its drop; moving the box moves only the pointer.
unsafe impl StableBuffer for Box<[u8]> {
    fn stable_bytes(&mut self) -> &mut [u8] {
        self
    }
}

// SAFETY: an `MmapMut` is a readable and writable mapping (`PROT_READ | PROT_WRITE`) at a fixed
// address and length, initialised (zero pages, or a file's contents), unmapped only by its drop
// (`remap` needs `&mut` and is never called while the library holds the value); moving the value
// moves only its address and length. Exclusive: an anonymous mapping has no other user; for a
// file mapping this rests on the promise made to memmap2's `unsafe` constructor (the file is not
// modified, in or out of process, while it is mapped).
#[cfg(feature = "memmap2")]
unsafe impl StableBuffer for memmap2::MmapMut {
    fn stable_bytes(&mut self) -> &mut [u8] {
        self
    }
}

/// A memory region over a buffer the caller moved in ([`Pd::register`]): `struct ibv_mr` plus
/// the buffer `B`, owned until [`Registered::deregister`] hands it back.
///
/// A region like any other: it dereferences to [`Mr<A>`] (views, `remote`, `as_slice` where no
/// peer can write, volatile copies; [`Registered::into_mr`] for [`Mr::into_chunks`]), and
/// windows are bound to it as to an `Mr` ([`WindowRegion`]). The buffer itself is not
/// reachable while it is registered (no `&B`, no `&mut B`): its bytes are the region's, under
/// the region's rules.
///
/// Dropping it deregisters the region and then drops the buffer; if the deregistration fails,
/// the buffer is leaked with the registration rather than released under the device.
pub struct Registered<A: AccessSet, B: StableBuffer> {
    mr: Mr<A>,
    _buffer: PhantomData<B>,
}

impl<A: AccessSet, B: StableBuffer> region_sealed::Sealed for Registered<A, B> {}
impl<A: AccessSet, B: StableBuffer> WindowRegion for Registered<A, B> {
    type Access = A;
    fn window_region(&self) -> &Mr<A, Pinned> {
        &self.mr
    }
}

impl<A: AccessSet, B: StableBuffer> Deref for Registered<A, B> {
    type Target = Mr<A>;
    fn deref(&self) -> &Mr<A> {
        &self.mr
    }
}

/// `&mut Mr<A>`: for [`Mr::slice_mut`], `as_mut_slice` and `write_volatile_from`. The `Mr`
/// carries the buffer with it, so swapping it with another region moves the buffer along (and
/// [`Registered::deregister`] then reports that it holds no `B`).
impl<A: AccessSet, B: StableBuffer> DerefMut for Registered<A, B> {
    fn deref_mut(&mut self) -> &mut Mr<A> {
        &mut self.mr
    }
}

impl<A: AccessSet, B: StableBuffer> fmt::Debug for Registered<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registered").field("buffer", &std::any::type_name::<B>()).field("mr", &self.mr).finish()
    }
}

impl<A: AccessSet, B: StableBuffer> Registered<A, B> {
    /// `ibv_dereg_mr`, then the buffer back: the value that was registered (same memory, with
    /// whatever the device and the program wrote into it), or, if this region's `Mr` was
    /// swapped through `DerefMut` with another `Registered<_, B>`'s, that one's buffer (the
    /// buffer travels with its `Mr`).
    ///
    /// # Errors
    /// - [`Error::Verb`] with `ibv_dereg_mr` and its errno (e.g. while a memory window is still
    ///   bound); the region comes back intact with the error;
    /// - [`Error::InvalidArgument`] if the region no longer holds a `B` (its `Mr` was swapped,
    ///   through `DerefMut`, with a region that owns other memory); nothing is deregistered:
    ///   drop it, or deregister it with [`Registered::into_mr`] and [`Mr::deregister`].
    ///
    /// See ibv_reg_mr(3) (`ibv_dereg_mr`).
    #[doc(alias = "ibv_dereg_mr")]
    pub fn deregister(self) -> std::result::Result<B, (Error, Self)> {
        if !self.mr.caller_buffer().is_some_and(|buf| buf.is::<B>()) {
            let reason = format!(
                "this region no longer owns a `{}` (its `Mr` was swapped with another region's)",
                std::any::type_name::<B>()
            );
            return Err((Error::invalid("ibv_dereg_mr", reason), self));
        }
        match self.mr.deregister_into_buffer() {
            Ok(Some(buf)) => match buf.downcast::<B>() {
                Ok(buf) => Ok(*buf),
                Err(_) => unreachable!("the buffer's type was checked before deregistering"),
            },
            Ok(None) => unreachable!("the region was checked to own a buffer before deregistering"),
            Err((err, mr)) => Err((err, Registered { mr, _buffer: PhantomData })),
        }
    }

    /// The region without the buffer's type: it still owns the buffer, dropped when the region
    /// is deregistered (e.g. when the last of its [`Mr::into_chunks`] chunks is dropped).
    pub fn into_mr(self) -> Mr<A> {
        self.mr
    }
}

/// A memory region over borrowed memory, for local work requests only
/// ([`Pd::register_borrowed`]): `struct ibv_mr` over a `&'a mut [u8]`.
///
/// It dereferences to [`Mr<A>`] for shared access (`slice`, `as_slice`, `read_volatile_into`);
/// [`BorrowedMr::slice_mut`], [`BorrowedMr::as_mut_slice`] and
/// [`BorrowedMr::write_volatile_from`] take `&mut self`. No `&mut Mr` is ever handed out (the
/// region must stay over the memory it borrows), and no chunks (they are `'static`).
///
/// Leak-safe: `A` grants no remote right and no MW_BIND ([`NoPeerAccess`]), so only local work
/// requests reach the memory, and they need views, which borrow this value: once it is leaked
/// (`mem::forget`) or dropped, none is left. Dropping it deregisters the region (the process
/// aborts if that fails, see [`crate::caller`]); [`BorrowedMr::deregister`] hands the slice back.
pub struct BorrowedMr<'a, A: AccessSet> {
    mr: Mr<A>,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<A: AccessSet> region_sealed::Sealed for BorrowedMr<'_, A> {}
impl<A: AccessSet> WindowRegion for BorrowedMr<'_, A> {
    type Access = A;
    fn window_region(&self) -> &Mr<A, Pinned> {
        &self.mr
    }
}

impl<A: AccessSet> Deref for BorrowedMr<'_, A> {
    type Target = Mr<A>;
    fn deref(&self) -> &Mr<A> {
        &self.mr
    }
}

impl<A: AccessSet> fmt::Debug for BorrowedMr<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BorrowedMr").field("mr", &self.mr).finish()
    }
}

impl<'a, A: AccessSet> BorrowedMr<'a, A> {
    /// `ibv_dereg_mr`, then the borrowed slice back, for the rest of its borrow.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_dereg_mr` and its errno; the region comes back intact.
    ///
    /// See ibv_reg_mr(3) (`ibv_dereg_mr`).
    #[doc(alias = "ibv_dereg_mr")]
    pub fn deregister(self) -> std::result::Result<&'a mut [u8], (Error, Self)> {
        let (mem, len) = (self.mr.mem_ptr(), self.mr.len());
        match self.mr.deregister() {
            // SAFETY: `mem..mem+len` is the `&'a mut [u8]` `register_borrowed` took (the region
            // only ever names that memory: no `&mut Mr` is handed out, so it cannot have been
            // swapped), exclusively borrowed for 'a, and nothing reaches it any more: the
            // registration is gone, and the views borrowed `self`, which is consumed.
            Ok(()) => Ok(unsafe { std::slice::from_raw_parts_mut(mem.as_ptr(), len) }),
            Err((err, mr)) => Err((err, BorrowedMr { mr, _borrow: PhantomData })),
        }
    }
}

/// A memory region over borrowed memory for the duration of a [`Pd::with_registered`] closure:
/// the handle the closure receives, branded with the call's own lifetime `'id`.
///
/// It dereferences to [`Mr<A>`] for shared access: views (`slice`), `remote`, `as_slice` where
/// no peer can write, volatile reads; windows are bound to it as to an `Mr` (`Scope::bind_mw`,
/// `BindMw::new` take a [`WindowRegion`]). [`ScopedMr::slice_mut`], [`ScopedMr::as_mut_slice`] and
/// [`ScopedMr::write_volatile_from`] take `&mut self`. No `&mut Mr` is handed out, and the
/// brand `'id` (invariant, a fresh lifetime per call) makes the handles of two nested calls
/// different types, so a registration cannot be swapped out of its call. Views borrow the
/// handle, so none outlives the closure; a [`RemoteSlice`](crate::mr::RemoteSlice) (a peer's
/// address and key, no borrow) may, and a peer using it after the call gets a remote access
/// error.
pub struct ScopedMr<'id, A: AccessSet> {
    mr: Mr<A>,
    _brand: PhantomData<fn(&'id ()) -> &'id ()>,
}

impl<A: AccessSet> region_sealed::Sealed for ScopedMr<'_, A> {}
impl<A: AccessSet> WindowRegion for ScopedMr<'_, A> {
    type Access = A;
    fn window_region(&self) -> &Mr<A, Pinned> {
        &self.mr
    }
}

impl<A: AccessSet> Deref for ScopedMr<'_, A> {
    type Target = Mr<A>;
    fn deref(&self) -> &Mr<A> {
        &self.mr
    }
}

impl<A: AccessSet> fmt::Debug for ScopedMr<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedMr").field("mr", &self.mr).finish()
    }
}

/// The `&mut self` accessors of the handles over borrowed memory, which never hand out
/// `&mut Mr` (the region must stay over the memory it borrows).
macro_rules! exclusive_access {
    ($t:ident) => {
        impl<A: AccessSet> $t<'_, A> {
            /// A view of `range` that the local device may write: [`Mr::slice_mut`].
            ///
            /// # Errors
            /// As [`Mr::slice`].
            pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<LocalBufMut<'_>>
            where
                A: HasLocalWrite,
            {
                self.mr.slice_mut(range)
            }

            /// The contents as a mutable slice: [`Mr::as_mut_slice`].
            pub fn as_mut_slice(&mut self) -> &mut [u8]
            where
                A: PeerCannotWrite,
            {
                self.mr.as_mut_slice()
            }

            /// Copies `src` in at `offset` with volatile writes: [`Mr::write_volatile_from`].
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] if the range is outside the region.
            pub fn write_volatile_from(&mut self, offset: usize, src: &[u8]) -> Result<()> {
                self.mr.write_volatile_from(offset, src)
            }
        }
    };
}
exclusive_access!(BorrowedMr);
exclusive_access!(ScopedMr);

/// Refuses an empty buffer: a memory region needs at least one byte.
fn check_len(len: usize) -> Result<()> {
    if len == 0 {
        return Err(Error::invalid("ibv_reg_mr", "a memory region needs at least one byte"));
    }
    Ok(())
}

/// The part of [`Pd::register`] that handles the buffer: boxes it (the value sits at its final
/// place before its address is taken, and the box is never moved out of or reborrowed until the
/// region is deregistered), asks it for its memory once, refuses an empty one, and hands the
/// memory and the type-erased buffer to `reg`, which registers them into a region owning the
/// buffer (`Backing::Caller`). The buffer is dropped if `reg` fails.
fn register_boxed<A: AccessSet, B: StableBuffer>(
    buf: B,
    reg: impl FnOnce(NonNull<u8>, usize, Box<CallerBuffer>) -> Result<Mr<A>>,
) -> Result<Registered<A, B>> {
    let mut boxed = Box::new(buf);
    let bytes = boxed.stable_bytes();
    let len = bytes.len();
    let mem = NonNull::from(bytes).cast::<u8>();
    check_len(len)?;
    let erased: CallerBuffer = boxed;
    let mr = reg(mem, len, Box::new(erased))?;
    Ok(Registered { mr, _buffer: PhantomData })
}

#[cfg(all(test, not(loom)))]
impl<A: AccessSet, B: StableBuffer> Registered<A, B> {
    /// Test only: `buf` registered as [`Pd::register`] registers it (the same boxing and single
    /// request for its memory), under the fake registration `mr` of `pd` instead of
    /// `ibv_reg_mr`.
    pub(crate) fn fake(
        pd: &std::sync::Arc<crate::pd::PdInner>,
        mr: NonNull<typed_verbs_sys::ibv_mr>,
        buf: B,
    ) -> Result<Self> {
        register_boxed(buf, |mem, len, buffer| Ok(Mr::fake_caller(pd, mr, mem, len, buffer)))
    }
}

impl Pd {
    /// `ibv_reg_mr` over a buffer the caller owns, moved into the region (pinned): its
    /// `stable_bytes` (a `Vec`'s `len` bytes, not its capacity).
    ///
    /// The buffer is boxed before its address is taken, so moving the [`Registered`] never
    /// moves it. `access` is the access set, as for [`Pd::alloc_mr`] (an illegal set does not
    /// compile).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for an empty buffer;
    /// - [`Error::Unsupported`] for REMOTE_ATOMIC on a device without atomic operations;
    /// - [`Error::Verb`] with `ibv_reg_mr` and its errno (e.g. `ENOMEM` above the locked-memory
    ///   limit, `EFAULT` for memory the kernel cannot pin for writing, such as some file
    ///   mappings).
    ///
    /// The buffer is dropped on failure.
    ///
    /// See ibv_reg_mr(3).
    #[doc(alias = "ibv_reg_mr")]
    pub fn register<A: LegalAccess, B: StableBuffer>(&self, buf: B, access: A) -> Result<Registered<A, B>> {
        let _ = access;
        self.check_atomic_access(crate::Verb::RegMr, A::BITS)?;
        register_boxed(buf, |mem, len, buffer| {
            // SAFETY: `mem..mem+len` is the buffer's memory (`register_boxed` took it from the
            // boxed value, once): initialised, readable and writable, at a fixed address while
            // the value lives and is only moved, accessed by nobody else, and released only by
            // the value's drop (`StableBuffer`'s contract). The value moves into the region
            // (`Backing::Caller`, its `buffer`), which drops it only after a successful
            // deregistration (or hands it back then, `Registered::deregister`), and leaks it if
            // that fails.
            unsafe { self.register_memory::<A, Pinned>(mem, len, OdpTag::default(), Backing::Caller, Some(buffer)) }
        })
    }

    /// `ibv_reg_mr` over borrowed memory, for local work requests only (pinned): no remote
    /// right, no MW_BIND (`access::LOCAL_READ` or `access::LOCAL_RW`; anything else does not
    /// compile, [`NoPeerAccess`]).
    ///
    /// For remote access or memory windows over borrowed memory use [`Pd::with_registered`];
    /// for a buffer the region may own, [`Pd::register`].
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for an empty slice;
    /// - [`Error::Verb`] with `ibv_reg_mr` and its errno.
    ///
    /// See ibv_reg_mr(3).
    #[doc(alias = "ibv_reg_mr")]
    pub fn register_borrowed<'a, A: NoPeerAccess>(&self, buf: &'a mut [u8], access: A) -> Result<BorrowedMr<'a, A>> {
        let _ = access;
        check_len(buf.len())?;
        let len = buf.len();
        let mem = NonNull::from(buf).cast::<u8>();
        // SAFETY: `mem..mem+len` is a `&'a mut [u8]`: initialised, readable and writable, and
        // exclusively ours for 'a, which the `BorrowedMr<'a, A>` keeps borrowed. The region
        // outlives that borrow only if the `BorrowedMr` is leaked, and then nothing can reach the
        // memory: `A: NoPeerAccess` (no rkey a peer can use, no window), and local requests need
        // views, which borrow the `BorrowedMr`. `Backing::Borrowed`: never released by the
        // library; a failed deregistration on drop aborts.
        let mr = unsafe { self.register_memory::<A, Pinned>(mem, len, OdpTag::default(), Backing::Borrowed, None) }?;
        Ok(BorrowedMr { mr, _borrow: PhantomData })
    }

    /// `ibv_reg_mr` over borrowed memory for the duration of `f`, with any legal access set
    /// (remote rights and MW_BIND included), then `ibv_dereg_mr`.
    ///
    /// `f` receives the region as a [`ScopedMr<'id, A>`] branded with a lifetime of this call's
    /// own: views of it cannot leave `f` (a [`RemoteSlice`](crate::mr::RemoteSlice) can, and
    /// names nothing once `f` is done), and handles of nested calls cannot be swapped. The
    /// region is deregistered when `f` returns and when it unwinds (a panic is resumed after
    /// the deregistration).
    ///
    /// **Aborts the process** if that deregistration fails: the borrow of `buf` ends when this
    /// call returns, and a peer could still write `buf` through the region (rxe refuses
    /// `ibv_dereg_mr` while a memory window is bound to the region, which safe code can cause by
    /// leaking a bound window with `mem::forget`). The error is printed to stderr first.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for an empty slice;
    /// - [`Error::Unsupported`] for REMOTE_ATOMIC on a device without atomic operations;
    /// - [`Error::Verb`] with `ibv_reg_mr` and its errno. `f` is not called then.
    ///
    /// See ibv_reg_mr(3).
    #[doc(alias = "ibv_reg_mr")]
    pub fn with_registered<A: LegalAccess, R>(
        &self,
        buf: &mut [u8],
        access: A,
        f: impl for<'id> FnOnce(&mut ScopedMr<'id, A>) -> R,
    ) -> Result<R> {
        let _ = access;
        check_len(buf.len())?;
        let len = buf.len();
        let mem = NonNull::from(buf).cast::<u8>();
        // SAFETY: `mem..mem+len` is a `&mut [u8]`: initialised, readable and writable, and
        // exclusively ours until this function returns. The region never outlives the call: it
        // lives in `scoped`, a local that only `f` sees (by `&mut`, branded, never as
        // `&mut Mr`), and it is deregistered when `scoped` drops, on return and on unwind; if
        // that fails, `Mr::drop` aborts the process (`Backing::Borrowed`), so the borrow never
        // ends while the device can reach the memory.
        let mr = unsafe { self.register_memory::<A, Pinned>(mem, len, OdpTag::default(), Backing::Borrowed, None) }?;
        let mut scoped = ScopedMr { mr, _brand: PhantomData };
        let out = f(&mut scoped);
        // The drop guard: `Mr::drop` deregisters, or aborts (also when `f` unwinds).
        drop(scoped);
        Ok(out)
    }

    /// `ibv_reg_mr` over `len` bytes at `ptr`, memory the library cannot see (a C library's
    /// buffer, a mapping of the program's own): the returned region names it and never frees
    /// it.
    ///
    /// # Safety
    /// From this call until the returned [`Mr`] is dropped, or [`Mr::deregister`] returns `Ok`
    /// (and forever if the region is leaked with `mem::forget`; nothing if this call returns an
    /// error):
    /// - `ptr..ptr + len` is valid for reads and writes (mapped readable and writable) and
    ///   initialised, whatever `access` says (the region hands out `&mut [u8]` where no peer
    ///   can write);
    /// - it stays mapped at that address and is not freed, unmapped, remapped or reused;
    /// - it is reached only through the region (its views, chunks, `as_slice`,
    ///   `as_mut_slice`, volatile copies) and the device: no Rust reference to it exists
    ///   outside the region, and no other code, thread, process or device reads or writes it.
    ///
    /// Dropping the region deregisters it, and if that fails the process aborts (the memory
    /// would be released under the device), so when the drop returns the device no longer
    /// reaches the memory.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for a null `ptr`, `len == 0`, or `len` above `isize::MAX`;
    /// - [`Error::Unsupported`] for REMOTE_ATOMIC on a device without atomic operations;
    /// - [`Error::Verb`] with `ibv_reg_mr` and its errno (e.g. `EFAULT` for memory the kernel
    ///   cannot pin).
    ///
    /// See ibv_reg_mr(3).
    #[doc(alias = "ibv_reg_mr")]
    pub unsafe fn register_raw<A: LegalAccess>(&self, ptr: *mut u8, len: usize, access: A) -> Result<Mr<A>> {
        let _ = access;
        check_len(len)?;
        if isize::try_from(len).is_err() {
            return Err(Error::invalid("ibv_reg_mr", format!("{len} bytes: more than isize::MAX")));
        }
        let mem = NonNull::new(ptr).ok_or_else(|| Error::invalid("ibv_reg_mr", "a null address"))?;
        // SAFETY: this function's contract: valid, initialised, readable and writable memory
        // reached only through the region until it is gone; `len` checked above.
        // `Backing::Borrowed`: never released by the library; a failed deregistration on drop
        // aborts.
        unsafe { self.register_memory::<A, Pinned>(mem, len, OdpTag::default(), Backing::Borrowed, None) }
    }
}
