//! `perf`: a perftest-style benchmark of this library, on one device in loopback.
//!
//! ```text
//! perf <write_bw|send_bw|read_bw|write_lat|send_lat> [-d DEV] [-x GID_INDEX] [-s SIZE]
//!      [-n ITERS | -D SECS] [-q NUM_QPS] [-Q CQ_MOD] [-t TX_DEPTH] [-r RX_DEPTH]
//!      [-o OUT_READS] [-l POST_LIST] [--tokens | --async [--await-polls N]] [--spin] [--odp]
//!      [--timeout SECS] [--json]
//!      [--quiet]
//!      [-H]
//! ```
//!
//! Each test connects pairs of RC queue pairs on the same device to each other (QP a_i <-> b_i)
//! and runs perftest's loop with this library's API, legacy `ibv_post_send` underneath, no
//! inline data, one work request per post. Two posting APIs, the same loops:
//! - **send lanes** (the default): each sending side opens a `SendLane` per QP
//!   (`Scope::send_lane`, the exclusive poster of that send queue), prepares its requests once
//!   (`SendLane::prepare`: one per source or destination slot) and re-posts them with
//!   `SendLane::post` (signaled, returns a `LaneToken`) or `SendLane::post_unsignaled`, as a C
//!   loop re-posts one `struct ibv_send_wr`; a signaled completion covers the unsignaled
//!   requests before it. `send_lat` opens both lanes of its QP (`Scope::lanes`): its receives
//!   are prepared once per buffer and re-posted on the `RecvLane`.
//! - **scope tokens** (`--tokens`): a request and a `Token` per post (`Scope::post_send`,
//!   `Scope::post_recv`), every token collected with `Scope::wait`; the path `perf` used before
//!   lanes existed, kept for comparison (`scripts/bench` runs both).
//! - **awaited owned requests** (`--async`, `send_lat` only, `-n` only, built with the `tokio`
//!   feature): each side runs a current-thread tokio runtime in its thread; its receives and
//!   sends are owned chunks (`Qp::post_recv_owned`, `Qp::post_send_owned`), each token awaited
//!   (`token.await`), the CQs on a completion channel: the latency an async program sees.
//!   `--await-polls N` sets both CQs' `Cq::set_await_polls`: a future that misses its
//!   completion polls N more times, yielding to the runtime between polls, before it sleeps
//!   until the completion event (default 0, the library's).
//!
//! The tests:
//! - `write_bw`, `read_bw`: one thread posts on the a_i and keeps at most TX_DEPTH requests
//!   outstanding per QP; every CQ_MOD-th request (and the last) is signaled; when the window
//!   is full it waits for the oldest signaled completion, which also completes the unsignaled
//!   requests before it (perftest's `run_iter_bw`). The b_i side is passive, as perftest's
//!   server is for WRITE and READ. With lanes, `write_bw` prepares one WRITE per QP and
//!   `read_bw` one READ per destination slot (TX_DEPTH slots per QP, used in turn).
//! - `send_bw`: the same sender, plus a receiver thread (perftest's server process) that keeps
//!   RX_DEPTH receives posted on every b_i and reposts each one as it completes (with lanes: a
//!   `RecvLane` per b_i, one prepared receive per buffer).
//! - `write_lat`, `send_lat`: ping-pong between two threads (perftest's two processes), each
//!   side with its own context, PD, CQ and regions, as each perftest process has; the
//!   measuring thread records the time of each post; reported latency is half the interval
//!   between consecutive posts (perftest's `run_iter_lat_write` / `run_iter_lat_send`). With
//!   lanes each side prepares its requests once (`write_lat`: one WRITE per source slot).
//!   `send_lat` keeps perftest's receive side: RX_DEPTH receives (at most the iterations; one at
//!   a time with `-D`) posted before the first message, on a CQ of their own. `--listen` /
//!   `--connect HOST` runs one side per process instead, as perftest does (`-n` only; the
//!   client measures; `write_lat`'s sides also exchange their targets' address and rkey).
//!
//! Completions are awaited with `SendLane::wait` / `RecvLane::wait` / `Scope::wait`, which poll
//! the CQ and yield the CPU (`sched_yield`) after every empty poll; `write_lat`'s wait for the
//! peer's write (a look at the last byte of its target) yields the same way. `--spin` instead
//! uses their `wait_spin`, which busy-poll without yielding, as perftest's loops poll
//! `ibv_poll_cq` and the byte (still bounded by `--timeout`). The send queue is created with at
//! least 2 x CQ_MOD entries, so that the library's automatic signaling (every depth/2-th
//! request of an unsignaled run, for lanes and tokens alike) never changes perftest's
//! signaling pattern (`send_queue_depth`).
//!
//! Output: perftest's result table (`#bytes #iterations BW peak[MB/sec] BW average[MB/sec]
//! MsgRate[Mpps]`, or `t_min t_max t_typical t_avg t_stdev 99% 99.9%` in usec, preceded with `-H`
//! by every latency the statistics keep, sorted, as perftest's `-H` lists them), and with `--json`
//! one JSON object as the last line of stdout (`"api"`: `"send lane"` or `"scope tokens"`). The
//! header names the API too. A progress bar (indicatif) goes to stderr on long runs, where stderr
//! is a terminal. Every wait is bounded (`--timeout`, default 30 s). Formulas:
//! `examples/perf/report.rs`.
//!
//! Defaults are perftest's: size 65536 (bw) / 2 (lat), 5000 (write_bw) / 1000 iterations, TX_DEPTH
//! 128 (bw) / 1 (lat), CQ_MOD 100 (1 above 8 KiB unless given; at most TX_DEPTH), RX_DEPTH 512,
//! OUT_READS the device maximum. Device: `-d`, else `$TYPED_VERBS_DEVICE`, else the first one;
//! GID index: `-x`, else `$TYPED_VERBS_GID_INDEX`, else 1. One request per `ibv_post_send`
//! unless `-l POST_LIST` (bandwidth tests, send lanes only): each QP's POST_LIST requests are
//! chained once (`SendLane::prepare_list`) and posted whole (`SendLane::post_list`) while a
//! whole list fits in the TX_DEPTH window, signaled every CQ_MOD-th (CQ_MOD defaults to
//! POST_LIST and must divide it; ITERS must be a multiple of it: perftest's rules); only a
//! list's last request is awaited. read_bw keeps its TX_DEPTH destination slots per QP in
//! TX_DEPTH / POST_LIST lists posted in turn (TX_DEPTH must be a multiple of POST_LIST).
//!
//! `--odp` (bandwidth tests, perftest's `--odp`): every buffer of the test is an explicit
//! On-Demand Paging region (`Pd::alloc_mr_odp`), registered with the capability the device's
//! query gives for the test's operations on RC (`OdpCaps::check`: WRITE for write_bw, SEND and
//! RECV for send_bw, READ for read_bw). The program writes only the sources (never reads a
//! page before the device writes it); targets and receive buffers are first touched by the
//! device. On a device without that ODP the run stops before any QP exists, with the typed
//! refusal (`Error::Unsupported`, `ibv_query_device_ex: On-Demand Paging on RC for ... not
//! supported by this device`) and status 1.
//!
//! `scripts/bench` runs it next to perftest on Soft-RoCE (`scripts/bench --odp`: next to
//! perftest `--odp`); see `BENCHMARKS.md`.

/// The TCP exchange of the pingpong examples, for the latency tests' `--listen` / `--connect`.
#[path = "common/pingpong.rs"]
mod pingpong;
#[path = "perf/report.rs"]
mod report;

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use typed_verbs::access::LegalAccess;
use typed_verbs::mr::{MrKind, Odp, Pinned};
use typed_verbs::odp::{OdpCap, OdpOps};
use typed_verbs::prelude::*;
use typed_verbs::scope::{Completes, WaitError};
use typed_verbs::Error;

use report::{BwResult, BwRun};

type Result<T> = typed_verbs::Result<T>;

const PORT: u8 = 1;
/// Slice of a wait while the other thread may have decided to stop.
const SLICE: Duration = Duration::from_millis(20);

/// perftest's tests (`ib_write_bw`, `ib_send_bw`, `ib_read_bw`, `ib_write_lat`, `ib_send_lat`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
enum Test {
    WriteBw,
    SendBw,
    ReadBw,
    WriteLat,
    SendLat,
}

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write_bw",
            Test::SendBw => "send_bw",
            Test::ReadBw => "read_bw",
            Test::WriteLat => "write_lat",
            Test::SendLat => "send_lat",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::SendBw => "Send BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::SendLat => "Send Latency Test",
        }
    }
    fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::SendBw | Test::ReadBw)
    }
}

#[derive(Debug, Clone)]
struct Params {
    test: Test,
    device: String,
    gid_index: u8,
    size: usize,
    /// Per QP (bandwidth) or ping-pongs (latency); `u64::MAX` in duration mode.
    iters: u64,
    duration: Option<Duration>,
    qps: usize,
    cq_mod: u64,
    tx_depth: usize,
    rx_depth: usize,
    out_reads: Option<u8>,
    timeout: Duration,
    /// Busy-poll (the `wait_spin` waits of the lanes and the scope) instead of the `wait`s,
    /// which yield the thread after every empty poll.
    spin: bool,
    /// Post with scope tokens (`Scope::post_send`, a token per request) instead of send lanes.
    tokens: bool,
    /// send_lat with owned requests awaited in a current-thread tokio runtime per side.
    awaited: bool,
    /// `--async`: the CQs' `Cq::set_await_polls`.
    await_polls: u32,
    /// Bandwidth tests: register every buffer as an explicit ODP region (perftest's `--odp`).
    odp: bool,
    json: bool,
    quiet: bool,
    /// Latency tests: print every interval kept, sorted, before the table (perftest's `-H`).
    histogram: bool,
    /// Bandwidth tests: requests per `ibv_post_send` (perftest's `-l`), chained with
    /// `SendLane::prepare_list` and posted with `SendLane::post_list`; 1: one request per call.
    post_list: usize,
    /// A latency test as perftest runs it, one side per process: this process's role and, for
    /// the client, the server's host; `None`: both sides in this process.
    peer: Option<(Role, Option<String>)>,
    /// The TCP port of the two-process exchange.
    port: u16,
}

impl Params {
    /// The posting API, as the header and the JSON line name it.
    fn api(&self) -> &'static str {
        if self.tokens {
            "scope tokens"
        } else if self.awaited {
            "owned tokens awaited"
        } else {
            "send lane"
        }
    }
}

/// perftest's command line, as far as `perf` follows it (see the source's header).
#[derive(Debug, clap::Parser)]
#[command(
    name = "perf",
    args_override_self = true,
    about = "Loopback on one device: RC queue pairs connected to each other, perftest's loops \
             with this library's send lanes (--tokens: scope tokens). write_lat|send_lat \
             --listen / --connect HOST: one side per process (server, client), as perftest runs, \
             the QP addresses exchanged over TCP as the pingpong examples do."
)]
struct Cli {
    /// The test.
    test: Test,
    /// Device (default: $TYPED_VERBS_DEVICE, else the first one).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV", env = "TYPED_VERBS_DEVICE")]
    device: Option<String>,
    /// GID index.
    #[arg(
        short = 'x',
        long = "gid-index",
        value_name = "GID_INDEX",
        env = "TYPED_VERBS_GID_INDEX",
        default_value_t = 1
    )]
    gid: u8,
    /// Message size (default 65536 for the bandwidth tests, 2 for the latency tests).
    #[arg(short, long)]
    size: Option<usize>,
    /// Iterations per QP or ping-pongs (default 5000 for write_bw, else 1000).
    #[arg(short = 'n', long = "iters", conflicts_with = "duration")]
    iters: Option<u64>,
    /// Run for SECS seconds instead of a number of iterations.
    #[arg(short = 'D', long, value_name = "SECS")]
    duration: Option<f64>,
    /// QP pairs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: usize,
    /// Every CQ_MOD-th request signaled (default 100; 1 above 8 KiB; at most TX_DEPTH).
    #[arg(short = 'Q', long = "cq-mod")]
    cq_mod: Option<u64>,
    /// Requests outstanding per QP (default 128 for the bandwidth tests, 1 for latency).
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<usize>,
    /// Receives kept posted.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    rx_depth: usize,
    /// Outstanding RDMA READs (default: the device maximum).
    #[arg(short = 'o', long = "outs")]
    out_reads: Option<u8>,
    /// Requests per ibv_post_send, chained (bandwidth tests, send lanes); CQ_MOD defaults to it
    /// and must divide it, ITERS must be a multiple of it (read_bw: TX_DEPTH too), as in
    /// perftest.
    #[arg(short = 'l', long = "post_list", default_value_t = 1)]
    post_list: usize,
    /// Post with scope tokens (a request and a token per post) instead of send lanes.
    #[arg(long, conflicts_with = "awaited")]
    tokens: bool,
    /// send_lat with owned requests, each awaited in a current-thread tokio runtime per side
    /// (`-n` only; needs the `tokio` feature).
    #[arg(long = "async")]
    awaited: bool,
    /// With --async: polls a future makes after missing its completion, yielding to the
    /// runtime between them, before it sleeps until the completion event (Cq::set_await_polls).
    #[arg(long = "await-polls", value_name = "N", default_value_t = 0, requires = "awaited")]
    await_polls: u32,
    /// Busy-poll the CQ instead of yielding when it is empty.
    #[arg(long)]
    spin: bool,
    /// Every buffer an explicit On-Demand Paging region (bandwidth tests; refused, status 1,
    /// on a device whose ODP lacks the test's operations on RC).
    #[arg(long)]
    odp: bool,
    /// Bound of every wait, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    timeout: f64,
    /// A JSON object as the last line of stdout.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
    /// Every latency measured, sorted, before the table (latency tests), as perftest's -H.
    #[arg(short = 'H', long = "report-histogram")]
    histogram: bool,
    /// Be the server of a two-process latency test.
    #[arg(long, conflicts_with = "connect")]
    listen: bool,
    /// Be the client of a two-process latency test, connecting to HOST.
    #[arg(long, value_name = "HOST")]
    connect: Option<String>,
    /// The TCP port of the two-process exchange.
    #[arg(short, long, default_value_t = pingpong::DEFAULT_PORT)]
    port: u16,
    /// perftest's flag, accepted and ignored (nothing to silence here).
    #[arg(short = 'F', long = "CPU-freq", hide = true)]
    _cpu_freq: bool,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidArgument { verb: "perf", reason: reason.into() }
}

