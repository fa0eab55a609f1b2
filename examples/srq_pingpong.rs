//! `srq_pingpong`: rdma-core's `ibv_srq_pingpong`, wire-compatible with it: `-q` RC queue
//! pairs (default 16) that take their receives from one shared receive queue (SRQ). Either
//! side may be the C tool.
//!
//! ```text
//! srq_pingpong -d rxe0 -g 1 -q 4                # server
//! srq_pingpong -d rxe0 -g 1 -q 4 192.0.2.1      # client (or: ibv_srq_pingpong -d rxe0 -g 1 -q 4 192.0.2.1)
//! ```
//!
//! Both sides must use the same `-q`. What differs from `rc_pingpong`:
//!
//! - the address exchange carries one 52-byte message per QP, and always 256 of them each way
//!   (the C tool's `MAX_QP`; the unused ones are all zeros), then `"done\0"`;
//! - all receives are posted to the SRQ (`Srq::post_recv_owned`), whichever QP a message
//!   arrives on; its completion says which QP it was (`Completion::qp_num`);
//! - the QPs ping-pong independently: the client sends on every QP, and on each QP a side
//!   sends again once its previous send on that QP completed and a message arrived on it.
//!   `-n` counts messages in total over all QPs, as the C tool does (its usage text says "per
//!   QP"): a side stops once it has sent and received `-n` messages, so it may send up to
//!   `-q` - 1 more, as the C tool does.
//!
//! Receives and sends use owned buffers (`Mr::into_chunks`): a chunk moves into its work
//! request and comes back with the completion.

#[path = "common/pingpong.rs"]
mod pingpong;

use std::collections::HashMap;
use std::error::Error as StdError;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use typed_verbs::prelude::*;

use pingpong::{print_address, Options, Tool};

/// `ibv_srq_pingpong` exchanges this many addresses each way, whatever `-q` is.
const MAX_QP: usize = 256;

/// What a QP is waiting for before its next send (the C tool's `pending` bits).
const RECV: u8 = 1;
const SEND: u8 = 2;

type SendChunk = Chunk<access::LocalRead>;
type RecvChunk = Chunk<access::LocalRw>;

