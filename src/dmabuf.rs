//! DMA-BUF memory regions: `ibv_reg_dmabuf_mr`, memory another driver exports (a GPU's, an
//! accelerator's) registered by its dma-buf file descriptor.
//!
//! A [`DmabufMr<A>`] is typed like every region ([`access`](crate::access): the LOCAL_WRITE
//! rules are compile-time) and lends [`RemoteSlice<A>`]s for peers, by the region's I/O
//! virtual address (`iova`). Its memory is not the process's, so it lends no local view:
//! [`LocalBuf`](crate::mr::LocalBuf) and [`LocalBufMut`](crate::mr::LocalBufMut) are host memory
//! the program may also copy in and out of with volatile accesses, and an iova is not a host
//! address (a view of one would let safe code read and write wherever the iova points). The exporter's memory stays
//! alive while the registration holds the dma-buf (the kernel takes its own reference), so the
//! descriptor may be closed after registering.
//!
//! [`udmabuf`] makes a dma-buf without a GPU, over host memory (Linux `/dev/udmabuf`, from a
//! sealed memfd): for tests, and for devices that take host memory as a dma-buf.
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use typed_verbs_sys as sys;

use crate::access::{AccessSet, LegalAccess};
use crate::error::{Error, Result, Verb};
use crate::mr::{range_of, RemoteSlice};
use crate::pd::{Pd, PdInner};

/// A memory region over a dma-buf: `struct ibv_mr` from `ibv_reg_dmabuf_mr`. Deregistered on
/// drop.
pub struct DmabufMr<A: AccessSet> {
    mr: NonNull<sys::ibv_mr>,
    iova: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
    /// Keeps the PD allocated until the region is deregistered.
    _pd: Arc<PdInner>,
    _access: PhantomData<A>,
}

// SAFETY: the handle may be used from any thread (libibverbs is thread-safe); the region owns no
// memory of the process, and `&DmabufMr` gives only keys and remote views.
unsafe impl<A: AccessSet> Send for DmabufMr<A> {}
// SAFETY: as above.
unsafe impl<A: AccessSet> Sync for DmabufMr<A> {}

impl<A: AccessSet> Drop for DmabufMr<A> {
    fn drop(&mut self) {
        // SAFETY: a valid registration, deregistered once, here. Views borrow `self`, so none is
        // in flight. A failure cannot be acted on: no memory of ours is involved (the exporter's
        // stays with the kernel's reference).
        let _ = unsafe { sys::ibv_dereg_mr(self.mr.as_ptr()) };
    }
}

impl<A: AccessSet> fmt::Debug for DmabufMr<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmabufMr")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .finish()
    }
}

impl Pd {
    /// `ibv_reg_dmabuf_mr`: registers `len` bytes at `offset` of the dma-buf `fd`, addressed by
    /// the device from `iova` on, with the access set `access` (an illegal set does not compile,
    /// as for [`Pd::alloc_mr`]).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for `len == 0` or an `iova` range that overflows;
    /// - [`Error::Unsupported`] when the device cannot register dma-bufs (`EOPNOTSUPP` or
    ///   `EPROTONOSUPPORT`, e.g. Soft-RoCE), with the errno;
    /// - [`Error::Verb`] with `ibv_reg_dmabuf_mr` and its errno otherwise (e.g. `EINVAL` for a
    ///   range outside the dma-buf, `EBADF`).
    ///
    /// See ibv_reg_mr(3) (`ibv_reg_dmabuf_mr`).
    #[doc(alias = "ibv_reg_dmabuf_mr")]
    pub fn reg_dmabuf_mr<A: LegalAccess>(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: A,
    ) -> Result<DmabufMr<A>> {
        let _ = access;
        if len == 0 {
            return Err(Error::invalid("ibv_reg_dmabuf_mr", "a memory region needs at least one byte"));
        }
        if iova.checked_add(len as u64).is_none() || offset.checked_add(len as u64).is_none() {
            return Err(Error::invalid("ibv_reg_dmabuf_mr", format!("{len} bytes from iova {iova:#x} overflow")));
        }
        // SAFETY: the PD is alive; `fd` is an open descriptor for the call (borrowed); the
        // device is told to reach the dma-buf's memory, which the kernel keeps alive for the
        // registration; no memory of the process is named; the access bits are legal (`A`).
        let mr = unsafe { sys::ibv_reg_dmabuf_mr(self.as_ptr(), offset, len, iova, fd.as_raw_fd(), A::BITS as i32) };
        let Some(mr) = NonNull::new(mr) else {
            let e = std::io::Error::last_os_error();
            let context = format!("{len} bytes at offset {offset} of dma-buf fd {}", fd.as_raw_fd());
            if crate::error::errno::means_unsupported(&e) {
                return Err(Error::Unsupported {
                    verb: Verb::RegDmabufMr,
                    what: format!("dma-buf memory regions ({context})"),
                    source: Some(e),
                });
            }
            return Err(Error::verb(Verb::RegDmabufMr, context, e));
        };
        // SAFETY: `mr` is a valid registration returned just now.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Ok(DmabufMr { mr, iova, len, lkey, rkey, _pd: Arc::clone(&self.inner), _access: PhantomData })
    }
}

