//! `zerocost`: the typed half of the zero-cost check (`benches/zerocost/README.md`), the
//! equivalent of `benches/zerocost/raw.c` written with this library.
//!
//! Opens the device, allocates a PD, two MRs and one CQ per QP, connects two RC QPs to each
//! other on the same device (loopback), then runs a fixed sequence in `run_loop`: N = 1000
//! RDMA WRITEs of 64 bytes, every 16th one (and the last) signaled, waiting after each signaled
//! one until its completion arrives. The unsignaled requests' tokens are collected after the
//! signaled completion that covers them (they return at once: no extra poll).
//!
//! `run_loop` contains only the scope and the post/wait loop. Callgrind counts it with
//! `--toggle-collect=zerocost::run_loop --toggle-collect=zerocost::settle`; `settle` (a 20 ms
//! sleep before waiting, so that the completion is there at the first poll however slow the
//! emulator is) toggles collection off while it runs. The same sequence runs once before,
//! uncounted (`warm_up`).
//!
//! With `--owned`, the measured function is `run_loop_owned`: the same 1000 RDMA WRITEs with
//! owned tokens (`Qp::post_send_owned` of a `Chunk`, one chunk per request in flight, each
//! back from `OwnedToken::wait`).
//!
//! With `--send`, the measured function is `run_loop_send`, the typed `run_loop_send` of
//! `raw.c --send`: N = 1000 SENDs of 64 bytes from one QP's send lane to the other QP, a
//! receive posted on that QP's receive lane before each (one prepared receive, re-posted),
//! every 16th send (and the last) signaled; after each signaled one, a wait for it, then one
//! wait per receive posted since.
//!
//! With `--pingpong`, the measured function is `run_loop_pingpong`, the typed
//! `run_loop_pingpong` of `raw.c --pingpong`: the critical path of the send_lat benchmark,
//! perftest's `run_iter_lat_send` with both sides in one thread. Each of two QPs has a send
//! lane, a receive lane and receive CQ of its own; N = 1000 SENDs of 64 bytes go back and
//! forth, every one signaled; before sending, a side waits for the peer's last message and
//! re-posts a receive, and after sending, it waits for the send's completion.
//!
//! With `--async`, the measured function is `run_loop_async`: the `--owned` sequence with every
//! token awaited (`token.await`, `OwnedToken: IntoFuture`) in a current-thread tokio runtime,
//! the QP's CQ on a completion channel. With `--async-pingpong`, it is
//! `run_loop_async_pingpong`: the `--pingpong` sequence with owned chunks (`post_send_owned`,
//! `post_recv_owned`), every send and receive awaited in the same runtime. `block_on` and the
//! runtime's work are counted as the library's: they are what an async program runs.
//!
//! Build: `cargo build --release --features tokio --example zerocost`. Usage:
//! `zerocost [--scope | --owned | --send | --pingpong | --async | --async-pingpong] [DEVICE [GID_INDEX]]`
//! (defaults: `$TYPED_VERBS_DEVICE` or `rxe0`, `$TYPED_VERBS_GID_INDEX` or 1).

use std::time::Duration;

use typed_verbs::access::HasRemoteWrite;
use typed_verbs::prelude::*;

const N: usize = 1000;
const SIGNAL_EVERY: usize = 16;
const MSG: usize = 64;
const PORT: u8 = 1;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Outside the count (second toggle): gives the device time to complete the request.
#[inline(never)]
fn settle() {
    let pause = Duration::from_millis(20);
    std::thread::sleep(pause);
    // Not a tail call: callgrind must see `settle` return only after the sleep.
    std::hint::black_box(pause);
}

/// The sequence with a [`SendLane`]: one request prepared (and checked) once and re-posted,
/// as the C program re-posts one `struct ibv_send_wr`.
#[inline(always)]
fn lane_body<A: HasRemoteWrite>(
    qp: &mut Qp<RC, RTS>,
    src: LocalBuf<'_>,
    dst: RemoteSlice<A>,
) -> typed_verbs::Result<()> {
    scope(move |s| -> typed_verbs::Result<()> {
        let mut lane = s.send_lane(qp)?;
        let mut wr = lane.prepare(wr::Write::new(src, dst))?;
        for i in 0..N {
            if (i + 1) % SIGNAL_EVERY == 0 || i == N - 1 {
                let token = lane.post(&mut wr)?;
                settle();
                lane.wait(token, TIMEOUT)?.ok()?;
            } else {
                lane.post_unsignaled(&mut wr)?;
            }
        }
        Ok(())
    })?
}