/// The test's parameters from the command line: perftest's defaults and rules.
fn params(cli: Cli) -> Result<Params> {
    let Cli { test, size, qps, cq_mod, tx_depth, rx_depth: rx, post_list, tokens, .. } = cli;
    let bw = test.is_bw();
    let size = size.unwrap_or(if bw { 65536 } else { 2 });
    let tx_depth = tx_depth.unwrap_or(if bw { 128 } else { 1 });
    // perftest: CQ moderation off above 8 KiB unless asked for; never above the TX depth.
    // With a post list, perftest's CQ moderation is the list's length unless given.
    let mut cq = cq_mod.unwrap_or(if post_list > 1 {
        post_list as u64
    } else if size > 8192 {
        1
    } else {
        100
    });
    cq = cq.min(tx_depth as u64);
    let duration = cli.duration.map(Duration::try_from_secs_f64).transpose().map_err(|e| bad(format!("-D: {e}")))?;
    if duration.is_some() && test == Test::SendLat {
        cq = 1; // the last reply of the passive side must be signaled
    }
    if size == 0 || qps == 0 || tx_depth == 0 || rx == 0 || cq == 0 {
        return Err(bad("size, -q, -t, -r and -Q must be at least 1"));
    }
    if !bw && qps != 1 {
        return Err(bad("latency tests use one QP pair (-q 1)"));
    }
    let iters = match (cli.iters, duration) {
        (_, Some(_)) => u64::MAX,
        (Some(n), None) => n,
        // perftest: 5000 for ib_write_bw, 1000 for the others.
        (None, None) => {
            if test == Test::WriteBw {
                5000
            } else {
                1000
            }
        }
    };
    if iters < 2 {
        return Err(bad("-n must be at least 2"));
    }
    if cli.histogram && bw {
        return Err(bad("-H is for the latency tests"));
    }
    if cli.odp && !bw {
        return Err(bad("--odp is for the bandwidth tests"));
    }
    if cli.awaited {
        if test != Test::SendLat {
            return Err(bad("--async is for send_lat"));
        }
        if cli.spin || cli.duration.is_some() || cli.listen || cli.connect.is_some() || cq_mod.is_some_and(|q| q != 1) {
            return Err(bad("--async runs send_lat with -n and -Q 1, both sides in this process, without --spin"));
        }
        if cfg!(not(feature = "tokio")) {
            return Err(bad("--async needs perf built with the tokio feature"));
        }
    }
    if post_list == 0 {
        return Err(bad("-l must be at least 1"));
    }
    if post_list > 1 {
        if !bw {
            return Err(bad("-l is for the bandwidth tests"));
        }
        if tokens {
            return Err(bad("-l posts with send lanes (SendLane::post_list), not --tokens"));
        }
        if post_list > tx_depth {
            return Err(bad(format!("-l {post_list} is more than the TX depth ({tx_depth})")));
        }
        if test == Test::ReadBw && tx_depth % post_list != 0 {
            return Err(bad(format!(
                "read_bw: the TX depth ({tx_depth}) must be a multiple of the post list ({post_list})"
            )));
        }
        if post_list as u64 % cq != 0 {
            return Err(bad(format!("the post list ({post_list}) must be a multiple of the CQ moderation ({cq})")));
        }
        if duration.is_none() && iters % post_list as u64 != 0 {
            return Err(bad(format!("the iterations ({iters}) must be a multiple of the post list ({post_list})")));
        }
    }
    let peer = match (cli.listen, cli.connect) {
        (true, _) => Some((Role::Server, None)),
        (false, Some(host)) => Some((Role::Client, Some(host))),
        (false, None) => None,
    };
    if peer.is_some() && (!matches!(test, Test::SendLat | Test::WriteLat) || duration.is_some()) {
        return Err(bad("--listen and --connect are for send_lat and write_lat with -n"));
    }
    let device = match cli.device {
        Some(d) => d,
        None => devices()?.first().map(|d| d.name.clone()).ok_or_else(|| bad("no RDMA device present"))?,
    };
    let timeout = Duration::try_from_secs_f64(cli.timeout).map_err(|e| bad(format!("--timeout: {e}")))?;
    Ok(Params {
        test,
        device,
        gid_index: cli.gid,
        size,
        iters,
        duration,
        qps,
        cq_mod: cq,
        tx_depth,
        rx_depth: rx,
        out_reads: cli.out_reads,
        timeout,
        spin: cli.spin,
        tokens,
        awaited: cli.awaited,
        await_polls: cli.await_polls,
        odp: cli.odp,
        json: cli.json,
        peer,
        port: cli.port,
        quiet: cli.quiet,
        histogram: cli.histogram,
        post_list,
    })
}

/// Progress on stderr: an indicatif bar (drawn only where stderr is a terminal), shown once a
/// run lasts longer than 2 s, cleared at the end.
struct Progress {
    bar: ProgressBar,
    start: Instant,
    shown: bool,
    quiet: bool,
    calls: u64,
}

impl Progress {
    fn new(p: &Params, total: u64) -> Self {
        let (bar, template) = match p.duration {
            None => (ProgressBar::new(total), "perf: {prefix} {wide_bar} {pos}/{len} ({percent}%) after {elapsed}"),
            Some(_) => (ProgressBar::no_length(), "perf: {prefix} {spinner} {pos} after {elapsed}"),
        };
        let style = ProgressStyle::with_template(template).expect("a valid template");
        let bar = bar.with_style(style).with_prefix(p.test.name());
        bar.set_draw_target(ProgressDrawTarget::hidden());
        Progress { bar, start: Instant::now(), shown: false, quiet: p.quiet, calls: 0 }
    }

    /// Called once per iteration or wait round; looks at the clock every 64 calls. (Inline:
    /// it is on the latency tests' critical path, where a call and its return cost more than
    /// the counter under emulation.)
    #[inline(always)]
    fn tick(&mut self, done: u64) {
        self.calls = self.calls.wrapping_add(1);
        if self.quiet || self.calls & 63 != 0 {
            return;
        }
        self.show(done);
    }

    /// The rest of [`Progress::tick`], every 64th call.
    #[cold]
    #[inline(never)]
    fn show(&mut self, done: u64) {
        if !self.shown {
            if self.start.elapsed() < Duration::from_secs(2) {
                return;
            }
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        self.bar.set_position(done);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

fn since(base: Instant) -> u64 {
    base.elapsed().as_nanos() as u64
}

/// The send queue depth to ask for: TX_DEPTH, but at least 2 x CQ_MOD. The library signals
/// every (depth / 2)-th request of a run of unsignaled ones by itself (so that a send queue can
/// never fill up with requests no completion will free); with depth >= 2 x CQ_MOD that never
/// happens and the signaling pattern is exactly perftest's. The window of outstanding requests
/// is TX_DEPTH regardless (and rxe rounds the queue up: 128 and 200 both become 255).
fn send_queue_depth(p: &Params) -> u32 {
    p.tx_depth.max(2 * p.cq_mod as usize) as u32
}

/// Two RC QPs (on `pd_a` and `pd_b`, which may be one PD), connected to each other, in RTS.
#[allow(clippy::too_many_arguments)]
fn rc_pair(
    p: &Params,
    (pd_a, config_a): (&Pd, &QpConfig<'_>),
    (pd_b, config_b): (&Pd, &QpConfig<'_>),
    rd_atomic: u8,
    psn: u32,
) -> Result<(Qp<RC, RTS>, Qp<RC, RTS>)> {
    let a = pd_a.create_qp::<RC>(config_a)?;
    let b = pd_b.create_qp::<RC>(config_b)?;
    let ea = a.endpoint(PORT, p.gid_index, psn)?;
    let eb = b.endpoint(PORT, p.gid_index, psn + 0x100)?;
    Ok((connect(p, a, ea, eb, rd_atomic)?, connect(p, b, eb, ea, rd_atomic)?))
}

/// Moves `qp` (address `me`) to RTS towards `peer`.
fn connect(p: &Params, qp: Qp<RC, RESET>, me: Endpoint, peer: Endpoint, rd_atomic: u8) -> Result<Qp<RC, RTS>> {
    // The remote rights of the peers' target regions (`REMOTE_RW`).
    let qp = qp.to_init(&ConnectedInit::new(PORT, access::REMOTE_RW))?;
    let av = AddressVector::global(PORT, peer.gid, p.gid_index);
    let rtr = RcRtr { max_dest_rd_atomic: rd_atomic, ..RcRtr::new(av, peer.qp_num, peer.psn) };
    let qp = qp.to_rtr(&rtr)?;
    Ok(qp.to_rts(&RcRts { max_rd_atomic: rd_atomic, ..RcRts::new(me.psn) })?)
}

/// Splits a LOCAL_WRITE view into `n` views of `size` bytes.
fn split(mut rest: LocalBufMut<'_>, n: usize, size: usize) -> Result<Vec<LocalBufMut<'_>>> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        if i + 1 == n {
            v.push(rest);
            break;
        }
        let (head, tail) = rest.split_at(size)?;
        v.push(head);
        rest = tail;
    }
    Ok(v)
}

/// The slot after `i` of `n`: slots are used in turn, round the ring. (A comparison, not a
/// division: it is on the posting and receive loops' per-message path.)
fn next_slot(i: usize, n: usize) -> usize {
    if i + 1 == n {
        0
    } else {
        i + 1
    }
}

/// Whether a wait bounded by `timeout` has run out. `deadline` is fixed at the first call, at
/// `timeout` less `waited` (how long the wait had already run then): a wait that ends before
/// that call reads no clock.
fn deadline_passed(deadline: &mut Option<Instant>, timeout: Duration, waited: Duration) -> bool {
    let now = Instant::now();
    now >= *deadline.get_or_insert(now + timeout.saturating_sub(waited))
}

/// Spins (bounded) until `flag` is set.
fn wait_flag(flag: &AtomicBool, timeout: Duration, what: &str) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !flag.load(Ordering::Acquire) {
        if Instant::now() >= deadline {
            return Err(Error::Timeout { what: what.into(), after: timeout });
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// Waits for `token`'s completion: with `Scope::wait` (which polls the CQ and yields the CPU
/// after every empty poll), or with `spin` with `Scope::wait_spin` (busy-polls without
/// yielding, as perftest's poll loops do). Bounded by `timeout` either way.
fn wait_on<'scope, B: Completes>(
    s: &'scope Scope<'scope, '_>,
    token: Token<'scope, B>,
    spin: bool,
    timeout: Duration,
) -> std::result::Result<(Completion, B::Output), WaitError<'scope, B>> {
    if spin {
        s.wait_spin(token, timeout)
    } else {
        s.wait(token, timeout)
    }
}

/// [`wait_on`] for a request of a send lane: `SendLane::wait`, or with `spin`
/// `SendLane::wait_spin`. Bounded by `timeout`. (Inline, as the lane's own wait: it is on
/// every latency round.)
#[inline(always)]
fn lane_wait<'scope>(
    lane: &mut SendLane<'scope, RC, RTS>,
    token: LaneToken<'scope>,
    spin: bool,
    timeout: Duration,
) -> Result<Completion> {
    Ok(if spin { lane.wait_spin(token, timeout)? } else { lane.wait(token, timeout)? })
}

fn join<T>(h: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    h.join().unwrap_or_else(|_| Err(bad("the peer thread panicked")))
}

/// Runs this thread's side, `mine`, beside the peer thread `peer`: a failure of `mine` tells
/// the peer (`failed`), then both are joined; `mine`'s result, or the first error.
fn beside_peer<T, U>(
    failed: &AtomicBool,
    peer: std::thread::ScopedJoinHandle<'_, Result<U>>,
    mine: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let r = mine();
    if r.is_err() {
        failed.store(true, Ordering::Release);
    }
    let rp = join(peer);
    let v = r?;
    rp?;
    Ok(v)
}

// ------------------------------------------------------------------------------------------
// Bandwidth

/// How one bandwidth test posts a request and takes back its buffers.
trait BwOps<'scope> {
    type B: Completes<Output = Self::B>;
    fn post(&mut self, q: usize, signaled: bool) -> Result<Token<'scope, Self::B>>;
    fn done(&mut self, q: usize, buffers: Self::B);
}

struct WriteOps<'scope, 'env, 'a> {
    s: &'scope Scope<'scope, 'env>,
    qps: &'scope [Qp<RC, RTS>],
    src: Vec<LocalBuf<'a>>,
    dst: Vec<RemoteSlice<access::LocalRemoteWrite>>,
}

impl<'scope, 'a: 'scope> BwOps<'scope> for WriteOps<'scope, '_, 'a> {
    type B = LocalBuf<'a>;
    fn post(&mut self, q: usize, signaled: bool) -> Result<Token<'scope, LocalBuf<'a>>> {
        let wr = wr::Write::new(self.src[q], self.dst[q]);
        Ok(if signaled {
            self.s.post_send(&self.qps[q], wr)?
        } else {
            self.s.post_send(&self.qps[q], wr.unsignaled())?
        })
    }
    fn done(&mut self, _: usize, _: LocalBuf<'a>) {}
}

struct SendOps<'scope, 'env, 'a> {
    s: &'scope Scope<'scope, 'env>,
    qps: &'scope [Qp<RC, RTS>],
    src: Vec<LocalBuf<'a>>,
}

