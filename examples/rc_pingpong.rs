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

use pingpong::{address_vector, Options};

/// RTR: path MTU from `-m`, one incoming RDMA READ/atomic, RNR NAK timer code 12 (0.64 ms).
/// RTS: ACK timeout code 14 (67 ms), 7 retries, 7 RNR retries (infinite), one outstanding
/// RDMA READ/atomic. These are `ibv_rc_pingpong`'s values.
fn connect(qp: Qp<RC, INIT>, opts: &Options, me: &Endpoint, peer: &Endpoint) -> typed_verbs::Result<Qp<RC, RTS>> {
    let rtr = RcRtr {
        path_mtu: opts.mtu,
        dest_qp_num: peer.qp_num,
        rq_psn: peer.psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        av: address_vector(opts, peer),
    };
    let qp = qp.to_rtr(&rtr)?;
    let rts = RcRts { sq_psn: me.psn, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 1 };
    Ok(qp.to_rts(&rts)?)
}

fn main() -> ExitCode {
    pingpong::main::<RC>("rc_pingpong", connect)
}