impl<A: AccessSet> DmabufMr<A> {
    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions have at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The I/O virtual address of the first byte: what work requests and peers name.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The `struct ibv_mr`, under the contract of [`crate::raw`].
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.mr.as_ptr()
    }

    /// The remote view of `range` (iova, length, rkey) for a peer, typed by the region's rights.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside the region.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteSlice<A>> {
        let (off, len) = range_of(range, self.len, "DmabufMr::remote")?;
        Ok(RemoteSlice::new(self.iova + off as u64, len as u64, self.rkey))
    }
}

/// A dma-buf over `len` bytes of new host memory: a sealed memfd (`F_SEAL_SHRINK`) exported
/// through Linux's `/dev/udmabuf` (`UDMABUF_CREATE`). `len` is rounded up to whole pages.
///
/// # Errors
/// [`Error::InvalidArgument`] for `len == 0`; [`Error::Verb`] naming the failed step
/// (`memfd_create`, `ftruncate`, `fcntl(F_ADD_SEALS)`, opening `/dev/udmabuf`, or the
/// `UDMABUF_CREATE` ioctl) and its errno, e.g. `ENOENT` on a kernel without `CONFIG_UDMABUF`.
///
/// See udmabuf (Linux `drivers/dma-buf/udmabuf.c`), memfd_create(2).
#[doc(alias = "UDMABUF_CREATE")]
pub fn udmabuf(len: usize) -> Result<OwnedFd> {
    let page = crate::mr::page_size();
    let size = len
        .checked_next_multiple_of(page)
        .filter(|&s| s > 0 && i64::try_from(s).is_ok())
        .ok_or_else(|| Error::invalid("UDMABUF_CREATE", format!("{len} bytes: need 1..=i64::MAX")))?;
    let context = |step: &str| format!("{step} for a dma-buf of {size} bytes");
    let failed = |step: &str| Error::last_os(Verb::UdmabufCreate, context(step));
    let memfd = crate::mr::sized_memfd(c"typed-verbs-udmabuf", sys::MFD_ALLOW_SEALING | sys::MFD_CLOEXEC, size)
        .map_err(|(step, e)| Error::verb(Verb::UdmabufCreate, context(step), e))?;
    // SAFETY: our memfd; sealing it affects nothing else. F_ADD_SEALS takes an int argument.
    if unsafe { sys::fcntl(memfd.as_raw_fd(), sys::F_ADD_SEALS as i32, sys::F_SEAL_SHRINK as i32) } != 0 {
        return Err(failed("fcntl(F_ADD_SEALS, F_SEAL_SHRINK)"));
    }
    let dev = std::fs::File::open("/dev/udmabuf")
        .map_err(|e| Error::verb(Verb::UdmabufCreate, context("opening /dev/udmabuf"), e))?;
    let mut create = sys::udmabuf_create {
        memfd: memfd.as_raw_fd() as u32,
        flags: sys::UDMABUF_FLAGS_CLOEXEC,
        offset: 0,
        size: size as u64,
    };
    // SAFETY: `dev` is /dev/udmabuf; UDMABUF_CREATE reads one `struct udmabuf_create` (layout
    // pinned in typed-verbs-sys) from the valid pointer; it returns a new descriptor or -1.
    let raw = unsafe { sys::ioctl(dev.as_raw_fd(), sys::UDMABUF_CREATE, &mut create as *mut sys::udmabuf_create) };
    if raw < 0 {
        return Err(failed("ioctl(UDMABUF_CREATE)"));
    }
    // SAFETY: `raw` is the new dma-buf descriptor, ours alone. The memfd may close: the dma-buf
    // holds its pages.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}
