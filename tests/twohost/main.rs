//! Two-host tests: host A (this process) and host B on one virtual wire, each with its own
//! Soft-RoCE device, booted by `scripts/softroce-run --hosts 2` (run by `scripts/test`, with
//! 6.12 on one host and 6.18 on the other). Host B is driven through the runner's agent
//! (`peer.rs`): commands started there, and its power switched off and on.
//!
//! They never skip: without a second host they fail, naming what is missing. Every wait is
//! bounded. They change the hosts' links and power, so they run one at a time
//! (`--test-threads=1`).

// The device tests' shared set-up (ports registry, child processes, example lookup); this
// binary uses a part of it.
#[allow(dead_code)]
#[path = "../device/common.rs"]
mod common;
#[path = "../../examples/common/pingpong.rs"]
mod pingpong;
#[path = "../../examples/common/remote.rs"]
mod remote;

mod peer;

mod cm;
mod faults;
mod interop;
mod memory;
