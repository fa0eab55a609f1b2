//! Device tests: run against a real RDMA device (Soft-RoCE `rxe0` in the test VM, see
//! `scripts/softroce-run`). They never skip: without a device they fail, naming what is missing.
//!
//! Run them with `scripts/test` (host tests, then these inside the VM), or on a machine with a
//! device: `TYPED_VERBS_DEVICE=mlx5_0 cargo test --test device`.

mod common;

mod allocations;
#[cfg(feature = "tokio")]
mod async_hostile;
#[cfg(feature = "tokio")]
mod async_owned;
mod attacks;
mod basics;
mod caller_memory;
mod channels;
mod cm;
#[cfg(feature = "tokio")]
mod cm_async;
mod cm_hostile;
mod cm_ud;
mod dmabuf;
mod events;
mod hostile;
mod interop;
mod lanes;
mod leaks;
mod load;
mod odp;
mod odp_hostile;
mod opcodes;
mod ownership;
mod perf;
mod rc;
mod recv_lanes;
mod reliability;
mod rping;
mod scope_safety;
mod sgl;
mod shared_book;
mod windows;

/// Counts each thread's allocations (`allocations.rs`: no heap allocation per request).
#[global_allocator]
static ALLOCATOR: allocations::Counting = allocations::Counting;