impl<'scope, 'a: 'scope> BwOps<'scope> for SendOps<'scope, '_, 'a> {
    type B = LocalBuf<'a>;
    fn post(&mut self, q: usize, signaled: bool) -> Result<Token<'scope, LocalBuf<'a>>> {
        let wr = wr::Send::new(self.src[q]);
        Ok(if signaled {
            self.s.post_send(&self.qps[q], wr)?
        } else {
            self.s.post_send(&self.qps[q], wr.unsignaled())?
        })
    }
    fn done(&mut self, _: usize, _: LocalBuf<'a>) {}
}

struct ReadOps<'scope, 'env, 'a> {
    s: &'scope Scope<'scope, 'env>,
    qps: &'scope [Qp<RC, RTS>],
    /// Free destination buffers per QP (TX_DEPTH each: one per outstanding READ).
    free: Vec<Vec<LocalBufMut<'a>>>,
    remote: Vec<RemoteSlice<access::RemoteReadOnly>>,
}

impl<'scope, 'a: 'scope> BwOps<'scope> for ReadOps<'scope, '_, 'a> {
    type B = LocalBufMut<'a>;
    fn post(&mut self, q: usize, signaled: bool) -> Result<Token<'scope, LocalBufMut<'a>>> {
        let buf = self.free[q].pop().ok_or_else(|| bad("no free READ buffer (TX_DEPTH exceeded)"))?;
        let wr = wr::Read::new(buf, self.remote[q]);
        Ok(if signaled {
            self.s.post_send(&self.qps[q], wr)?
        } else {
            self.s.post_send(&self.qps[q], wr.unsignaled())?
        })
    }
    fn done(&mut self, q: usize, buf: LocalBufMut<'a>) {
        self.free[q].push(buf);
    }
}

/// How `bw_loop` posts and completes requests: with scope tokens ([`TokenPoster`]) or send
/// lanes ([`LanePoster`]).
trait BwPoster {
    /// Posts the next request on QP `q`, signaled or not.
    fn post(&mut self, q: usize, signaled: bool) -> Result<()>;
    /// Posts QP `q`'s post list (`-l`), whose last request is signaled.
    fn post_list(&mut self, q: usize) -> Result<()>;
    /// Waits (bounded) for the oldest outstanding signaled request on QP `q`, whose completion
    /// also completes the requests posted on `q` before it.
    fn complete_oldest(&mut self, q: usize) -> Result<()>;
}

/// `bw_loop`'s poster with scope tokens: a request and a token per post (`O` builds them);
/// every token is collected with `Scope::wait`, the unsignaled ones (implied by a later
/// completion) as well.
struct TokenPoster<'scope, 'env, O: BwOps<'scope>> {
    s: &'scope Scope<'scope, 'env>,
    spin: bool,
    timeout: Duration,
    ops: O,
    /// Per QP, the tokens of its outstanding requests, oldest first, and whether each is signaled.
    queues: Vec<VecDeque<(Token<'scope, O::B>, bool)>>,
}

impl<'scope, 'env, O: BwOps<'scope>> TokenPoster<'scope, 'env, O> {
    fn new(s: &'scope Scope<'scope, 'env>, p: &Params, ops: O) -> Self {
        let queues = (0..p.qps).map(|_| VecDeque::with_capacity(p.tx_depth)).collect();
        TokenPoster { s, spin: p.spin, timeout: p.timeout, ops, queues }
    }
}

impl<'scope, O: BwOps<'scope>> BwPoster for TokenPoster<'scope, '_, O> {
    fn post(&mut self, q: usize, signaled: bool) -> Result<()> {
        let token = self.ops.post(q, signaled)?;
        self.queues[q].push_back((token, signaled));
        Ok(())
    }
    fn post_list(&mut self, _: usize) -> Result<()> {
        Err(bad("internal: post lists are posted with send lanes"))
    }
    fn complete_oldest(&mut self, q: usize) -> Result<()> {
        // The unsignaled tokens before the signaled one are complete when it is (each `wait`
        // on them returns at once).
        while let Some((token, signaled)) = self.queues[q].pop_front() {
            let (c, buffers) = wait_on(self.s, token, self.spin, self.timeout)?;
            c.ok()?;
            self.ops.done(q, buffers);
            if signaled {
                return Ok(());
            }
        }
        Err(bad(format!("internal: no signaled request outstanding on QP {q}")))
    }
}

