//! DMA-BUF regions (`ibv_reg_dmabuf_mr`) over a real dma-buf made without a GPU
//! (`typed_verbs::dmabuf::udmabuf`: a sealed memfd through `/dev/udmabuf`). Soft-RoCE cannot
//! register dma-bufs on either kernel of the test matrix: the typed refusal is what it shows.

use std::os::fd::AsFd;

use typed_verbs::dmabuf::udmabuf;
use typed_verbs::prelude::*;

use crate::common::*;

const LEN: usize = 64 * 1024;

#[test]
fn a_udmabuf_is_a_dma_buf_and_its_registration_is_what_the_device_allows() {
    let fd = udmabuf(LEN).expect("a dma-buf from /dev/udmabuf (CONFIG_UDMABUF)");
    // The kernel names a dma-buf's file `/dmabuf:<name>` (an anonymous dma-buf inode).
    let link = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)))
        .expect("the descriptor's /proc/self/fd link");
    assert!(link.to_string_lossy().contains("dmabuf"), "{}", link.display());
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    assert_refused(
        pd.reg_dmabuf_mr(fd.as_fd(), 0, 0, 0, access::LOCAL_RW),
        "ibv_reg_dmabuf_mr",
        "a memory region needs at least one byte",
    );
    assert_refused(
        pd.reg_dmabuf_mr(fd.as_fd(), 0, LEN, u64::MAX - 10, access::LOCAL_RW),
        "ibv_reg_dmabuf_mr",
        "bytes from iova",
    );
    match pd.reg_dmabuf_mr(fd.as_fd(), 0, LEN, 0x1000_0000, access::REMOTE_RW) {
        Err(e @ Error::Unsupported { .. }) => {
            assert!(is_soft_roce(&ctx), "only rxe is known to refuse dma-bufs: {e}");
            assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "EOPNOTSUPP on both kernels of the matrix: {e}");
            assert!(e.to_string().contains("ibv_reg_dmabuf_mr"), "{e}");
        }
        Ok(mr) => {
            assert!(!is_soft_roce(&ctx), "rxe registered a dma-buf: record it in DESIGN §9");
            assert_eq!((mr.len(), mr.iova()), (LEN, 0x1000_0000));
            let remote = mr.remote(4096..8192).unwrap();
            assert_eq!((remote.addr(), remote.len()), (0x1000_0000 + 4096, 4096));
        }
        Err(e) => panic!("expected a registration or Error::Unsupported, got {e:?}"),
    }
}
