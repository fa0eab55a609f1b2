//! DMA-BUF memory regions: `ibv_reg_dmabuf_mr`, memory another driver exports (a GPU's, an
//! accelerator's) registered by its dma-buf file descriptor.
//!
//! A [`DmabufMr<A>`] is typed like every region ([`access`](crate::access): the LOCAL_WRITE
//! rules are compile-time) and lends [`RemoteSlice<A>`]s for peers, by the region's I/O
//! virtual address (`iova`). Its memory is not the process's, so its local views are device
//! views: [`DeviceBuf`] (the device reads: a send or RDMA WRITE source) and [`DeviceBufMut`]
//! (the device writes: a receive, an RDMA READ destination, an atomic result) name the memory
//! by iova in work requests and scatter/gather lists, and offer no bytes to the program.
//! [`LocalBuf`](crate::mr::LocalBuf) and [`LocalBufMut`](crate::mr::LocalBufMut) are host
//! memory the program may also copy in and out of, and an iova is not a host address (such a
//! view of one would let safe code read and write wherever the iova points). The exporter's memory stays
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

use crate::access::{AccessSet, HasLocalWrite, LegalAccess};
use crate::error::{Error, Result, Verb};
use crate::mr::{local_sealed, range_of, sge_len, LocalSink, LocalSource, OdpTag, RemoteSlice};
use crate::pd::{Pd, PdId, PdInner};

/// A memory region over a dma-buf: `struct ibv_mr` from `ibv_reg_dmabuf_mr`. Deregistered on
/// drop.
pub struct DmabufMr<A: AccessSet> {
    mr: NonNull<sys::ibv_mr>,
    iova: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
    /// Keeps the PD allocated until the region is deregistered.
    pd: Arc<PdInner>,
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
        // stays with the kernel's reference). `verbs` is libibverbs' for every context the
        // library opens.
        let _ = unsafe { (self.pd.ctx.verbs.dereg_mr)(self.mr.as_ptr()) };
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
    ///   `EPROTONOSUPPORT`, e.g. Soft-RoCE), with the errno, or for REMOTE_ATOMIC on a device
    ///   without atomic operations (`atomic_cap` `IBV_ATOMIC_NONE`);
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
        self.check_atomic_access(Verb::RegDmabufMr, A::BITS)?;
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
        Ok(DmabufMr { mr, iova, len, lkey, rkey, pd: Arc::clone(&self.inner), _access: PhantomData })
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

    /// A device view of `range` that the local device may read (a send or RDMA WRITE source,
    /// an entry of a gather list), named by iova. A shared borrow of the region.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside the region, or longer than `u32::MAX` bytes (one
    /// scatter/gather entry).
    pub fn local(&self, range: impl RangeBounds<usize>) -> Result<DeviceBuf<'_>> {
        let (addr, len) = self.entry(range, "DmabufMr::local")?;
        Ok(DeviceBuf { addr, len, lkey: self.lkey, pd: self.pd.id(), _borrow: PhantomData })
    }

    /// A device view of `range` that the local device may write (a receive, an RDMA READ
    /// destination, an atomic result, an entry of a scatter list), named by iova. Needs
    /// LOCAL_WRITE; an exclusive borrow of the region.
    ///
    /// # Errors
    /// As for [`DmabufMr::local`].
    pub fn local_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceBufMut<'_>>
    where
        A: HasLocalWrite,
    {
        let (addr, len) = self.entry(range, "DmabufMr::local_mut")?;
        Ok(DeviceBufMut { addr, len, lkey: self.lkey, pd: self.pd.id(), _borrow: PhantomData })
    }

    /// The iova and length of `range` as one scatter/gather entry.
    fn entry(&self, range: impl RangeBounds<usize>, what: &'static str) -> Result<(u64, u32)> {
        let (off, len) = range_of(range, self.len, what)?;
        Ok((self.iova + off as u64, sge_len(len, what)?))
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

/// Memory of a dma-buf region that the local device may read, named by iova: a send or RDMA
/// WRITE source. A shared borrow of the region for `'a`. Offers no bytes to the program (the
/// memory is not the process's).
#[derive(Clone, Copy)]
pub struct DeviceBuf<'a> {
    addr: u64,
    len: u32,
    lkey: u32,
    pd: PdId,
    _borrow: PhantomData<&'a DmabufMr<crate::access::LocalRw>>,
}

/// Memory of a dma-buf region that the local device may write, named by iova: a receive, an
/// RDMA READ destination, an atomic result. An exclusive borrow of a LOCAL_WRITE region for
/// `'a`. Offers no bytes to the program.
pub struct DeviceBufMut<'a> {
    addr: u64,
    len: u32,
    lkey: u32,
    pd: PdId,
    _borrow: PhantomData<&'a mut DmabufMr<crate::access::LocalRw>>,
}

