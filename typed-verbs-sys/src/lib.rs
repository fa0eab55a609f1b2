//! Raw bindings to the system libibverbs (rdma-core).
//!
//! Generated at build time by bindgen from the system `<infiniband/verbs.h>` (located with
//! pkg-config). Every `static inline` verb of the header (`ibv_post_send`, `ibv_poll_cq`,
//! `ibv_bind_mw`, `ibv_alloc_mw`, `ibv_query_device_ex`, `ibv_advise_mr`, `ibv_wr_*`, ...) is
//! reachable through a generated C wrapper with the `__extern` suffix, re-exported here under
//! the C name for the ones the safe layer uses.
//!
//! This is the only crate of the project with `extern` code. Nothing in it is safe to call
//! without reading the corresponding man page; the `typed-verbs` crate is the safe layer.
//!
//! The layouts of the structs shared with the C library that the safe layer fills or reads
//! directly (`ibv_sge`, `ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`) are pinned by compile-time
//! assertions below, in addition to bindgen's own layout tests.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, missing_docs)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]
#![allow(unsafe_code, unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// `UDMABUF_CREATE` of `<linux/udmabuf.h>`: `_IOW('u', 0x42, struct udmabuf_create)` (a
/// function-like macro bindgen cannot evaluate): direction write (1 << 30), the struct's size
/// (24, pinned below) << 16, type `'u'` << 8, number 0x42.
pub const UDMABUF_CREATE: u64 =
    (1 << 30) | ((core::mem::size_of::<udmabuf_create>() as u64) << 16) | ((b'u' as u64) << 8) | 0x42;

mod layout {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};
    use static_assertions::const_assert_eq;

    // struct udmabuf_create { __u32 memfd; __u32 flags; __u64 offset; __u64 size; }
    const_assert_eq!(size_of::<udmabuf_create>(), 24);
    const_assert_eq!(UDMABUF_CREATE, 0x4018_7542);

    // struct ibv_sge { uint64_t addr; uint32_t length; uint32_t lkey; }
    const_assert_eq!(size_of::<ibv_sge>(), 16);
    const_assert_eq!(align_of::<ibv_sge>(), 8);
    const_assert_eq!(offset_of!(ibv_sge, addr), 0);
    const_assert_eq!(offset_of!(ibv_sge, length), 8);
    const_assert_eq!(offset_of!(ibv_sge, lkey), 12);

    // struct ibv_send_wr (rdma-core >= 1.2 layout, with the bind_mw/tso union): 128 bytes.
    const_assert_eq!(size_of::<ibv_send_wr>(), 128);
    const_assert_eq!(align_of::<ibv_send_wr>(), 8);
    const_assert_eq!(offset_of!(ibv_send_wr, wr_id), 0);
    const_assert_eq!(offset_of!(ibv_send_wr, next), 8);
    const_assert_eq!(offset_of!(ibv_send_wr, sg_list), 16);
    const_assert_eq!(offset_of!(ibv_send_wr, num_sge), 24);
    const_assert_eq!(offset_of!(ibv_send_wr, opcode), 28);
    const_assert_eq!(offset_of!(ibv_send_wr, send_flags), 32);
    const_assert_eq!(offset_of!(ibv_send_wr, wr), 40);
    const_assert_eq!(offset_of!(ibv_send_wr, qp_type), 72);

    // struct ibv_recv_wr { wr_id; next; sg_list; num_sge; }
    const_assert_eq!(size_of::<ibv_recv_wr>(), 32);
    const_assert_eq!(align_of::<ibv_recv_wr>(), 8);
    const_assert_eq!(offset_of!(ibv_recv_wr, wr_id), 0);
    const_assert_eq!(offset_of!(ibv_recv_wr, next), 8);
    const_assert_eq!(offset_of!(ibv_recv_wr, sg_list), 16);
    const_assert_eq!(offset_of!(ibv_recv_wr, num_sge), 24);

    // struct ibv_wc: 48 bytes.
    const_assert_eq!(size_of::<ibv_wc>(), 48);
    const_assert_eq!(align_of::<ibv_wc>(), 8);
    const_assert_eq!(offset_of!(ibv_wc, wr_id), 0);
    const_assert_eq!(offset_of!(ibv_wc, status), 8);
    const_assert_eq!(offset_of!(ibv_wc, opcode), 12);
    const_assert_eq!(offset_of!(ibv_wc, vendor_err), 16);
    const_assert_eq!(offset_of!(ibv_wc, byte_len), 20);
    const_assert_eq!(offset_of!(ibv_wc, qp_num), 28);
    const_assert_eq!(offset_of!(ibv_wc, src_qp), 32);
    const_assert_eq!(offset_of!(ibv_wc, wc_flags), 36);
    const_assert_eq!(offset_of!(ibv_wc, pkey_index), 40);
    const_assert_eq!(offset_of!(ibv_wc, slid), 42);
    const_assert_eq!(offset_of!(ibv_wc, sl), 44);
    const_assert_eq!(offset_of!(ibv_wc, dlid_path_bits), 45);
}
