//! `rc_pingpong`: rdma-core's `ibv_rc_pingpong`, wire-compatible with it, on a Reliable
//! Connected queue pair. Either side may be the C tool.
//!
//! Two processes exchange their QP addresses over TCP (port 18515), connect their RC QPs to
//! each other, then bounce `-n` SENDs of `-s` bytes back and forth and print the throughput
//! and latency, like the C tool. Run one without a host name (the server) and one with it:
//!
//! ```text
//! rc_pingpong -d rxe0 -g 1                      # server
//! rc_pingpong -d rxe0 -g 1 192.0.2.1            # client (or: ibv_rc_pingpong -d rxe0 -g 1 192.0.2.1)
//! ```
//!
//! `-c` on both sides, as the C tool's `--chk`: the client marks each page of its message,
//! and this example checks every byte of every message it receives (the C tool checks the
//! marks of its buffer once, at the end, on the server).
//!
//! `-g` (the GID index) is needed on RoCE, including Soft-RoCE (`-g 1` on rxe). Without RDMA
//! hardware, both ends can run in the Soft-RoCE VM:
//! `scripts/softroce-run -- sh -c 'target/debug/examples/rc_pingpong -g 1 -n 100 & sleep 1;
//! ibv_rc_pingpong -g 1 -n 100 127.0.0.1; wait'`.
//!
//! The transport-specific part is the INIT → RTR → RTS walk below, with the attributes the C
//! tool uses; the command line, the address exchange and the ping-pong loop are shared with
//! `uc_pingpong` (`examples/common/pingpong.rs`).

#[path = "common/pingpong.rs"]
mod pingpong;

use std::process::ExitCode;

use typed_verbs::prelude::*;

fn main() -> ExitCode {
    // `connect_rc`: `ibv_rc_pingpong`'s RTR and RTS attributes.
    pingpong::main::<RC>("rc_pingpong", pingpong::connect_rc)
}