/// `bw_loop`'s poster with send lanes: one lane per QP, its requests prepared once per slot
/// and re-posted in turn (request n of a QP posts slot n mod slots); only signaled requests
/// have a token.
struct LanePoster<'scope, W> {
    lanes: Vec<SendLane<'scope, RC, RTS>>,
    /// Per QP: the prepared requests, and the slot the next post uses.
    wrs: Vec<(Vec<Prepared<'scope, W>>, usize)>,
    /// Per QP, with `-l`: its post lists (one; read_bw: TX_DEPTH / POST_LIST, posted in
    /// turn), and the one the next post uses.
    lists: Vec<(Vec<PreparedList<'scope, W>>, usize)>,
    /// Per QP: the tokens of the outstanding signaled requests, oldest first.
    signaled: Vec<VecDeque<LaneToken<'scope>>>,
    spin: bool,
    timeout: Duration,
}

impl<'scope, W> LanePoster<'scope, W> {
    /// Opens a send lane on each of `qps` and prepares `slots` requests per QP with
    /// `prepare(lane, q)`.
    fn open(
        s: &'scope Scope<'scope, '_>,
        qps: &'scope mut [Qp<RC, RTS>],
        p: &Params,
        slots: usize,
        mut prepare: impl FnMut(&SendLane<'scope, RC, RTS>, usize) -> Result<Prepared<'scope, W>>,
    ) -> Result<Self> {
        let lanes = qps.iter_mut().map(|qp| s.send_lane(qp)).collect::<Result<Vec<_>>>()?;
        let wrs = lanes
            .iter()
            .enumerate()
            .map(|(q, lane)| Ok(((0..slots).map(|_| prepare(lane, q)).collect::<Result<Vec<_>>>()?, 0)))
            .collect::<Result<Vec<_>>>()?;
        let signaled = (0..lanes.len()).map(|_| VecDeque::with_capacity(p.tx_depth)).collect();
        Ok(LanePoster { lanes, wrs, signaled, lists: Vec::new(), spin: p.spin, timeout: p.timeout })
    }

    /// With `-l`: prepares `per_qp` post lists per QP, each of POST_LIST requests made by
    /// `make(q)`, signaled every CQ_MOD-th (perftest's `-l` with `-Q`).
    fn with_lists(mut self, p: &Params, per_qp: usize, mut make: impl FnMut(usize) -> Result<W>) -> Result<Self>
    where
        W: typed_verbs::wr::SendWr<RC> + typed_verbs::wr::AddressedFor<RC> + 'scope,
        W::Buffers: typed_verbs::lane::Reusable,
    {
        if p.post_list > 1 {
            for (q, lane) in self.lanes.iter().enumerate() {
                let mut lists = Vec::with_capacity(per_qp);
                for _ in 0..per_qp {
                    let wrs = (0..p.post_list).map(|_| make(q)).collect::<Result<Vec<_>>>()?;
                    lists.push(lane.prepare_list(wrs, p.cq_mod as usize).map_err(|e| e.error)?);
                }
                self.lists.push((lists, 0));
            }
        }
        Ok(self)
    }
}

impl<W> BwPoster for LanePoster<'_, W> {
    #[inline]
    fn post(&mut self, q: usize, signaled: bool) -> Result<()> {
        let (slots, next) = &mut self.wrs[q];
        let slot = *next;
        *next = next_slot(slot, slots.len());
        let wr = &mut slots[slot];
        if signaled {
            let token = self.lanes[q].post(wr)?;
            self.signaled[q].push_back(token);
        } else {
            self.lanes[q].post_unsignaled(wr)?;
        }
        Ok(())
    }
    fn post_list(&mut self, q: usize) -> Result<()> {
        let (lists, next) = &mut self.lists[q];
        let k = *next;
        *next = next_slot(k, lists.len());
        let token = self.lanes[q].post_list(&mut lists[k])?;
        self.signaled[q].push_back(token);
        Ok(())
    }
    fn complete_oldest(&mut self, q: usize) -> Result<()> {
        let token =
            self.signaled[q].pop_front().ok_or_else(|| bad(format!("internal: no signaled request on lane {q}")))?;
        lane_wait(&mut self.lanes[q], token, self.spin, self.timeout)?.ok()?;
        Ok(())
    }
}

struct BwOutcome {
    run: BwRun,
    /// Requests posted per QP.
    sent: Vec<u64>,
}

/// The posting window of `bw_loop`: what was posted and completed per QP, and which signaled
/// requests are outstanding.
struct Window {
    /// Requests posted (scnt) and known complete (ccnt) per QP, and their sums.
    scnt: Vec<u64>,
    ccnt: Vec<u64>,
    totscnt: u64,
    totccnt: u64,
    /// Per QP, the number (in that QP's posting order) of each outstanding signaled request.
    signaled: Vec<VecDeque<u64>>,
    /// Which QP each outstanding signaled request went to, in posting order.
    order: VecDeque<usize>,
    /// Per QP: whether its last request was unsignaled (nothing will complete it yet).
    tail_unsignaled: Vec<bool>,
}

impl Window {
    fn new(p: &Params) -> Self {
        let nq = p.qps;
        Window {
            scnt: vec![0; nq],
            ccnt: vec![0; nq],
            totscnt: 0,
            totccnt: 0,
            signaled: (0..nq).map(|_| VecDeque::with_capacity(p.tx_depth / p.cq_mod as usize + 1)).collect(),
            order: VecDeque::with_capacity(p.tx_depth * nq),
            tail_unsignaled: vec![false; nq],
        }
    }

    fn post(&mut self, poster: &mut impl BwPoster, q: usize, signaled: bool) -> Result<()> {
        poster.post(q, signaled)?;
        self.posted(q, 1, signaled);
        Ok(())
    }

    /// Posts QP `q`'s post list of `n` requests: only its last is awaited (its completion
    /// completes the list).
    fn post_list(&mut self, poster: &mut impl BwPoster, q: usize, n: u64) -> Result<()> {
        poster.post_list(q)?;
        self.posted(q, n, true);
        Ok(())
    }

    /// Counts `n` requests posted on QP `q`, the last one `signaled` (then awaited in turn).
    fn posted(&mut self, q: usize, n: u64, signaled: bool) {
        if signaled {
            self.signaled[q].push_back(self.scnt[q] + n - 1);
            self.order.push_back(q);
        }
        self.tail_unsignaled[q] = !signaled;
        self.scnt[q] += n;
        self.totscnt += n;
    }

    /// Waits for the oldest outstanding signaled request (of any QP); every request posted
    /// before it on its QP is then complete too.
    fn complete_oldest(&mut self, poster: &mut impl BwPoster) -> Result<()> {
        let internal = || bad("internal: requests outstanding but none signaled");
        let q = self.order.pop_front().ok_or_else(internal)?;
        let n = self.signaled[q].pop_front().ok_or_else(internal)?;
        poster.complete_oldest(q)?;
        self.totccnt += n + 1 - self.ccnt[q];
        self.ccnt[q] = n + 1;
        Ok(())
    }
}

/// perftest's `run_iter_bw` with this library's API (`poster`: scope tokens or send lanes).
fn bw_loop(p: &Params, poster: &mut impl BwPoster) -> Result<BwOutcome> {
    let nq = p.qps;
    let record = p.duration.is_none();
    let total = p.iters.saturating_mul(nq as u64);
    let mut tposted = Vec::with_capacity(if record { total as usize } else { 0 });
    let mut comps = Vec::with_capacity(if record { (total / p.cq_mod + nq as u64) as usize } else { 0 });
    let mut w = Window::new(p);
    let mut progress = Progress::new(p, total);
    let base = Instant::now();
    let deadline = p.duration.map(|d| base + d);
    let mut stopping = false;
    let mut last_completion = 0u64;
    loop {
        for q in 0..nq {
            // `l` requests per post (one, or a list with -l), as long as they fit in the window
            // (perftest's condition).
            let l = p.post_list as u64;
            while !stopping && w.scnt[q] < p.iters && w.scnt[q] + l - w.ccnt[q] <= p.tx_depth as u64 {
                if record {
                    // A list's requests all go at once.
                    let t = since(base);
                    if l > 1 {
                        tposted.extend(std::iter::repeat_n(t, l as usize));
                    } else {
                        tposted.push(t);
                    }
                }
                if l > 1 {
                    w.post_list(poster, q, l)?;
                } else {
                    let signaled = w.scnt[q] % p.cq_mod == p.cq_mod - 1 || w.scnt[q] + 1 == p.iters;
                    w.post(poster, q, signaled)?;
                }
            }
        }
        if w.totccnt == w.totscnt {
            break;
        }
        w.complete_oldest(poster)?;
        last_completion = since(base);
        if record {
            comps.push((w.totccnt - 1, last_completion));
        }
        progress.tick(w.totccnt);
        if let Some(d) = deadline {
            if !stopping && Instant::now() >= d {
                stopping = true;
                // Cover every unsignaled tail with a signaled request, so that nothing is left
                // without a completion (the scope would otherwise have to reset the QP).
                for q in 0..nq {
                    if w.tail_unsignaled[q] {
                        w.post(poster, q, true)?;
                    }
                }
            }
        }
    }
    Ok(BwOutcome {
        run: BwRun {
            size: p.size,
            completed: w.totccnt,
            elapsed: Duration::from_nanos(last_completion),
            tposted,
            comps,
        },
        sent: w.scnt,
    })
}

/// State shared by the send_bw sender and receiver threads.
struct SendShared {
    ready: AtomicBool,
    /// Duration mode: the sender has finished and every request of it completed.
    stop: AtomicBool,
    /// Duration mode: receives posted per QP after the receiver saw `stop` (final).
    final_posted: Vec<AtomicU64>,
    published: AtomicBool,
    failed: AtomicBool,
}

/// The receiving side of send_bw (perftest's server): keeps RX_DEPTH receives (at most the
/// iterations) posted per QP, reposting each as it completes; with receive lanes, or with scope
/// tokens (`--tokens`).
fn send_bw_receiver(
    p: &Params,
    qps: &mut [Qp<RC, RTS>],
    bufs: Vec<Vec<LocalBufMut<'_>>>,
    sh: &SendShared,
) -> Result<()> {
    let r = scope_with_timeout(p.timeout, |s| -> Result<()> {
        let per_qp = p.iters.min(usize::MAX as u64) as usize;
        let bufs = bufs.into_iter().map(|b| b.into_iter().take(per_qp).collect::<Vec<_>>());
        if p.tokens {
            let mut rxs: Vec<_> = qps.iter().zip(bufs).map(|(qp, b)| TokenRecv::new(s, qp, b)).collect();
            send_bw_receive_loop(p, &mut rxs, sh)
        } else {
            let mut rxs = Vec::with_capacity(qps.len());
            for (qp, b) in qps.iter_mut().zip(bufs) {
                rxs.push(LaneRecv::new(s.recv_lane(qp)?, b)?);
            }
            send_bw_receive_loop(p, &mut rxs, sh)
        }
    });
    let r = r.and_then(|r| r);
    if r.is_err() {
        sh.failed.store(true, Ordering::Release);
    }
    r
}

/// The loop of `send_bw_receiver`, whatever the receiving API: one receiver per QP, each
/// waited for in turn (a slice at a time).
fn send_bw_receive_loop(p: &Params, rxs: &mut [impl LatReceiver], sh: &SendShared) -> Result<()> {
    let nq = rxs.len();
    let (mut posted, mut done, mut oldest) = (vec![0u64; nq], vec![0u64; nq], vec![0usize; nq]);
    for (q, rx) in rxs.iter_mut().enumerate() {
        for i in 0..rx.slots() {
            rx.post(i)?;
        }
        posted[q] = rx.slots() as u64;
    }
    sh.ready.store(true, Ordering::Release);
    let mut published = false;
    // Fixed at the first round without progress, cleared by progress: no clock read while
    // messages keep coming.
    let mut idle_deadline: Option<Instant> = None;
    loop {
        let mut progressed = false;
        for q in 0..nq {
            if done[q] == posted[q] {
                continue;
            }
            let Some(c) = rxs[q].wait(oldest[q], p.spin, SLICE)? else { continue };
            c.ok()?;
            progressed = true;
            done[q] += 1;
            let repost =
                if p.duration.is_some() { !published && !sh.stop.load(Ordering::Acquire) } else { posted[q] < p.iters };
            // Once a receive is not reposted, none is any more: the slots left complete in
            // turn, so `oldest` keeps naming the next one.
            if repost {
                rxs[q].post(oldest[q])?;
                posted[q] += 1;
            }
            oldest[q] = next_slot(oldest[q], rxs[q].slots());
        }
        if p.duration.is_some() && !published && sh.stop.load(Ordering::Acquire) {
            for (f, &n) in sh.final_posted.iter().zip(&posted) {
                f.store(n, Ordering::Release);
            }
            sh.published.store(true, Ordering::Release);
            published = true;
        }
        if done == posted && (p.duration.is_none() || published) {
            return Ok(());
        }
        if progressed {
            idle_deadline = None;
        } else if sh.failed.load(Ordering::Acquire) {
            return Err(bad("the sender failed"));
        } else {
            // A round without progress has waited a slice per QP already.
            if deadline_passed(&mut idle_deadline, p.timeout, SLICE) {
                return Err(Error::Timeout {
                    what: "a receive completion (send_bw receiver)".into(),
                    after: p.timeout,
                });
            }
        }
    }
}

/// How the bandwidth tests register their buffers: plain (pinned) regions, or with `--odp`
/// explicit On-Demand Paging regions.
trait Memory {
    /// The regions' kind.
    type K: MrKind;
    /// A new region of `len` bytes with `access`.
    fn alloc<A: LegalAccess>(&self, pd: &Pd, len: usize, access: A) -> Result<Mr<A, Self::K>>;
}

/// Plain registrations (`Pd::alloc_mr`): the memory is pinned.
struct PinnedMemory;

impl Memory for PinnedMemory {
    type K = Pinned;
    fn alloc<A: LegalAccess>(&self, pd: &Pd, len: usize, access: A) -> Result<Mr<A>> {
        pd.alloc_mr(len, access)
    }
}

/// `--odp`: explicit ODP regions (`Pd::alloc_mr_odp`), for the RC operations the device's query
/// verified.
struct OdpMemory(OdpCap<RC>);

impl Memory for OdpMemory {
    type K = Odp;
    fn alloc<A: LegalAccess>(&self, pd: &Pd, len: usize, access: A) -> Result<Mr<A, Odp>> {
        pd.alloc_mr_odp(len, access, &self.0)
    }
}

/// The RC operations a bandwidth test's ODP regions take part in (on both sides).
fn odp_ops(test: Test) -> OdpOps {
    match test {
        Test::WriteBw => OdpOps::WRITE,
        Test::SendBw => OdpOps::SEND | OdpOps::RECV,
        Test::ReadBw => OdpOps::READ,
        Test::WriteLat | Test::SendLat => OdpOps::empty(),
    }
}

fn run_bw(p: &Params) -> Result<report::BwRun> {
    let ctx = Context::open(&p.device)?;
    // --odp: the capability first, so that a device without it refuses before anything else.
    let odp = if p.odp { Some(ctx.query_odp()?.check::<RC>(odp_ops(p.test))?) } else { None };
    let dev = ctx.query_device()?;
    let pd = ctx.alloc_pd()?;
    let nq = p.qps;
    let rx = if p.test == Test::SendBw { p.rx_depth.min(p.iters.min(1 << 20) as usize) } else { 1 };
    let caps = QpCaps { max_send_wr: send_queue_depth(p), max_recv_wr: rx as u32, ..QpCaps::default() };
    // Each side's CQ holds what its QPs' queues can have outstanding (the library refuses a
    // smaller one: it could overrun).
    let cqe = ((caps.max_send_wr as usize + rx) * nq).min(dev.max_cqe() as usize) as u32;
    let (cq_a, cq_b) = (ctx.create_cq(cqe)?, ctx.create_cq(cqe)?);
    let rd_atomic = match p.test {
        Test::ReadBw => p
            .out_reads
            .unwrap_or_else(|| dev.max_qp_rd_atom().min(dev.max_qp_init_rd_atom()).clamp(1, u8::MAX as u32) as u8),
        _ => 1,
    };
    let (mut a, mut b) = (Vec::with_capacity(nq), Vec::with_capacity(nq));
    for q in 0..nq {
        let (config_a, config_b) = (QpConfig::new(&cq_a).caps(caps), QpConfig::new(&cq_b).caps(caps));
        let (x, y) = rc_pair(p, (&pd, &config_a), (&pd, &config_b), rd_atomic, 0x1000 + 0x1000 * q as u32)?;
        a.push(x);
        b.push(y);
    }
    print_header(p, &ctx, &a, rd_atomic);
    match odp {
        Some(cap) => bw_with(p, &pd, a, b, rx, &OdpMemory(cap)),
        None => bw_with(p, &pd, a, b, rx, &PinnedMemory),
    }
}

/// The bandwidth test proper, on connected QPs (`a` sends, `b` is the peer; `rx` receives per
/// QP for send_bw), its buffers registered by `mem`.
fn bw_with<M: Memory>(
    p: &Params,
    pd: &Pd,
    mut a: Vec<Qp<RC, RTS>>,
    mut b: Vec<Qp<RC, RTS>>,
    rx: usize,
    mem: &M,
) -> Result<report::BwRun> {
    let (nq, size) = (p.qps, p.size);
    match p.test {
        Test::WriteBw => {
            let mut src = mem.alloc(pd, size * nq, access::LOCAL_READ)?;
            src.as_mut_slice().fill(0x5a);
            // Written by the peer only: its ODP capability verifies WRITE.
            let dst = mem.alloc(pd, size * nq, access::LOCAL_REMOTE_WRITE)?;
            let srcs = (0..nq).map(|q| src.slice(q * size..(q + 1) * size)).collect::<Result<Vec<_>>>()?;
            let dsts = (0..nq).map(|q| dst.remote(q * size..(q + 1) * size)).collect::<Result<Vec<_>>>()?;
            let out = scope_with_timeout(p.timeout, |s| {
                if p.tokens {
                    bw_loop(p, &mut TokenPoster::new(s, p, WriteOps { s, qps: &a, src: srcs, dst: dsts }))
                } else {
                    // One WRITE per QP, re-posted.
                    let mut lanes = LanePoster::open(s, &mut a, p, 1, |lane, q| {
                        Ok(lane.prepare(wr::Write::new(srcs[q], dsts[q]))?)
                    })?
                    .with_lists(p, 1, |q| Ok(wr::Write::new(srcs[q], dsts[q])))?;
                    bw_loop(p, &mut lanes)
                }
            })??;
            Ok(out.run)
        }
        Test::ReadBw => {
            // Read by the peer only: its ODP capability verifies READ.
            let mut remote = mem.alloc(pd, size * nq, access::REMOTE_READ_ONLY)?;
            remote.write_volatile_from(0, &vec![0x5a; size * nq])?;
            let mut local = mem.alloc(pd, size * nq * p.tx_depth, access::LOCAL_RW)?;
            let all = split(local.slice_mut(..)?, nq, size * p.tx_depth)?;
            let mut free = all.into_iter().map(|v| split(v, p.tx_depth, size)).collect::<Result<Vec<_>>>()?;
            let remotes = (0..nq).map(|q| remote.remote(q * size..(q + 1) * size)).collect::<Result<Vec<_>>>()?;
            let out = scope_with_timeout(p.timeout, |s| {
                if p.tokens {
                    bw_loop(p, &mut TokenPoster::new(s, p, ReadOps { s, qps: &a, free, remote: remotes }))
                } else {
                    // One READ per destination slot (TX_DEPTH per QP, at most one outstanding
                    // each: the window is TX_DEPTH), re-posted in turn; with -l, the slots in
                    // TX_DEPTH / POST_LIST lists, posted in turn (no single READs then).
                    let singles = if p.post_list > 1 { 0 } else { p.tx_depth };
                    let mut lanes = LanePoster::open(s, &mut a, p, singles, |lane, q| {
                        let buf = free[q].pop().ok_or_else(|| bad("internal: too few READ buffers"))?;
                        Ok(lane.prepare(wr::Read::new(buf, remotes[q]))?)
                    })?
                    .with_lists(p, p.tx_depth / p.post_list, |q| {
                        let buf = free[q].pop().ok_or_else(|| bad("internal: too few READ buffers"))?;
                        Ok(wr::Read::new(buf, remotes[q]))
                    })?;
                    bw_loop(p, &mut lanes)
                }
            })??;
            Ok(out.run)
        }
        Test::SendBw => {
            let mut src = mem.alloc(pd, size * nq, access::LOCAL_READ)?;
            src.as_mut_slice().fill(0x5a);
            let mut recv = mem.alloc(pd, size * nq * rx, access::LOCAL_RW)?;
            let all = split(recv.slice_mut(..)?, nq, size * rx)?;
            let bufs = all.into_iter().map(|v| split(v, rx, size)).collect::<Result<Vec<_>>>()?;
            let srcs = (0..nq).map(|q| src.slice(q * size..(q + 1) * size)).collect::<Result<Vec<_>>>()?;
            let sh = SendShared {
                ready: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                final_posted: (0..nq).map(|_| AtomicU64::new(0)).collect(),
                published: AtomicBool::new(false),
                failed: AtomicBool::new(false),
            };
            let (a, b) = (&mut a, &mut b);
            std::thread::scope(|ts| {
                let receiver = ts.spawn(|| send_bw_receiver(p, b, bufs, &sh));
                let sender = || -> Result<BwRun> {
                    wait_flag(&sh.ready, p.timeout, "the receiver's initial receives")?;
                    let out = scope_with_timeout(p.timeout, |s| {
                        if p.tokens {
                            let ops = SendOps { s, qps: a, src: srcs.clone() };
                            send_bw_sender(p, &mut TokenPoster::new(s, p, ops), &sh)
                        } else {
                            // One SEND per QP, re-posted.
                            let mut lanes =
                                LanePoster::open(s, a, p, 1, |lane, q| Ok(lane.prepare(wr::Send::new(srcs[q]))?))?
                                    .with_lists(p, 1, |q| Ok(wr::Send::new(srcs[q])))?;
                            send_bw_sender(p, &mut lanes, &sh)
                        }
                    })??;
                    Ok(out.run)
                };
                beside_peer(&sh.failed, receiver, sender)
            })
        }
        _ => unreachable!(),
    }
}

/// The sending side of send_bw: `bw_loop`, then in duration mode as many untimed sends as the
/// receiver still has receives posted (so that no receive is left behind at the end of its
/// scope).
fn send_bw_sender(p: &Params, poster: &mut impl BwPoster, sh: &SendShared) -> Result<BwOutcome> {
    let out = bw_loop(p, poster)?;
    if p.duration.is_some() {
        // Every send completed, so each consumed one posted receive. Now complete the receives
        // still posted, with untimed sends.
        sh.stop.store(true, Ordering::Release);
        wait_flag(&sh.published, p.timeout, "the receiver's final count")?;
        for (q, &sent) in out.sent.iter().enumerate() {
            let extra = sh.final_posted[q].load(Ordering::Acquire).saturating_sub(sent);
            for _ in 0..extra {
                poster.post(q, true)?;
                poster.complete_oldest(q)?;
            }
        }
    }
    Ok(out)
}

// ------------------------------------------------------------------------------------------
// Latency

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Sends first and measures (perftest's client).
    Client,
    /// Answers (perftest's server).
    Server,
}

#[derive(Default)]
struct LatShared {
    ready: AtomicBool,
    /// Duration mode: the client's next message is the last; do not answer it.
    stop: AtomicBool,
    failed: AtomicBool,
}

/// The byte value that the k-th write (from 1) carries in its last byte: consecutive writes
/// differ, so the receiver sees each arrival. The sources are NSLOTS views written before the
/// scope: a view lent to a request stays immutably borrowed until the scope ends.
const NSLOTS: usize = 4;
fn slot_of(k: u64) -> usize {
    (k % NSLOTS as u64) as usize
}

/// One side of a latency test. (Its QP is passed on its own: a send lane borrows it
/// exclusively.)
#[derive(Clone, Copy)]
struct LatSide<'x> {
    p: &'x Params,
    role: Role,
    sh: &'x LatShared,
}