/// The sequence with scope tokens: a new request per post, a token per request (each
/// unsignaled one collected after the signaled completion that covers it).
#[inline(always)]
fn scope_body<A: HasRemoteWrite>(qp: &Qp<RC, RTS>, src: LocalBuf<'_>, dst: RemoteSlice<A>) -> typed_verbs::Result<()> {
    scope(move |s| -> typed_verbs::Result<()> {
        let mut unsignaled = Vec::with_capacity(SIGNAL_EVERY);
        for i in 0..N {
            let wr = wr::Write::new(src, dst);
            if (i + 1) % SIGNAL_EVERY == 0 || i == N - 1 {
                let token = s.post_send(qp, wr)?;
                settle();
                let (c, _src) = s.wait(token, TIMEOUT)?;
                c.ok()?;
                for token in unsignaled.drain(..) {
                    let (c, _src) = s.wait(token, TIMEOUT)?;
                    c.ok()?;
                }
            } else {
                unsignaled.push(s.post_send(qp, wr.unsignaled())?);
            }
        }
        Ok(())
    })?
}

/// The sequence with owned tokens: the same requests over owned memory (`post_send_owned`),
/// one chunk per request in flight, each back with its completion (the unsignaled ones' after
/// the signaled completion that covers them).
#[inline(always)]
fn owned_body<A: HasRemoteWrite>(
    qp: &Qp<RC, RTS>,
    chunks: &mut Vec<Chunk<access::LocalRead>>,
    dst: RemoteSlice<A>,
) -> typed_verbs::Result<()> {
    let mut unsignaled = Vec::with_capacity(SIGNAL_EVERY);
    for i in 0..N {
        let chunk = chunks.pop().ok_or_else(no_chunk)?;
        let wr = wr::Write::new(chunk, dst);
        if (i + 1) % SIGNAL_EVERY == 0 || i == N - 1 {
            let token = qp.post_send_owned(wr)?;
            settle();
            let (c, chunk) = token.wait(TIMEOUT)?;
            c.ok()?;
            chunks.push(chunk);
            for token in unsignaled.drain(..) {
                let (c, chunk) = OwnedToken::wait(token, TIMEOUT)?;
                c.ok()?;
                chunks.push(chunk);
            }
        } else {
            unsignaled.push(qp.post_send_owned(wr.unsignaled())?);
        }
    }
    Ok(())
}

/// No chunk left for the next request (cannot happen: one per request in flight).
#[cold]
fn no_chunk() -> Error {
    Error::InvalidArgument { verb: "zerocost", reason: "no free chunk".into() }
}

/// The `--owned` sequence with every token awaited, run by `rt`.
#[inline(always)]
fn async_body<A: HasRemoteWrite>(
    rt: &tokio::runtime::Runtime,
    qp: &Qp<RC, RTS>,
    chunks: &mut Vec<Chunk<access::LocalRead>>,
    dst: RemoteSlice<A>,
) -> typed_verbs::Result<()> {
    rt.block_on(async move {
        let mut unsignaled: Vec<OwnedToken<Chunk<access::LocalRead>>> = Vec::with_capacity(SIGNAL_EVERY);
        for i in 0..N {
            let chunk = chunks.pop().ok_or_else(no_chunk)?;
            let wr = wr::Write::new(chunk, dst);
            if (i + 1) % SIGNAL_EVERY == 0 || i == N - 1 {
                let token = qp.post_send_owned(wr)?;
                settle();
                let (c, chunk) = token.await?;
                c.ok()?;
                chunks.push(chunk);
                for token in unsignaled.drain(..) {
                    let (c, chunk) = token.await?;
                    c.ok()?;
                    chunks.push(chunk);
                }
            } else {
                unsignaled.push(qp.post_send_owned(wr.unsignaled())?);
            }
        }
        Ok(())
    })
}

/// The measured function of `--async`.
#[inline(never)]
fn run_loop_async(
    rt: &tokio::runtime::Runtime,
    qp: &Qp<RC, RTS>,
    chunks: &mut Vec<Chunk<access::LocalRead>>,
    dst: RemoteSlice<access::RemoteRw>,
) -> typed_verbs::Result<()> {
    async_body(rt, qp, chunks, dst)
}

