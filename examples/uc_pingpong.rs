//! `uc_pingpong`: rdma-core's `ibv_uc_pingpong`, wire-compatible with it, on an Unreliable
//! Connected queue pair. Either side may be the C tool.
//!
//! Same program as `rc_pingpong` (same options, same address exchange over TCP port 18515,
//! same ping-pong of `-n` SENDs of `-s` bytes), on UC: no acknowledgements, no retries. A
//! message that arrives when no receive is posted is dropped, so both sides only let the peer
//! send once their receives are posted, and a lost message shows up as a completion timeout
//! (`--timeout`, 30 s by default) instead of a hang.
//!
//! ```text
//! uc_pingpong -d rxe0 -g 1                      # server
//! uc_pingpong -d rxe0 -g 1 192.0.2.1            # client (or: ibv_uc_pingpong -d rxe0 -g 1 192.0.2.1)
//! ```

#[path = "common/pingpong.rs"]
mod pingpong;

use std::process::ExitCode;

use typed_verbs::prelude::*;

use pingpong::Options;

/// The library's `connect_path` along the C tools' path (`-m`, `-g`, `-l`): RTR with the peer's
/// QPN and first PSN, RTS with only the first send PSN (UC has no timeouts, retries or RDMA
/// READ/atomics), as `ibv_uc_pingpong` sets them.
fn connect(qp: Qp<UC, INIT>, opts: &Options, me: &Endpoint, peer: &Endpoint) -> typed_verbs::Result<Qp<UC, RTS>> {
    qp.connect_path(me, peer, &pingpong::path(opts, peer))
}

fn main() -> ExitCode {
    pingpong::main::<UC>("uc_pingpong", connect)
}