impl LatSide<'_> {
    fn should_stop(&self, start: Instant) -> bool {
        self.p.duration.is_some_and(|d| start.elapsed() >= d)
    }

    /// Before each send: the client stamps the round trip that starts (and shows progress),
    /// or, once a `-D` run's time is up (`time_up`, read once per round by the caller, so that
    /// it does not also post a receive for an answer that will not come), tells the peer to
    /// stop. Returns whether this is the last send.
    fn before_send(
        &self,
        time_up: bool,
        base: Instant,
        sent: u64,
        stamps: &mut Vec<u64>,
        progress: &mut Progress,
    ) -> bool {
        if self.role != Role::Client {
            return false;
        }
        if time_up {
            self.sh.stop.store(true, Ordering::Release);
            return true;
        }
        stamps.push(since(base));
        progress.tick(sent);
        false
    }

    /// Runs the side's loop in a scope (drain bounded by `--timeout`); tells the peer thread
    /// if it fails.
    fn run<'env, F>(&self, body: F) -> Result<()>
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<()>,
    {
        let r = scope_with_timeout(self.p.timeout, body).and_then(|r| r);
        if r.is_err() {
            self.sh.failed.store(true, Ordering::Release);
        }
        r
    }

    /// Called now and then while waiting for the peer's message: fails once `--timeout` has
    /// passed (`deadline` is fixed at the first call, `waited` being how long the wait had
    /// already run then) or the peer thread has failed.
    fn still_waiting(&self, deadline: &mut Option<Instant>, waited: Duration, what: &str) -> Result<()> {
        if deadline_passed(deadline, self.p.timeout, waited) {
            return Err(Error::Timeout { what: what.into(), after: self.p.timeout });
        }
        if self.sh.failed.load(Ordering::Acquire) {
            return Err(bad("the peer thread failed"));
        }
        Ok(())
    }

    /// Room for the client's post times.
    fn stamps(&self) -> Vec<u64> {
        Vec::with_capacity(if self.p.duration.is_some() { 1 << 16 } else { self.p.iters as usize })
    }
}

/// How one side of a latency test posts: with scope tokens ([`TokenLat`]) or a send lane
/// ([`LaneLat`]).
trait LatPoster<'scope, 'a> {
    /// Posts message `k` (from 1). A signaled one is awaited (bounded): its completion also
    /// completes the unsignaled messages posted before it.
    fn send(&mut self, k: u64, signaled: bool) -> Result<()>;
}

/// How a receiving side (of send_lat, or send_bw's receiver per QP) receives: with scope
/// tokens ([`TokenRecv`]) or a receive lane ([`LaneRecv`]). Receive slot `i` is one buffer;
/// slots are posted in turn, so the oldest one posted is the next to complete (a receive queue
/// completes in order).
trait LatReceiver {
    /// How many receive slots (buffers) there are.
    fn slots(&self) -> usize;
    /// Posts receive slot `i`.
    fn post(&mut self, i: usize) -> Result<()>;
    /// Waits at most `slice` for slot `i`'s receive; `None` if the slice ran out.
    fn wait(&mut self, i: usize, spin: bool, slice: Duration) -> Result<Option<Completion>>;
}

/// Receives with scope tokens: `Scope::post_recv` and `Scope::wait`, a token per receive.
struct TokenRecv<'scope, 'env, 'a> {
    s: &'scope Scope<'scope, 'env>,
    qp: &'scope Qp<RC, RTS>,
    /// Slot `i`'s buffer while it is not posted, its token while it is.
    bufs: Vec<Option<LocalBufMut<'a>>>,
    tokens: Vec<Option<Token<'scope, LocalBufMut<'a>>>>,
}

impl<'scope, 'env, 'a: 'scope> TokenRecv<'scope, 'env, 'a> {
    fn new(s: &'scope Scope<'scope, 'env>, qp: &'scope Qp<RC, RTS>, bufs: Vec<LocalBufMut<'a>>) -> Self {
        let tokens = bufs.iter().map(|_| None).collect();
        TokenRecv { s, qp, bufs: bufs.into_iter().map(Some).collect(), tokens }
    }
}