/// The ping-pong (`pingpong_body`) with owned chunks, every send and receive awaited: side
/// `s` sends from `sends[s]` and receives into the chunks of `recvs[s]`, one per receive posted.
#[inline(always)]
fn async_pingpong_body(
    rt: &tokio::runtime::Runtime,
    qps: [&Qp<RC, RTS>; 2],
    sends: &mut [Vec<Chunk<access::LocalRead>>; 2],
    recvs: &mut [Vec<Chunk<access::LocalRw>>; 2],
) -> typed_verbs::Result<()> {
    rt.block_on(async move {
        let mut tokens: [std::collections::VecDeque<OwnedToken<Chunk<access::LocalRw>>>; 2] = Default::default();
        let mut posted = [0usize; 2];
        for side in 0..2 {
            while posted[side] < PP_DEPTH {
                let chunk = recvs[side].pop().ok_or_else(no_chunk)?;
                tokens[side].push_back(qps[side].post_recv_owned(wr::Recv::new(chunk))?);
                posted[side] += 1;
            }
        }
        for m in 0..N {
            let side = m % 2;
            if m > 0 {
                let token = tokens[side].pop_front().ok_or_else(no_receive)?;
                let (c, chunk) = token.await?;
                c.ok()?;
                recvs[side].push(chunk);
                if posted[side] < N / 2 {
                    let chunk = recvs[side].pop().ok_or_else(no_chunk)?;
                    tokens[side].push_back(qps[side].post_recv_owned(wr::Recv::new(chunk))?);
                    posted[side] += 1;
                }
            }
            let chunk = sends[side].pop().ok_or_else(no_chunk)?;
            let token = qps[side].post_send_owned(wr::Send::new(chunk))?;
            settle();
            let (c, chunk) = token.await?;
            c.ok()?;
            sends[side].push(chunk);
        }
        // The last message's receiver (side 0, N being even).
        let token = tokens[0].pop_front().ok_or_else(no_receive)?;
        let (c, chunk) = token.await?;
        c.ok()?;
        recvs[0].push(chunk);
        Ok(())
    })
}

/// The measured function of `--async-pingpong`.
#[inline(never)]
fn run_loop_async_pingpong(
    rt: &tokio::runtime::Runtime,
    qps: [&Qp<RC, RTS>; 2],
    sends: &mut [Vec<Chunk<access::LocalRead>>; 2],
    recvs: &mut [Vec<Chunk<access::LocalRw>>; 2],
) -> typed_verbs::Result<()> {
    async_pingpong_body(rt, qps, sends, recvs)
}

/// The SEND sequence with both lanes: a send lane on `a`, an ordered receive lane on `b`
/// (its completions waited for in posting order, no token per receive), one request of each
/// prepared once and re-posted, as `raw.c --send` re-posts one `ibv_send_wr` and one
/// `ibv_recv_wr`.
#[inline(always)]
fn send_body(
    a: &mut Qp<RC, RTS>,
    b: &mut Qp<RC, RTS>,
    src: LocalBuf<'_>,
    dst: LocalBufMut<'_>,
) -> typed_verbs::Result<()> {
    scope(move |s| -> typed_verbs::Result<()> {
        let mut lane = s.send_lane(a)?;
        let mut recv_lane = s.recv_lane(b)?.ordered();
        let mut wr = lane.prepare(wr::Send::new(src))?;
        let mut rwr = recv_lane.prepare(wr::Recv::new(dst))?;
        let mut receives = 0;
        for i in 0..N {
            recv_lane.post(&mut rwr)?;
            receives += 1;
            if (i + 1) % SIGNAL_EVERY == 0 || i == N - 1 {
                let token = lane.post(&mut wr)?;
                settle();
                lane.wait(token, TIMEOUT)?.ok()?;
                for _ in 0..std::mem::take(&mut receives) {
                    recv_lane.wait_next(TIMEOUT)?.ok()?;
                }
            } else {
                lane.post_unsignaled(&mut wr)?;
            }
        }
        Ok(())
    })?
}

/// Receives kept posted on each side of the ping-pong (`raw.c`'s `PP_DEPTH`).
const PP_DEPTH: usize = 16;