fn run(opts: &Options) -> Result<Duration, Box<dyn StdError>> {
    let ctx = pingpong::open(opts)?;
    let (size, num_qp) = (opts.size as usize, opts.num_qp as usize);
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(opts.rx_depth + opts.num_qp)?;
    let srq = pd.create_srq(opts.rx_depth)?;

    // The QPs: one send at a time each; no receive queue of their own (max_recv_wr is ignored
    // with an SRQ, but the library wants it non-zero).
    let caps = QpCaps { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let mut qps = Vec::with_capacity(num_qp);
    for _ in 0..num_qp {
        let qp = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps).srq(&srq))?;
        qps.push(qp.to_init(&ConnectedInit::new(opts.ib_port, Access::NONE))?);
    }

    // `-r` receives into the SRQ, posted before the exchange as in the C tool.
    // `ibv_srq_pingpong` clears its buffer where the other tools fill it with 0x7b.
    let mut check = pingpong::Check::new(opts, 0);
    let ring = pd.alloc_mr(size * opts.rx_depth as usize, access::LOCAL_RW)?.into_chunks(size)?;
    let mut recvs: Vec<Option<OwnedToken<RecvChunk>>> = Vec::with_capacity(ring.len());
    for mut chunk in ring {
        check.fill_recv(chunk.as_mut_slice());
        recvs.push(Some(srq.post_recv_owned(wr::Recv::new(chunk)).map_err(|e| e.error)?));
    }
    // One send buffer per QP (each QP has at most one send in flight).
    let mut send_bufs: Vec<SendChunk> = pd.alloc_mr(size * num_qp, access::LOCAL_READ)?.into_chunks(size)?;
    for buf in &mut send_bufs {
        check.fill_send(buf.as_mut_slice());
    }

    let mut mine = Vec::with_capacity(MAX_QP);
    for qp in &qps {
        let me = pingpong::local_endpoint(&ctx, qp, opts)?;
        print_address("local address: ", &me);
        mine.push(me);
    }
    // The messages for the QPs that do not exist are all zeros.
    let unused = Endpoint { lid: 0, qp_num: 0, psn: 0, gid: Gid::default() };
    let mut wire = mine.clone();
    wire.resize(MAX_QP, unused);

    let connect = |qps: Vec<Qp<RC, INIT>>, peers: &[Endpoint]| -> typed_verbs::Result<Vec<Qp<RC, RTS>>> {
        qps.into_iter()
            .zip(mine.iter().zip(peers))
            // ibv_srq_pingpong's attributes (those of ibv_rc_pingpong), per QP.
            .map(|(qp, (me, peer))| pingpong::connect_rc(qp, opts, me, peer))
            .collect()
    };

    let is_client = opts.server.is_some();
    let qps = match &opts.server {
        Some(host) => {
            let peers = pingpong::client_exchange_all(host, opts.port, &wire, opts.timeout, opts.timeout)?;
            print_remote(&peers[..num_qp]);
            connect(qps, &peers[..num_qp])?
        }
        None => {
            let listener = pingpong::Listener::bind(opts.port)?;
            println!("  waiting for a client on port {}", listener.port());
            let (conn, peers) = listener.accept_all(MAX_QP, opts.accept_timeout, opts.timeout)?;
            // Connected (and the SRQ stocked) before the client may send.
            let qps = connect(qps, &peers[..num_qp])?;
            conn.finish_all(&wire)?;
            print_remote(&peers[..num_qp]);
            qps
        }
    };
    let index: HashMap<u32, usize> = qps.iter().enumerate().map(|(i, qp)| (qp.qp_num(), i)).collect();

    // Per QP: its send buffer (when idle) or its send in flight, and what it waits for.
    let mut idle: Vec<Option<SendChunk>> = send_bufs.into_iter().map(Some).collect();
    let mut busy: Vec<Option<OwnedToken<SendChunk>>> = (0..num_qp).map(|_| None).collect();
    let mut pending = vec![RECV; num_qp];
    let post_send = |i: usize,
                     idle: &mut [Option<SendChunk>],
                     busy: &mut [Option<OwnedToken<SendChunk>>]|
     -> Result<(), Box<dyn StdError>> {
        let buf = idle[i].take().ok_or("the send buffer is in use")?;
        busy[i] = Some(qps[i].post_send_owned(wr::Send::new(buf)).map_err(|e| e.error)?);
        Ok(())
    };

    let start = Instant::now();
    if is_client {
        for (i, p) in pending.iter_mut().enumerate() {
            post_send(i, &mut idle, &mut busy)?;
            *p = SEND | RECV;
        }
    }
    let (iters, mut rcnt, mut scnt) = (opts.iters, 0u32, 0u32);
    let mut last_completion = Instant::now();
    while rcnt < iters || scnt < iters {
        let mut done = Vec::new();
        // Sends: at most one per QP. `try_complete` polls the CQ and hands the token back
        // while the request is outstanding.
        for i in 0..num_qp {
            if let Some(token) = busy[i].take() {
                match token.try_complete() {
                    Ok((c, buf)) => {
                        c.ok().map_err(|e| format!("send on QP {i} ({:#08x}): {e}", qps[i].qp_num()))?;
                        idle[i] = Some(buf);
                        scnt += 1;
                        done.push((i, SEND));
                    }
                    Err(token) => busy[i] = Some(token),
                }
            }
        }
        // Receives: an SRQ's receives complete in any order, on any of the QPs; each chunk
        // goes straight back into the SRQ.
        for slot in &mut recvs {
            let Some(token) = slot.take() else { continue };
            match token.try_complete() {
                Ok((c, mut chunk)) => {
                    let i = *index.get(&c.qp_num()).ok_or_else(|| format!("couldn't find QPN {:#08x}", c.qp_num()))?;
                    c.ok().map_err(|e| format!("receive on QP {i} ({:#08x}): {e}", c.qp_num()))?;
                    check.received(u64::from(rcnt) + 1, c.byte_len() as usize, chunk.as_slice())?;
                    check.fill_recv(chunk.as_mut_slice());
                    *slot = Some(srq.post_recv_owned(wr::Recv::new(chunk)).map_err(|e| e.error)?);
                    rcnt += 1;
                    done.push((i, RECV));
                }
                Err(token) => *slot = Some(token),
            }
        }
        if done.is_empty() {
            if last_completion.elapsed() > opts.timeout {
                return Err(format!(
                    "timed out after {}s waiting for a completion ({rcnt} of {iters} messages received, {scnt} of \
                     {iters} sent)",
                    opts.timeout.as_secs()
                )
                .into());
            }
            std::hint::spin_loop();
            continue;
        }
        last_completion = Instant::now();
        for (i, what) in done {
            pending[i] &= !what;
            if scnt < iters && pending[i] == 0 {
                post_send(i, &mut idle, &mut busy)?;
                pending[i] = SEND | RECV;
            }
        }
    }
    let elapsed = start.elapsed();
    check.print();
    // Sends still in flight (at most one per QP) and the receives left in the SRQ keep their
    // buffers until the QPs and the SRQ are destroyed.
    Ok(elapsed)
}

fn print_remote(peers: &[Endpoint]) {
    for p in peers {
        print_address("remote address:", p);
    }
}

fn main() -> ExitCode {
    pingpong::program("srq_pingpong", Tool::Srq, run)
}