impl<'scope, 'a: 'scope> LatReceiver for TokenRecv<'scope, '_, 'a> {
    fn slots(&self) -> usize {
        self.bufs.len()
    }
    fn post(&mut self, i: usize) -> Result<()> {
        let buf = self.bufs[i].take().ok_or_else(|| bad("internal: receive slot posted twice"))?;
        self.tokens[i] = Some(self.s.post_recv(self.qp, wr::Recv::new(buf))?);
        Ok(())
    }
    fn wait(&mut self, i: usize, spin: bool, slice: Duration) -> Result<Option<Completion>> {
        let token = self.tokens[i].take().ok_or_else(|| bad("internal: no receive posted"))?;
        match wait_on(self.s, token, spin, slice) {
            Ok((c, buf)) => {
                self.bufs[i] = Some(buf);
                Ok(Some(c))
            }
            Err(WaitError { error: Error::Timeout { .. }, token }) => {
                self.tokens[i] = Some(token);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Receives with an ordered receive lane: one prepared receive per buffer, re-posted, each
/// completion handed out in posting order (`OrderedRecvLane::wait_next`, no token per receive),
/// as the loops wait for their oldest slot.
struct LaneRecv<'scope, 'a> {
    lane: OrderedRecvLane<'scope, RC>,
    prepared: Vec<PreparedRecv<'scope, LocalBufMut<'a>>>,
    /// The slot whose receive `wait_next` hands out next.
    next: usize,
}

impl<'scope, 'a: 'scope> LaneRecv<'scope, 'a> {
    /// Prepares one receive per buffer on `lane`.
    fn new(lane: RecvLane<'scope, RC>, bufs: Vec<LocalBufMut<'a>>) -> Result<Self> {
        let lane = lane.ordered();
        let prepared = bufs.into_iter().map(|b| Ok(lane.prepare(wr::Recv::new(b))?)).collect::<Result<Vec<_>>>()?;
        Ok(LaneRecv { lane, prepared, next: 0 })
    }
}

impl LatReceiver for LaneRecv<'_, '_> {
    fn slots(&self) -> usize {
        self.prepared.len()
    }
    // Both inline: they are on send_lat's critical path (a completion in, a receive reposted).
    #[inline(always)]
    fn post(&mut self, i: usize) -> Result<()> {
        self.lane.post(&mut self.prepared[i])
    }
    #[inline(always)]
    fn wait(&mut self, i: usize, spin: bool, slice: Duration) -> Result<Option<Completion>> {
        // The loops post the slots in turn and wait for the oldest: the lane's order.
        if i != self.next {
            return Err(bad("internal: a receive waited for out of posting order"));
        }
        let r = if spin { self.lane.wait_next_spin(slice) } else { self.lane.wait_next(slice) };
        match r {
            Ok(c) => {
                self.next = (i + 1) % self.prepared.len();
                Ok(Some(c))
            }
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A latency side with scope tokens: a request and a token per message (`post` builds and
/// posts message k), every token collected.
struct TokenLat<'scope, 'env, 'x, 'a, F> {
    s: &'scope Scope<'scope, 'env>,
    side: LatSide<'x>,
    post: F,
    /// The tokens of the unsignaled messages since the last signaled one.
    unsignaled: Vec<Token<'scope, LocalBuf<'a>>>,
}

impl<'scope, 'env, 'x, 'a, F> TokenLat<'scope, 'env, 'x, 'a, F> {
    fn new(s: &'scope Scope<'scope, 'env>, side: LatSide<'x>, post: F) -> Self {
        TokenLat { s, side, post, unsignaled: Vec::with_capacity(side.p.cq_mod as usize) }
    }
}

impl<'scope, 'a: 'scope, F> LatPoster<'scope, 'a> for TokenLat<'scope, '_, '_, 'a, F>
where
    F: FnMut(u64, bool) -> Result<Token<'scope, LocalBuf<'a>>>,
{
    fn send(&mut self, k: u64, signaled: bool) -> Result<()> {
        let token = (self.post)(k, signaled)?;
        if !signaled {
            self.unsignaled.push(token);
            return Ok(());
        }
        let p = self.side.p;
        wait_on(self.s, token, p.spin, p.timeout)?.0.ok()?;
        for t in self.unsignaled.drain(..) {
            wait_on(self.s, t, p.spin, p.timeout)?.0.ok()?;
        }
        Ok(())
    }
}

/// A latency side with a send lane: its requests prepared once (message k posts
/// `wrs[k mod wrs.len()]`).
struct LaneLat<'scope, 'x, W> {
    lane: SendLane<'scope, RC, RTS>,
    wrs: Vec<Prepared<'scope, W>>,
    side: LatSide<'x>,
}

impl<'scope, 'a: 'scope, W> LatPoster<'scope, 'a> for LaneLat<'scope, '_, W> {
    fn send(&mut self, k: u64, signaled: bool) -> Result<()> {
        // No division on the latency path when there is one request (send_lat).
        let slot = if self.wrs.len() == 1 { 0 } else { (k % self.wrs.len() as u64) as usize };
        let wr = &mut self.wrs[slot];
        if signaled {
            let token = self.lane.post(wr)?;
            let p = self.side.p;
            lane_wait(&mut self.lane, token, p.spin, p.timeout)?.ok()?;
        } else {
            self.lane.post_unsignaled(wr)?;
        }
        Ok(())
    }
}

/// One side of write_lat (perftest's `run_iter_lat_write`): wait for the peer's write to land
/// (polling the last byte of the target), then write back, and wait for that write's
/// completion (every write is signaled, as in perftest). Returns the client's post times.
fn write_lat_side(
    side: LatSide<'_>,
    qp: &mut Qp<RC, RTS>,
    slots: &[LocalBuf<'_>],
    mine: &Mr<access::RemoteRw>,
    peer: RemoteSlice<access::RemoteRw>,
) -> Result<Vec<u64>> {
    let mut stamps = side.stamps();
    side.run(|s| {
        if side.p.tokens {
            let qp = &*qp;
            let post = |k: u64, signaled: bool| {
                let wr = wr::Write::new(slots[slot_of(k)], peer);
                Ok(if signaled { s.post_send(qp, wr)? } else { s.post_send(qp, wr.unsignaled())? })
            };
            write_lat_loop(side, &mut TokenLat::new(s, side, post), mine, &mut stamps)
        } else {
            // One WRITE per source slot, in the order of `slot_of`.
            let lane = s.send_lane(qp)?;
            let wrs = slots.iter().map(|&v| Ok(lane.prepare(wr::Write::new(v, peer))?)).collect::<Result<Vec<_>>>()?;
            write_lat_loop(side, &mut LaneLat { lane, wrs, side }, mine, &mut stamps)
        }
    })?;
    Ok(stamps)
}

/// The loop of `write_lat_side`, whatever the posting API.
fn write_lat_loop<'scope, 'a>(
    side: LatSide<'_>,
    poster: &mut impl LatPoster<'scope, 'a>,
    mine: &Mr<access::RemoteRw>,
    stamps: &mut Vec<u64>,
) -> Result<()> {
    let p = side.p;
    let mut progress = Progress::new(p, p.iters);
    let base = Instant::now();
    let (mut sent, mut received) = (0u64, 0u64);
    let mut last = [0u8; 1];
    loop {
        if !(side.role == Role::Client && sent == 0) {
            received += 1;
            let want = slot_of(received) as u8 + 1;
            let mut spins = 0u32;
            let mut deadline = None;
            loop {
                mine.read_volatile_into(p.size - 1, &mut last)?;
                if last[0] == want {
                    break;
                }
                if p.spin {
                    // Read the clock only every 1,024 polls (the deadline from the first
                    // read), as the library's spinning waits and perftest's loops do.
                    spins = spins.wrapping_add(1);
                    if spins % 1024 == 0 {
                        side.still_waiting(&mut deadline, Duration::ZERO, "the peer's RDMA WRITE")?;
                    }
                } else {
                    // The default: this wait yields after every empty look, as the library's
                    // default waits do after every empty poll (clock read included).
                    side.still_waiting(&mut deadline, Duration::ZERO, "the peer's RDMA WRITE")?;
                    std::thread::yield_now();
                }
            }
            match side.role {
                Role::Server if side.sh.stop.load(Ordering::Acquire) => return Ok(()),
                Role::Client if p.duration.is_none() && received == p.iters => return Ok(()),
                _ => {}
            }
        }
        let stop_now = side.before_send(side.should_stop(base), base, sent, stamps, &mut progress);
        sent += 1;
        poster.send(sent, true)?;
        if stop_now || (side.role == Role::Server && p.duration.is_none() && sent == p.iters) {
            return Ok(());
        }
    }
}

/// One side of send_lat (perftest's `run_iter_lat_send`): wait for the peer's message, repost
/// the receive, send back; every CQ_MOD-th send (and the last) is signaled and awaited.
fn send_lat_side(
    side: LatSide<'_>,
    qp: &mut Qp<RC, RTS>,
    src: LocalBuf<'_>,
    bufs: Vec<LocalBufMut<'_>>,
) -> Result<Vec<u64>> {
    let mut stamps = side.stamps();
    side.run(|s| {
        if side.p.tokens {
            let qp = &*qp;
            let post = |_: u64, signaled: bool| {
                let wr = wr::Send::new(src);
                Ok(if signaled { s.post_send(qp, wr)? } else { s.post_send(qp, wr.unsignaled())? })
            };
            send_lat_loop(side, &mut TokenLat::new(s, side, post), &mut TokenRecv::new(s, qp, bufs), &mut stamps)
        } else {
            let (lane, recv_lane) = s.lanes(qp)?;
            let wrs = vec![lane.prepare(wr::Send::new(src))?];
            send_lat_loop(side, &mut LaneLat { lane, wrs, side }, &mut LaneRecv::new(recv_lane, bufs)?, &mut stamps)
        }
    })?;
    Ok(stamps)
}

/// The loop of `send_lat_side`, whatever the posting API.
fn send_lat_loop<'scope, 'a>(
    side: LatSide<'_>,
    poster: &mut impl LatPoster<'scope, 'a>,
    rx: &mut impl LatReceiver,
    stamps: &mut Vec<u64>,
) -> Result<()> {
    let p = side.p;
    let n = rx.slots();
    let mut progress = Progress::new(p, p.iters);
    for i in 0..n {
        rx.post(i)?;
    }
    let mut total_posted = n as u64;
    // The receive queue completes in order: slot `oldest` holds the next receive to complete.
    let mut oldest = 0;
    side.sh.ready.store(true, Ordering::Release);
    let base = Instant::now();
    let (mut sent, mut received) = (0u64, 0u64);
    loop {
        // Whether a `-D` run's time is up, read once per round (see `before_send`).
        let time_up = side.should_stop(base);
        if !(side.role == Role::Client && sent == 0) {
            // The overall deadline is fixed when the first slice runs out (no clock read when
            // the message comes within it).
            let mut deadline = None;
            let c = loop {
                if let Some(c) = rx.wait(oldest, p.spin, SLICE)? {
                    break c;
                }
                side.still_waiting(&mut deadline, SLICE, "the peer's SEND")?;
            };
            c.ok()?;
            received += 1;
            let finished = match side.role {
                Role::Server => side.sh.stop.load(Ordering::Acquire),
                Role::Client => p.duration.is_none() && received == p.iters,
            };
            if finished {
                return Ok(());
            }
            // As many receives as messages, none left over: with -n, `iters` in all (perftest's
            // rule); with -D (one receive at a time, `recv_depth`) one per expected answer.
            let more = match (p.duration, side.role) {
                (None, _) => total_posted < p.iters,
                (Some(_), Role::Server) => true,
                (Some(_), Role::Client) => !time_up,
            };
            if more {
                rx.post(oldest)?;
                total_posted += 1;
            }
            oldest = next_slot(oldest, n);
        }
        let stop_now = side.before_send(time_up, base, sent, stamps, &mut progress);
        sent += 1;
        let last = stop_now || (p.duration.is_none() && sent == p.iters);
        // (CQ moderation 1, perftest's default for latency, needs no division.)
        poster.send(sent, p.cq_mod == 1 || sent % p.cq_mod == 0 || last)?;
        if stop_now || (side.role == Role::Server && p.duration.is_none() && sent == p.iters) {
            return Ok(());
        }
    }
}

/// Receives posted at a time by each side of send_lat: RX_DEPTH, at most the iterations
/// (perftest's); one with -D, whose end would otherwise leave receives posted that no message
/// completes (a scope flushes those and reports the QP broken).
fn recv_depth(p: &Params) -> usize {
    match (p.test, p.duration) {
        (Test::SendLat, None) => p.rx_depth.min(p.iters.min(1 << 20) as usize).max(1),
        _ => 1,
    }
}

/// A latency test with one side in this process (`--listen`: the server, `--connect`: the
/// client), as perftest runs it: its own context, PD, CQs and buffers, connected to the other
/// process's QP through the pingpong examples' TCP exchange. Returns the client's post times
/// (none on the server).
fn run_lat_peer(p: &Params, role: Role, host: Option<&str>) -> Result<Vec<u64>> {
    let res = LatRes::open(p)?;
    let qp = res.pd.create_qp::<RC>(&res.config(p))?;
    let me = qp.endpoint(PORT, p.gid_index, if role == Role::Client { 0x1000 } else { 0x1100 })?;
    let side = PeerSide { p, role, host, res: &res, me };
    match p.test {
        Test::WriteLat => write_lat_peer(side, qp),
        _ => send_lat_peer(side, qp),
    }
}

/// One side of a two-process latency test: what it knows before the exchange (its resources
/// and its QP's address `me`).
#[derive(Clone, Copy)]
struct PeerSide<'x> {
    p: &'x Params,
    role: Role,
    /// The server to connect to (the client); `None` listens.
    host: Option<&'x str>,
    res: &'x LatRes,
    me: Endpoint,
}

/// A TCP exchange failed.
fn exchange_failed(e: Box<dyn std::error::Error>) -> Error {
    bad(format!("the address exchange failed: {e}"))
}

/// The TCP exchange of a two-process latency test: `me` and `extra` out; the peer's address
/// and as many bytes as `extra` has in. The client's part is complete when this returns; the
/// server gets its connection back, to answer (`ServerConn::finish_with`) once it is ready.
fn peer_exchange(side: PeerSide<'_>, extra: &[u8]) -> Result<(Endpoint, Vec<u8>, Option<pingpong::ServerConn>)> {
    let PeerSide { p, role, host, me, .. } = side;
    let mine = std::slice::from_ref(&me);
    let (peers, theirs, conn) = match (role, host) {
        (Role::Client, Some(host)) => {
            let (peers, theirs) =
                pingpong::client_exchange_with(host, p.port, mine, extra, extra.len(), p.timeout, p.timeout)
                    .map_err(exchange_failed)?;
            (peers, theirs, None)
        }
        _ => {
            let listener = pingpong::Listener::bind(p.port).map_err(|e| bad(format!("TCP port {}: {e}", p.port)))?;
            let (conn, peers, theirs) =
                listener.accept_with(1, extra.len(), p.timeout, p.timeout).map_err(exchange_failed)?;
            (peers, theirs, Some(conn))
        }
    };
    Ok((peers[0], theirs, conn))
}

/// The bytes of a `write_lat` target on the wire: address, length, rkey (little-endian).
const TARGET_LEN: usize = 20;

fn encode_target(t: &RemoteSlice<access::RemoteRw>) -> Vec<u8> {
    [&t.addr().to_le_bytes()[..], &t.len().to_le_bytes(), &t.rkey().to_le_bytes()].concat()
}

fn decode_target(b: &[u8]) -> Result<RemoteSlice<access::RemoteRw>> {
    let field = |r: std::ops::Range<usize>| b.get(r).ok_or_else(|| bad("the peer's target is truncated"));
    let addr = u64::from_le_bytes(field(0..8)?.try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(field(8..16)?.try_into().expect("8 bytes"));
    let rkey = u32::from_le_bytes(field(16..TARGET_LEN)?.try_into().expect("4 bytes"));
    Ok(RemoteSlice::from_wire(addr, len, rkey))
}

/// `write_lat` in two processes: each side exchanges, after its QP address, where the peer's
/// RDMA WRITEs go (its target's address, length and rkey); the server answers once its QP is
/// in RTS, so the client's first write finds it ready.
fn write_lat_peer(side: PeerSide<'_>, qp: Qp<RC, RESET>) -> Result<Vec<u64>> {
    let PeerSide { p, role, res, me, .. } = side;
    let size = p.size;
    let (src, dst) = write_lat_mem(p, &res.pd)?;
    let extra = encode_target(&dst.remote(..)?);
    let (peer, theirs, conn) = peer_exchange(side, &extra)?;
    let to_peer = decode_target(&theirs)?;
    if to_peer.len() < size as u64 {
        return Err(bad(format!("the peer's target has {} bytes, less than -s {size}", to_peer.len())));
    }
    let mut qp = connect(p, qp, me, peer, 1)?;
    if let Some(conn) = conn {
        conn.finish_with(std::slice::from_ref(&me), &extra).map_err(exchange_failed)?;
    }
    if role == Role::Client {
        print_header(p, &res.ctx, std::slice::from_ref(&qp), 1);
    }
    let slots = source_slots(&src, size)?;
    let sh = LatShared::default();
    write_lat_side(LatSide { p, role, sh: &sh }, &mut qp, &slots, &dst, to_peer)
}

/// `send_lat` in two processes. The server answers only once its receives are posted (the
/// client's exchange returns then), so the client's first message finds one.
fn send_lat_peer(side: PeerSide<'_>, qp: Qp<RC, RESET>) -> Result<Vec<u64>> {
    let PeerSide { p, role, res, me, .. } = side;
    let (peer, _, conn) = peer_exchange(side, &[])?;
    let mut qp = connect(p, qp, me, peer, 1)?;
    if role == Role::Client {
        print_header(p, &res.ctx, std::slice::from_ref(&qp), 1);
    }
    let (src, mut rbuf) = send_lat_mem(p, &res.pd, if role == Role::Client { 0xa } else { 0xb })?;
    let (v, r) = (src.slice(..)?, split(rbuf.slice_mut(..)?, recv_depth(p), p.size)?);
    let sh = LatShared::default();
    let lat = LatSide { p, role, sh: &sh };
    std::thread::scope(|ts| {
        // The server's answer, once its receives are posted (or its side failed).
        let answer = conn.map(|conn| {
            ts.spawn(|| {
                wait_flag(&sh.ready, p.timeout, "the receives")?;
                conn.finish(&me).map_err(exchange_failed)
            })
        });
        let r = send_lat_side(lat, &mut qp, v, r);
        if r.is_err() {
            sh.failed.store(true, Ordering::Release);
        }
        let answered = answer.map_or(Ok(()), join);
        let stamps = r?;
        answered?;
        Ok(stamps)
    })
}

/// What one side of a latency test owns, as each of perftest's two processes does: its own
/// context (device file), PD, CQ and, for send_lat, a CQ for its receives.
struct LatRes {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    rcq: Cq,
    /// `--async`: the completion channel both CQs report to (awaited requests need one).
    _channel: Option<CompChannel>,
}

impl LatRes {
    fn open(p: &Params) -> Result<Self> {
        let ctx = Context::open(&p.device)?;
        let pd = ctx.alloc_pd()?;
        let channel = if p.awaited { Some(ctx.create_comp_channel()?) } else { None };
        let cq = |n: u32| match &channel {
            Some(ch) => ctx.create_cq_with_channel(n, ch),
            None => ctx.create_cq(n),
        };
        let (cq, rcq) = (cq(64)?, cq(recv_depth(p) as u32 + 1)?);
        cq.set_await_polls(p.await_polls);
        rcq.set_await_polls(p.await_polls);
        Ok(LatRes { ctx, pd, cq, rcq, _channel: channel })
    }

    /// The side's QP configuration. send_lat as perftest's: receives complete on a CQ of
    /// their own, and RX_DEPTH of them (at most the iterations) are posted before the first
    /// message.
    fn config(&self, p: &Params) -> QpConfig<'_> {
        let caps = QpCaps { max_send_wr: send_queue_depth(p), max_recv_wr: recv_depth(p) as u32, ..QpCaps::default() };
        let mut config = QpConfig::new(&self.cq).caps(caps);
        if p.test == Test::SendLat {
            config.recv_cq = &self.rcq;
        }
        config
    }
}

/// The memory of one write_lat side: NSLOTS source slots of SIZE bytes (slot j's bytes are all
/// j + 1, so that the peer sees which write landed), and the target of the peer's writes.
fn write_lat_mem(p: &Params, pd: &Pd) -> Result<(Mr<access::LocalRead>, Mr<access::RemoteRw>)> {
    let mut src = pd.alloc_mr(p.size * NSLOTS, access::LOCAL_READ)?;
    for (j, chunk) in src.as_mut_slice().chunks_mut(p.size).enumerate() {
        chunk.fill(j as u8 + 1);
    }
    Ok((src, pd.alloc_mr(p.size, access::REMOTE_RW)?))
}

/// The NSLOTS source slots of `write_lat_mem`'s source, `size` bytes each.
fn source_slots(src: &Mr<access::LocalRead>, size: usize) -> Result<Vec<LocalBuf<'_>>> {
    (0..NSLOTS).map(|j| src.slice(j * size..(j + 1) * size)).collect()
}

/// The memory of one send_lat side: its source (every byte `fill`), and one receive buffer
/// per posted receive (each lent to the device until its completion).
fn send_lat_mem(p: &Params, pd: &Pd, fill: u8) -> Result<(Mr<access::LocalRead>, Mr<access::LocalRw>)> {
    let mut src = pd.alloc_mr(p.size, access::LOCAL_READ)?;
    src.as_mut_slice().fill(fill);
    Ok((src, pd.alloc_mr(p.size * recv_depth(p), access::LOCAL_RW)?))
}

fn run_lat(p: &Params) -> Result<Vec<u64>> {
    let (res_a, res_b) = (LatRes::open(p)?, LatRes::open(p)?);
    let (pd_a, pd_b) = (&res_a.pd, &res_b.pd);
    let (mut a, mut b) = rc_pair(p, (pd_a, &res_a.config(p)), (pd_b, &res_b.config(p)), 1, 0x1000)?;
    print_header(p, &res_a.ctx, std::slice::from_ref(&a), 1);
    let size = p.size;
    let sh = LatShared::default();
    let (a_side, b_side) = (LatSide { p, role: Role::Client, sh: &sh }, LatSide { p, role: Role::Server, sh: &sh });
    let (a, b) = (&mut a, &mut b);
    match p.test {
        Test::WriteLat => {
            let ((src_a, dst_a), (src_b, dst_b)) = (write_lat_mem(p, pd_a)?, write_lat_mem(p, pd_b)?);
            let (slots_a, slots_b) = (source_slots(&src_a, size)?, source_slots(&src_b, size)?);
            let (to_b, to_a) = (dst_b.remote(..)?, dst_a.remote(..)?);
            std::thread::scope(|ts| {
                let server = ts.spawn(|| write_lat_side(b_side, b, &slots_b, &dst_b, to_a));
                beside_peer(&sh.failed, server, || write_lat_side(a_side, a, &slots_a, &dst_a, to_b))
            })
        }
        #[cfg(feature = "tokio")]
        Test::SendLat if p.awaited => std::thread::scope(|ts| {
            let (a, b) = (&*a, &*b);
            let server = ts.spawn(|| awaited::send_lat_side(b_side, b, pd_b, 0xb));
            // The client's first send needs the server's receives posted.
            beside_peer(&sh.failed, server, || {
                wait_flag(&sh.ready, p.timeout, "the server's receives")?;
                awaited::send_lat_side(a_side, a, pd_a, 0xa)
            })
        }),
        Test::SendLat => {
            let ((src_a, mut rbuf_a), (src_b, mut rbuf_b)) = (send_lat_mem(p, pd_a, 0xa)?, send_lat_mem(p, pd_b, 0xb)?);
            let rx = recv_depth(p);
            let (va, vb) = (src_a.slice(..)?, src_b.slice(..)?);
            let (ra, rb) = (split(rbuf_a.slice_mut(..)?, rx, size)?, split(rbuf_b.slice_mut(..)?, rx, size)?);
            std::thread::scope(|ts| {
                let server = ts.spawn(|| send_lat_side(b_side, b, vb, rb));
                // The client's first send needs the server's receive posted.
                beside_peer(&sh.failed, server, || {
                    wait_flag(&sh.ready, p.timeout, "the server's receive")?;
                    send_lat_side(a_side, a, va, ra)
                })
            })
        }
        _ => unreachable!(),
    }
}

/// `send_lat --async`: each side's loop with owned requests awaited in a tokio runtime.
#[cfg(feature = "tokio")]
mod awaited {
    use std::collections::VecDeque;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    use typed_verbs::prelude::*;

    use typed_verbs::scope::Completes;

    use super::{bad, recv_depth, LatSide, Progress, Result, Role};

    /// Awaits `token` at most `timeout` (`--timeout`).
    async fn bounded<B: Completes + Send + 'static>(
        token: OwnedToken<B>,
        timeout: std::time::Duration,
        what: &str,
    ) -> Result<B::Output> {
        match tokio::time::timeout(timeout, token).await {
            Ok(done) => {
                let (c, buffers) = done?;
                c.ok()?;
                Ok(buffers)
            }
            Err(_) => Err(Error::Timeout { what: what.into(), after: timeout }),
        }
    }

    /// One side of send_lat (`send_lat_loop`'s rules, `-n`, CQ moderation 1): RX_DEPTH
    /// owned receives posted first; then, each round, the peer's message awaited (not before
    /// the client's first send) and its chunk re-posted while more are to come, the post time
    /// stamped (client), a SEND of the side's chunk (bytes `fill`) posted and, when signaled,
    /// awaited. The runtime is this thread's, current-thread.
    pub(super) fn send_lat_side(side: LatSide<'_>, qp: &Qp<RC, RTS>, pd: &Pd, fill: u8) -> Result<Vec<u64>> {
        let p = side.p;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| bad(format!("a tokio runtime: {e}")))?;
        let n = recv_depth(p);
        let mut src = pd.alloc_mr(p.size, access::LOCAL_READ)?;
        src.as_mut_slice().fill(fill);
        let mut send_chunk = src.into_chunks(p.size)?.pop();
        let mut free = pd.alloc_mr(p.size * n, access::LOCAL_RW)?.into_chunks(p.size)?;
        let r = rt.block_on(async {
            let mut stamps = side.stamps();
            let mut progress = Progress::new(p, p.iters);
            let mut rx = VecDeque::with_capacity(n);
            let mut total_posted = 0;
            while let Some(chunk) = free.pop() {
                rx.push_back(qp.post_recv_owned(wr::Recv::new(chunk))?);
                total_posted += 1;
            }
            side.sh.ready.store(true, Ordering::Release);
            let base = Instant::now();
            let (mut sent, mut received) = (0u64, 0u64);
            loop {
                if !(side.role == Role::Client && sent == 0) {
                    let token = rx.pop_front().ok_or_else(|| bad("internal: no receive posted"))?;
                    let chunk = bounded(token, p.timeout, "the peer's SEND").await?;
                    received += 1;
                    if side.role == Role::Client && received == p.iters {
                        return Ok(stamps);
                    }
                    if total_posted < p.iters as usize {
                        rx.push_back(qp.post_recv_owned(wr::Recv::new(chunk))?);
                        total_posted += 1;
                    }
                }
                side.before_send(false, base, sent, &mut stamps, &mut progress);
                sent += 1;
                let chunk = send_chunk.take().ok_or_else(|| bad("internal: the send chunk is out"))?;
                // Every send signaled (CQ moderation 1, checked by `params`).
                let token = qp.post_send_owned(wr::Send::new(chunk))?;
                send_chunk = Some(bounded(token, p.timeout, "the SEND's completion").await?);
                if side.role == Role::Server && sent == p.iters {
                    return Ok(stamps);
                }
            }
        });
        if r.is_err() {
            side.sh.failed.store(true, Ordering::Release);
        }
        r
    }
}

// ------------------------------------------------------------------------------------------

fn print_header(p: &Params, ctx: &Context, qps: &[Qp<RC, RTS>], rd_atomic: u8) {
    let caps = qps.first().map(|q| q.caps());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", report::LINE);
    let _ = writeln!(out, "                    {} (typed-verbs perf)", p.test.title());
    let _ = writeln!(out, " Device          : {} (port {PORT}, GID index {})", ctx.device_name(), p.gid_index);
    let _ = writeln!(out, " Loopback        : {} RC QP pair(s) on one device, connected to each other", p.qps);
    let how = if p.tokens {
        "Scope::post_send: a request and a token per post"
    } else {
        "Scope::send_lane: requests prepared once, re-posted"
    };
    let _ = writeln!(out, " API             : {} ({how})", p.api());
    if p.awaited {
        let _ = writeln!(out, " Await polls     : {} (Cq::set_await_polls: polls before sleeping)", p.await_polls);
    }
    if p.post_list > 1 {
        let _ = writeln!(
            out,
            " Posting         : ibv_post_send, lists of {} WRs (SendLane::post_list), no inline",
            p.post_list
        );
    } else {
        let _ = writeln!(out, " Posting         : ibv_post_send, one WR per call, no inline");
    }
    let threads = match p.test {
        Test::WriteBw | Test::ReadBw => "1 (passive target)",
        Test::WriteLat | Test::SendLat => "2 (one per side, each with its own context)",
        _ => "2 (one per side)",
    };
    let _ = writeln!(out, " Threads         : {threads}");
    let waiting = match (p.spin, p.tokens) {
        (false, false) => "SendLane::wait (poll, yield when empty)",
        (false, true) => "Scope::wait (poll, yield when empty)",
        (true, false) => "SendLane::wait_spin (busy-poll, no yield)",
        (true, true) => "Scope::wait_spin (busy-poll, no yield)",
    };
    let _ = writeln!(out, " Completions     : {waiting}");
    if matches!(p.test, Test::SendBw | Test::SendLat) {
        let lane = !p.tokens;
        let recv = match (lane, p.spin) {
            (false, false) => "Scope::post_recv, Scope::wait",
            (false, true) => "Scope::post_recv, Scope::wait_spin",
            (true, false) => "RecvLane::post, RecvLane::wait",
            (true, true) => "RecvLane::post, RecvLane::wait_spin",
        };
        let _ = writeln!(out, " Receives        : {recv}");
    }
    if p.odp {
        let _ = writeln!(
            out,
            " Memory          : On-Demand Paging regions (Pd::alloc_mr_odp), RC {:?} verified",
            odp_ops(p.test)
        );
    }
    let _ = writeln!(out, " TX depth        : {}", p.tx_depth);
    if let Some(c) = caps {
        let _ = writeln!(out, " QP caps granted : send {} recv {}", c.max_send_wr, c.max_recv_wr);
    }
    if p.test != Test::WriteLat {
        let _ = writeln!(out, " CQ Moderation   : {}", p.cq_mod);
    }
    match p.test {
        Test::SendBw => {
            let _ = writeln!(out, " RX depth        : {}", p.rx_depth);
        }
        Test::SendLat => {
            let _ = writeln!(out, " RX depth        : {} (receives complete on a CQ of their own)", recv_depth(p));
        }
        _ => {}
    }
    if p.test == Test::ReadBw {
        let _ = writeln!(out, " Outstand reads  : {rd_atomic}");
    }
    match p.duration {
        Some(d) => {
            let _ = writeln!(out, " Duration        : {:.1} s", d.as_secs_f64());
        }
        None => {
            let _ = writeln!(out, " Iterations      : {}{}", p.iters, if p.test.is_bw() { " per QP" } else { "" });
        }
    }
    let _ = out.flush();
}

fn main() {
    use clap::Parser;
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // Status 1 for a bad command line, as perftest's (clap's is 2); 0 for --help.
        let _ = e.print();
        std::process::exit(if e.use_stderr() { 1 } else { 0 });
    });
    if let Err(e) = params(cli).and_then(|p| run(&p)) {
        eprintln!("perf: {e}");
        std::process::exit(1);
    }
}

/// The `--json` line: the run's parameters and figures (the keys `scripts/bench` reads).
#[derive(serde::Serialize)]
struct Summary<'a> {
    tool: &'static str,
    test: &'static str,
    device: &'a str,
    size: usize,
    qps: usize,
    tx_depth: usize,
    cq_mod: u64,
    post_list: usize,
    api: &'static str,
    /// `--async`: `Cq::set_await_polls` of both CQs.
    #[serde(skip_serializing_if = "Option::is_none")]
    await_polls: Option<u32>,
    spin: bool,
    odp: bool,
    duration_s: Option<f64>,
    iterations: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    elapsed_s: Option<f64>,
    #[serde(flatten)]
    bw: Option<BwResult>,
    #[serde(flatten)]
    lat: Option<report::LatResult>,
}

