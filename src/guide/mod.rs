//! A user guide: from an opened device to connected queue pairs moving data, for an RDMA
//! engineer who knows the verbs and is new to this library.
//!
//! The library keeps the verbs' names, objects and state machine. What it adds is that the
//! rules of the man pages are types or checked before the provider sees a request, and that
//! memory lent to the device cannot be reused, freed or read before the device is done with
//! it. Each chapter shows the calls in order; every example is compiled by `cargo test --doc`
//! (marked `no_run`: they need a device). Complete programs are in `examples/`
//! (`rdma_read_write.rs` is the shortest), and `tests/device/` exercises every feature on
//! Soft-RoCE.
//!
//! | chapter | what |
//! |---|---|
//! | [`connect`] | device, PD, CQ, QP; RESET → INIT → RTR → RTS; the connection manager |
//! | [`memory`] | the kinds of registered memory, access rights, views |
//! | [`posting`] | scopes, owned tokens and lanes: which to use, what each costs |
//! | [`windows`] | memory windows, type 1 and type 2 |
//! | [`on_demand_paging`] | On-Demand Paging regions |
//! | [`ud`] | datagrams: address handles, Q_Keys, the GRH |
//! | [`shared_receive_queues`] | shared receive queues |
//! | [`completions`] | completions, errors, recovery, events |
//! | [`teardown`] | what dropping does, and when to tear down by hand |
//! | [`refusals`] | the misuses rustc words itself, and the rule behind each |
//!
//! The names most programs need come from [`prelude`](crate::prelude); the examples also
//! `use typed_verbs::wr;` and spell work requests `wr::Write::new(...)`.
//!
//! Transports: RC, UC and UD have typed transitions and every opcode the ibv_post_send(3)
//! table allows them. [`XRC_SEND`](crate::transport::XRC_SEND) and
//! [`RAW_PACKET`](crate::transport::RAW_PACKET) exist as markers with their opcode-table
//! traits only: a QP of either cannot leave RESET (see [`transport`](crate::transport)).

pub mod completions;
pub mod connect;
pub mod memory;
pub mod on_demand_paging;
pub mod posting;
pub mod refusals;
pub mod shared_receive_queues;
pub mod teardown;
pub mod ud;
pub mod windows;