/// The ping-pong with lanes, `raw.c --pingpong`'s `pingpong_body`: perftest's send_lat loop
/// (every send signaled) with both sides in one thread. Message m goes from side m % 2 to the
/// other; before sending it (m > 0), its sender waits for message m - 1 and re-posts its
/// receive while more messages are to come; after sending, it waits for the send's
/// completion. Each side re-posts one prepared receive on an ordered receive lane, whose
/// `wait_next` waits for the oldest receive not waited for yet (as `raw.c` polls for `got[s]`).
#[inline(always)]
fn pingpong_body(qps: [&mut Qp<RC, RTS>; 2], src: LocalBuf<'_>, dsts: [LocalBufMut<'_>; 2]) -> typed_verbs::Result<()> {
    scope(move |s| -> typed_verbs::Result<()> {
        let [qa, qb] = qps;
        let ((la, ra), (lb, rb)) = (s.lanes(qa)?, s.lanes(qb)?);
        let (mut lanes, mut rlanes) = ([la, lb], [ra.ordered(), rb.ordered()]);
        let [da, db] = dsts;
        let mut wrs = [lanes[0].prepare(wr::Send::new(src))?, lanes[1].prepare(wr::Send::new(src))?];
        let mut rwrs = [rlanes[0].prepare(wr::Recv::new(da))?, rlanes[1].prepare(wr::Recv::new(db))?];
        let mut posted = [0usize; 2];
        for side in 0..2 {
            while posted[side] < PP_DEPTH {
                rlanes[side].post(&mut rwrs[side])?;
                posted[side] += 1;
            }
        }
        for m in 0..N {
            let side = m % 2;
            if m > 0 {
                rlanes[side].wait_next(TIMEOUT)?.ok()?;
                if posted[side] < N / 2 {
                    rlanes[side].post(&mut rwrs[side])?;
                    posted[side] += 1;
                }
            }
            let token = lanes[side].post(&mut wrs[side])?;
            settle();
            lanes[side].wait(token, TIMEOUT)?.ok()?;
        }
        // The last message's receiver (side 0, N being even).
        rlanes[0].wait_next(TIMEOUT)?.ok()?;
        Ok(())
    })?
}

/// A receive token missing from its slot (cannot happen: each slot is filled before it is
/// awaited).
#[cold]
fn no_receive() -> Error {
    Error::InvalidArgument { verb: "zerocost", reason: "no receive posted in this slot".into() }
}