impl<'a> Summary<'a> {
    /// The parameters of `p`, no figures yet.
    fn new(p: &'a Params) -> Self {
        Summary {
            tool: "typed-verbs perf",
            test: p.test.name(),
            device: &p.device,
            size: p.size,
            qps: p.qps,
            tx_depth: p.tx_depth,
            cq_mod: p.cq_mod,
            post_list: p.post_list,
            api: p.api(),
            await_polls: p.awaited.then_some(p.await_polls),
            spin: p.spin,
            odp: p.odp,
            duration_s: p.duration.map(|d| d.as_secs_f64()),
            iterations: 0,
            elapsed_s: None,
            bw: None,
            lat: None,
        }
    }
}

fn run(p: &Params) -> Result<()> {
    let mut j = Summary::new(p);
    if p.test.is_bw() {
        let run = run_bw(p)?;
        let r = report::bw(&run);
        println!("{}", report::bw_table(p.size, run.completed, &r));
        if r.peak_sampled {
            println!(" (BW peak computed on a subsample of start points: long run)");
        }
        j.iterations = run.completed;
        j.elapsed_s = Some(run.elapsed.as_secs_f64());
        j.bw = Some(r);
    } else {
        let stamps = match &p.peer {
            None => run_lat(p)?,
            Some((Role::Server, _)) => {
                run_lat_peer(p, Role::Server, None)?;
                return Ok(()); // the client measures
            }
            Some((Role::Client, host)) => run_lat_peer(p, Role::Client, host.as_deref())?,
        };
        let iterations = stamps.len() as u64;
        let r = report::lat(&stamps, 2.0).ok_or_else(|| bad("too few iterations for latency statistics"))?;
        if p.histogram {
            print!("{}", report::lat_all(&stamps, 2.0));
        }
        println!("{}", report::lat_table(p.size, iterations, &r));
        j.iterations = iterations;
        j.lat = Some(r);
    }
    if p.json {
        println!("{}", serde_json::to_string(&j).map_err(|e| bad(format!("JSON: {e}")))?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(line: &str) -> std::result::Result<Params, String> {
        let argv = std::iter::once("perf").chain(line.split_whitespace());
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        params(cli).map_err(|e| e.to_string())
    }

    fn ok(line: &str) -> Params {
        parse(line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }

    /// perftest's forms (`-s 64`, `-s64`, `--size=64`, `--post_list 10`, `-F`) and defaults.
    #[test]
    fn the_command_line_is_perftests() {
        let p = ok("write_bw -d rxe0 -x 1");
        assert_eq!((p.test, p.device.as_str(), p.gid_index), (Test::WriteBw, "rxe0", 1));
        assert_eq!((p.size, p.iters, p.tx_depth, p.cq_mod, p.rx_depth, p.qps), (65536, 5000, 128, 1, 512, 1));
        assert_eq!((p.post_list, p.tokens, p.spin, p.json, p.peer.is_none()), (1, false, false, false, true));
        assert_eq!(p.timeout, Duration::from_secs(30));
        let p = ok("send_bw --ib-dev=rxe0 -x1 -s64 -t 40 -Q 10 --post_list 10 -n 400 -q 2 -r 64 --json --spin -F");
        assert_eq!((p.test, p.size, p.tx_depth, p.cq_mod, p.post_list, p.iters), (Test::SendBw, 64, 40, 10, 10, 400));
        assert_eq!((p.qps, p.rx_depth, p.json, p.spin), (2, 64, true, true));
        // A post list sets the CQ moderation unless given.
        assert_eq!(ok("write_bw -d rxe0 -s 64 -l 10 -n 400").cq_mod, 10);
        let p = ok("write_lat -d rxe0 --connect 10.0.0.1 -p 18600 -H --timeout 2.5");
        assert_eq!((p.size, p.iters, p.tx_depth, p.histogram, p.port), (2, 1000, 1, true, 18600));
        assert_eq!(p.peer, Some((Role::Client, Some("10.0.0.1".into()))));
        assert_eq!(p.timeout, Duration::from_millis(2500));
        let p = ok("send_lat -d rxe0 -D 1.5 --tokens");
        assert_eq!((p.duration, p.iters, p.cq_mod, p.tokens), (Some(Duration::from_millis(1500)), u64::MAX, 1, true));
        assert_eq!(ok("read_bw -d rxe0 -o 4 --odp").out_reads, Some(4));
        assert_eq!(ok("send_lat -d rxe0 --listen").peer, Some((Role::Server, None)));
        if cfg!(feature = "tokio") {
            let p = ok("send_lat -d rxe0 --async -n 100");
            assert_eq!(
                (p.awaited, p.tokens, p.iters, p.cq_mod, p.api()),
                (true, false, 100, 1, "owned tokens awaited")
            );
            assert_eq!((p.await_polls, ok("send_lat -d rxe0 --async --await-polls 64").await_polls), (0, 64));
            assert!(parse("send_lat -d rxe0 --await-polls 64").is_err_and(|e| e.contains("--async")));
        } else {
            assert!(parse("send_lat -d rxe0 --async").is_err_and(|e| e.contains("the tokio feature")));
        }
    }

    #[test]
    fn bad_command_lines_are_refused() {
        for (line, says) in [
            ("", "required"),
            ("bogus_bw", "invalid value 'bogus_bw'"),
            ("write_bw -d rxe0 -n 10 -D 1", "cannot be used with"),
            ("write_bw -d rxe0 -s", "a value is required"),
            ("write_bw -d rxe0 -z", "unexpected argument '-z'"),
            ("write_bw -d rxe0 -n 1", "-n must be at least 2"),
            ("write_bw -d rxe0 -H", "-H is for the latency tests"),
            ("write_lat -d rxe0 --odp", "--odp is for the bandwidth tests"),
            ("write_lat -d rxe0 -q 2", "one QP pair"),
            ("write_bw -d rxe0 -n 405 -l 10", "multiple of the post list"),
            ("write_bw -d rxe0 -l 10 -Q 4", "multiple of the CQ moderation"),
            ("read_bw -d rxe0 -l 10 -t 25", "TX depth (25) must be a multiple of the post list"),
            ("send_bw -d rxe0 -l 10 --tokens", "not --tokens"),
            ("write_bw -d rxe0 --listen", "--listen and --connect are for send_lat and write_lat with -n"),
            ("send_lat -d rxe0 -D 1 --listen", "--listen and --connect are for send_lat and write_lat with -n"),
            ("send_lat -d rxe0 --listen --connect h", "cannot be used with"),
            ("write_lat -d rxe0 --async", "--async is for send_lat"),
            ("send_lat -d rxe0 --async --spin", "--async runs send_lat with -n and -Q 1"),
            ("send_lat -d rxe0 --async -Q 4", "--async runs send_lat with -n and -Q 1"),
            ("send_lat -d rxe0 --async -D 1", "--async runs send_lat with -n and -Q 1"),
            ("send_lat -d rxe0 --async --tokens", "cannot be used with"),
        ] {
            let e = parse(line).err().unwrap_or_else(|| panic!("{line:?} was accepted"));
            assert!(e.contains(says), "{line:?}: {e}");
        }
    }

    /// The JSON line has the keys `scripts/bench` and the device tests read, numbers as numbers,
    /// and no figures of the other kind of test.
    #[test]
    fn the_json_line_has_the_keys_bench_reads() {
        let p = ok("write_bw -d rxe0 -s 64");
        let mut j = Summary::new(&p);
        j.iterations = 5000;
        j.elapsed_s = Some(0.5);
        j.bw = Some(BwResult { peak_mb_s: 3.5, avg_mb_s: 2.0, msg_rate_mpps: 0.25, peak_sampled: false });
        let v: serde_json::Value = serde_json::from_str(&serde_json::to_string(&j).unwrap()).unwrap();
        assert_eq!(v["tool"], "typed-verbs perf");
        assert_eq!((v["test"].as_str(), v["api"].as_str()), (Some("write_bw"), Some("send lane")));
        assert_eq!((v["size"].as_u64(), v["iterations"].as_u64()), (Some(64), Some(5000)));
        assert_eq!((v["bw_peak_mb_s"].as_f64(), v["bw_avg_mb_s"].as_f64()), (Some(3.5), Some(2.0)));
        assert_eq!((v["msg_rate_mpps"].as_f64(), v["elapsed_s"].as_f64()), (Some(0.25), Some(0.5)));
        assert!(v["duration_s"].is_null() && v["peak_sampled"] == false && v.get("t_avg_us").is_none());
        let p = ok("send_lat -d rxe0 -D 2");
        let mut j = Summary::new(&p);
        let t: Vec<u64> = (0..10).map(|i| i * 4000).collect();
        j.lat = report::lat(&t, 2.0);
        let v: serde_json::Value = serde_json::from_str(&serde_json::to_string(&j).unwrap()).unwrap();
        for key in ["t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "t_p99_us", "t_p999_us"] {
            assert_eq!(v[key].as_f64(), Some(if key == "t_stdev_us" { 0.0 } else { 2.0 }), "{key}");
        }
        assert_eq!((v["samples"].as_u64(), v["duration_s"].as_f64()), (Some(9), Some(2.0)));
        assert!(v.get("elapsed_s").is_none() && v.get("bw_avg_mb_s").is_none());
        // A figure that is not a number is null, as before.
        j.lat.as_mut().unwrap().t_avg = f64::NAN;
        assert!(serde_json::to_string(&j).unwrap().contains("\"t_avg_us\":null"));
    }
}