macro_rules! device_view {
    ($t:ident) => {
        impl $t<'_> {
            /// The length in bytes.
            pub fn len(&self) -> usize {
                self.len as usize
            }
            /// True if the view has no bytes.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
            /// The iova of the first byte.
            pub fn iova(&self) -> u64 {
                self.addr
            }
        }
        impl fmt::Debug for $t<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("iova", &format_args!("{:#x}", self.addr))
                    .field("len", &self.len)
                    .field("lkey", &format_args!("{:#x}", self.lkey))
                    .finish()
            }
        }
        impl local_sealed::Sealed for $t<'_> {}
        impl LocalSource for $t<'_> {
            fn sge(&self) -> sys::ibv_sge {
                sys::ibv_sge { addr: self.addr, length: self.len, lkey: self.lkey }
            }
            fn odp_tag(&self) -> OdpTag {
                OdpTag::NONE
            }
            fn pd_id(&self) -> PdId {
                self.pd
            }
        }
    };
}
device_view!(DeviceBuf);
device_view!(DeviceBufMut);
impl LocalSink for DeviceBufMut<'_> {}

impl<'a> DeviceBufMut<'a> {
    /// The view as read-only device memory for the rest of its borrow (e.g. to send what was
    /// received into it).
    pub fn into_local(self) -> DeviceBuf<'a> {
        DeviceBuf { addr: self.addr, len: self.len, lkey: self.lkey, pd: self.pd, _borrow: PhantomData }
    }
}

#[cfg(all(test, not(loom)))]
impl DeviceBuf<'static> {
    /// Test only: a view of `len` bytes at iova `addr` under `lkey`, of a region of `pd`.
    pub(crate) fn fake(addr: u64, len: u32, lkey: u32, pd: PdId) -> Self {
        DeviceBuf { addr, len, lkey, pd, _borrow: PhantomData }
    }
}

#[cfg(all(test, not(loom)))]
impl DeviceBufMut<'static> {
    /// Test only: as [`DeviceBuf::fake`], a view the device may write.
    pub(crate) fn fake(addr: u64, len: u32, lkey: u32, pd: PdId) -> Self {
        DeviceBufMut { addr, len, lkey, pd, _borrow: PhantomData }
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
    let size = len.checked_next_multiple_of(page).filter(|&s| s > 0 && i64::try_from(s).is_ok()).ok_or_else(|| {
        Error::invalid("UDMABUF_CREATE", format!("{len} bytes: need 1 to i64::MAX once rounded up to whole pages"))
    })?;
    let context = |step: &str| format!("{step} for a dma-buf of {size} bytes");
    let failed = |step: &str| Error::last_os(Verb::UdmabufCreate, context(step));
    let memfd = crate::mr::sized_memfd(c"typed-verbs-udmabuf", libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC, size)
        .map_err(|(step, e)| Error::verb(Verb::UdmabufCreate, context(step), e))?;
    // SAFETY: our memfd; sealing it affects nothing else. F_ADD_SEALS takes an int argument.
    if unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
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
    let raw = unsafe {
        libc::ioctl(dev.as_raw_fd(), sys::UDMABUF_CREATE as libc::Ioctl, &mut create as *mut sys::udmabuf_create)
    };
    if raw < 0 {
        return Err(failed("ioctl(UDMABUF_CREATE)"));
    }
    // SAFETY: `raw` is the new dma-buf descriptor, ours alone. The memfd may close: the dma-buf
    // holds its pages.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::{self, SendRequest};

    /// Device views name their memory by iova and lkey in a request, beside host views in the
    /// same list, and an RDMA READ may land in one.
    #[test]
    fn device_views_are_entries_by_iova() {
        let pd = PdId::dummy();
        let dev = DeviceBuf { addr: 0x10_0000_0000, len: 64, lkey: 0x77, pd, _borrow: PhantomData };
        let host = crate::mr::LocalBuf::from_parts(0x1000, 16, 0x11, OdpTag::default(), pd);
        let mut raw = crate::wr::RawSendWr::new();
        wr::Send::new((host, dev)).build(&mut raw).expect("one PD");
        let entries: Vec<_> = raw.used_sges().iter().map(|s| (s.addr, s.length, s.lkey)).collect();
        assert_eq!(entries, [(0x1000, 16, 0x11), (0x10_0000_0000, 64, 0x77)]);
        let sink = DeviceBufMut { addr: 0x20_0000_0000, len: 8, lkey: 0x78, pd, _borrow: PhantomData };
        let remote = RemoteSlice::<crate::access::RemoteAll>::new(0x9000, 8, 2);
        let mut raw = crate::wr::RawSendWr::new();
        wr::Read::new(sink, remote).build(&mut raw).expect("8 bytes fit 8");
        assert_eq!((raw.sges[0].addr, raw.sges[0].lkey, raw.num_sge), (0x20_0000_0000, 0x78, 1));
    }
}