/// The measured function of `--pingpong`.
#[inline(never)]
fn run_loop_pingpong(
    qps: [&mut Qp<RC, RTS>; 2],
    src: LocalBuf<'_>,
    dsts: [LocalBufMut<'_>; 2],
) -> typed_verbs::Result<()> {
    pingpong_body(qps, src, dsts)
}

/// The measured function of `--send`.
#[inline(never)]
fn run_loop_send(
    a: &mut Qp<RC, RTS>,
    b: &mut Qp<RC, RTS>,
    src: LocalBuf<'_>,
    dst: LocalBufMut<'_>,
) -> typed_verbs::Result<()> {
    send_body(a, b, src, dst)
}

/// The measured function: nothing but the post/wait loop (and its scope), N a constant as in
/// the C program.
#[inline(never)]
fn run_loop(qp: &mut Qp<RC, RTS>, src: LocalBuf<'_>, dst: RemoteSlice<access::RemoteRw>) -> typed_verbs::Result<()> {
    lane_body(qp, src, dst)
}

/// The same with scope tokens (measured separately, `--scope`).
#[inline(never)]
fn run_loop_scope(qp: &Qp<RC, RTS>, src: LocalBuf<'_>, dst: RemoteSlice<access::RemoteRw>) -> typed_verbs::Result<()> {
    scope_body(qp, src, dst)
}

/// The same with owned tokens (measured separately, `--owned`).
#[inline(never)]
fn run_loop_owned(
    qp: &Qp<RC, RTS>,
    chunks: &mut Vec<Chunk<access::LocalRead>>,
    dst: RemoteSlice<access::RemoteRw>,
) -> typed_verbs::Result<()> {
    owned_body(qp, chunks, dst)
}

/// The same sequences, not counted. (It runs both, so its code differs from each measured
/// function's and the compiler cannot merge it with one of them into one symbol.)
#[inline(never)]
fn warm_up(qp: &mut Qp<RC, RTS>, src: LocalBuf<'_>, dst: RemoteSlice<access::RemoteRw>) -> typed_verbs::Result<()> {
    lane_body(qp, src, dst)?;
    scope_body(qp, src, dst)
}

/// The typed half of the zero-cost check (benches/zerocost/README.md): RDMA WRITEs with send
/// lanes, or with --scope, --owned, --send or --pingpong the other measured sequences.
#[derive(clap::Parser)]
#[command(group = clap::ArgGroup::new("sequence").args(["scope", "owned", "send", "pingpong", "awaited", "async_pingpong"]))]
struct Args {
    /// WRITEs with scope tokens (`run_loop_scope`).
    #[arg(long)]
    scope: bool,
    /// WRITEs with owned tokens (`run_loop_owned`).
    #[arg(long)]
    owned: bool,
    /// SENDs from a send lane to a receive lane (`run_loop_send`).
    #[arg(long)]
    send: bool,
    /// A SEND ping-pong (`run_loop_pingpong`).
    #[arg(long)]
    pingpong: bool,
    /// WRITEs with owned tokens, awaited in a current-thread tokio runtime (`run_loop_async`).
    #[arg(long = "async")]
    awaited: bool,
    /// The SEND ping-pong with owned chunks, awaited (`run_loop_async_pingpong`).
    #[arg(long)]
    async_pingpong: bool,
    /// The device.
    #[arg(env = "TYPED_VERBS_DEVICE", default_value = "rxe0")]
    device: String,
    /// The GID index.
    #[arg(env = "TYPED_VERBS_GID_INDEX", default_value_t = 1)]
    gid_index: u8,
}

fn main() -> typed_verbs::Result<()> {
    let Args { scope: tokens, owned, send, pingpong, awaited, async_pingpong, device: name, gid_index } =
        clap::Parser::parse();
    let is_async = awaited || async_pingpong;
    let pingpong_like = pingpong || async_pingpong;

    let ctx = Context::open(&name)?;
    let pd = ctx.alloc_pd()?;
    let mut src = pd.alloc_mr(4096, access::LOCAL_READ)?;
    src.as_mut_slice().fill(0xab);
    let mut dst = pd.alloc_mr(4096, access::REMOTE_RW)?;
    // Each CQ holds what the queues completing on it can have outstanding.
    let cqe = if pingpong_like { 64 } else { 64 + SIGNAL_EVERY as u32 };
    // Awaited requests complete on CQs that report to a completion channel.
    let channel = ctx.create_comp_channel()?;
    let cq = |n: u32| if is_async { ctx.create_cq_with_channel(n, &channel) } else { ctx.create_cq(n) };
    let (cq_a, cq_b) = (cq(cqe)?, cq(cqe)?);
    // The ping-pongs: receives complete on CQs of their own, as in perftest's send_lat.
    let rcqs = if pingpong_like { Some((cq(64)?, cq(64)?)) } else { None };
    let caps = QpCaps { max_send_wr: 64, max_recv_wr: SIGNAL_EVERY as u32, ..QpCaps::default() };
    let (mut config_a, mut config_b) = (QpConfig::new(&cq_a).caps(caps), QpConfig::new(&cq_b).caps(caps));
    if let Some((rcq_a, rcq_b)) = &rcqs {
        (config_a.recv_cq, config_b.recv_cq) = (rcq_a, rcq_b);
    }
    let a = pd.create_qp::<RC>(&config_a)?;
    let b = pd.create_qp::<RC>(&config_b)?;
    let (ea, eb) = (a.endpoint(PORT, gid_index, 0x1000)?, b.endpoint(PORT, gid_index, 0x2000)?);
    let access = Access::NONE.remote_write().remote_read();
    let connect = |qp: Qp<RC, RESET>, me: Endpoint, peer: Endpoint| -> typed_verbs::Result<Qp<RC, RTS>> {
        let qp = qp.to_init(&ConnectedInit::new(PORT, access))?;
        let av = AddressVector::global(PORT, peer.gid, gid_index);
        let qp = qp.to_rtr(&RcRtr::new(av, peer.qp_num, peer.psn))?;
        Ok(qp.to_rts(&RcRts::new(me.psn))?)
    };
    let mut a = connect(a, ea, eb)?;
    let mut b = connect(b, eb, ea)?;

    let view = src.slice(..MSG)?;
    if is_async {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::InvalidArgument { verb: "zerocost", reason: format!("a tokio runtime: {e}") })?;
        if async_pingpong {
            let pool = |fill: u8| -> typed_verbs::Result<Vec<Chunk<access::LocalRead>>> {
                let mut mr = pd.alloc_mr(2 * MSG, access::LOCAL_READ)?;
                mr.as_mut_slice().fill(fill);
                mr.into_chunks(MSG)
            };
            let mut sends = [pool(0xab)?, pool(0xab)?];
            let recv_pool = || pd.alloc_mr(PP_DEPTH * MSG, access::LOCAL_RW)?.into_chunks(MSG);
            let mut recvs = [recv_pool()?, recv_pool()?];
            async_pingpong_body(&rt, [&a, &b], &mut sends, &mut recvs)?;
            for side in &mut recvs {
                side.iter_mut().for_each(|c| c.as_mut_slice().fill(0));
            }
            run_loop_async_pingpong(&rt, [&a, &b], &mut sends, &mut recvs)?;
            // Every receive chunk took a message (500 receives per side over 16 chunks).
            if recvs.iter().flatten().any(|c| c.as_slice() != &src.as_slice()[..MSG]) {
                eprintln!("zerocost: a receive chunk does not hold the sent bytes");
                std::process::exit(1);
            }
            println!("typed (owned, awaited): {N} SENDs of {MSG} bytes, ping-pong, every one signaled: ok");
        } else {
            let target = dst.remote(..)?;
            let mut pool = pd.alloc_mr(SIGNAL_EVERY * MSG, access::LOCAL_READ)?;
            pool.as_mut_slice().fill(0xab);
            let mut chunks = pool.into_chunks(MSG)?;
            async_body(&rt, &a, &mut chunks, target)?;
            dst.write_volatile_from(0, &[0; MSG])?;
            run_loop_async(&rt, &a, &mut chunks, target)?;
            let mut seen = [0u8; MSG];
            dst.read_volatile_into(0, &mut seen)?;
            if seen[..] != src.as_slice()[..MSG] {
                eprintln!("zerocost: the target does not hold the written bytes");
                std::process::exit(1);
            }
            println!("typed (owned, awaited): {N} RDMA WRITEs of {MSG} bytes, every {SIGNAL_EVERY}th signaled: ok");
        }
        return Ok(());
    }
    if pingpong {
        // The warm-up's own scope ends before the measured one borrows the receive buffers.
        let (da, db) = dst.slice_mut(..2 * MSG)?.split_at(MSG)?;
        pingpong_body([&mut a, &mut b], view, [da, db])?;
        let (da, db) = dst.slice_mut(..2 * MSG)?.split_at(MSG)?;
        run_loop_pingpong([&mut a, &mut b], view, [da, db])?;
    } else if send {
        // The warm-up's own scope ends before the measured one borrows the receive buffer.
        send_body(&mut a, &mut b, view, dst.slice_mut(..MSG)?)?;
        run_loop_send(&mut a, &mut b, view, dst.slice_mut(..MSG)?)?;
    } else {
        let target = dst.remote(..)?;
        warm_up(&mut a, view, target)?;
        if owned {
            // As many chunks as requests can be in flight, each holding the written bytes.
            let mut pool = pd.alloc_mr(SIGNAL_EVERY * MSG, access::LOCAL_READ)?;
            pool.as_mut_slice().fill(0xab);
            let mut chunks = pool.into_chunks(MSG)?;
            owned_body(&a, &mut chunks, target)?;
            run_loop_owned(&a, &mut chunks, target)?;
        } else if tokens {
            run_loop_scope(&a, view, target)?;
        } else {
            run_loop(&mut a, view, target)?;
        }
    }

    let mut seen = [0u8; MSG];
    dst.read_volatile_into(0, &mut seen)?;
    let mut second = [0u8; MSG];
    dst.read_volatile_into(MSG, &mut second)?;
    if seen[..] != src.as_slice()[..MSG] || (pingpong && second[..] != src.as_slice()[..MSG]) {
        eprintln!("zerocost: the target does not hold the written bytes");
        std::process::exit(1);
    }
    if pingpong {
        println!("typed (send and receive lanes): {N} SENDs of {MSG} bytes, ping-pong, every one signaled: ok");
    } else if send {
        println!("typed (send and receive lanes): {N} SENDs (and receives) of {MSG} bytes, every {SIGNAL_EVERY}th signaled: ok");
    } else {
        let how = if tokens {
            "scope tokens"
        } else if owned {
            "owned tokens"
        } else {
            "send lane"
        };
        println!("typed ({how}): {N} RDMA WRITEs of {MSG} bytes, every {SIGNAL_EVERY}th signaled: ok");
    }
    Ok(())
}
