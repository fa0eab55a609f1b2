//! `ud_pingpong`: rdma-core's `ibv_ud_pingpong`, wire-compatible with it, on Unreliable
//! Datagram queue pairs. Either side may be the C tool.
//!
//! Same address exchange over TCP (port 18515) as `rc_pingpong`, then `-n` SENDs of `-s` bytes
//! each way. What UD changes:
//!
//! - there is no connection: each QP only moves INIT → RTR → RTS (with a Q_Key, here
//!   `ibv_ud_pingpong`'s 0x11111111), and every send names its destination: an address handle
//!   built from the peer's GID (or LID), the peer's QP number and its Q_Key
//!   (`wr::Send::new(buf).to(&ah, qpn, qkey)`);
//! - a message is one packet: `-s` must fit the port's active MTU (1024 on Soft-RoCE over
//!   veth), so the default size is 1024 and there is no `-m`;
//! - the receiver gets a 40-byte Global Route Header in front of the payload, so each receive
//!   buffer is 40 + `-s` bytes;
//! - nothing is retransmitted: a message that arrives with no receive posted is dropped. The
//!   receives are posted before the peer may send (in INIT, before the address exchange) and
//!   every wait is bounded by `--timeout`, so a lost message ends the run with an error rather
//!   than a hang.
//!
//! ```text
//! ud_pingpong -d rxe0 -g 1                      # server
//! ud_pingpong -d rxe0 -g 1 192.0.2.1            # client (or: ibv_ud_pingpong -d rxe0 -g 1 192.0.2.1)
//! ```
//!
//! The receive ring uses owned buffers (`Mr::into_chunks`, `Qp::post_recv_owned`): each chunk
//! moves into its receive and comes back with the completion, and is posted again. The
//! receives stay posted across the QP's state transitions, as in the C tool.

#[path = "common/pingpong.rs"]
mod pingpong;

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use typed_verbs::prelude::*;

use pingpong::{address_vector, print_address, Options, Tool};

/// The Q_Key of `ibv_ud_pingpong`, on both sides: a UD QP accepts only datagrams carrying its
/// own Q_Key.
const QKEY: u32 = 0x1111_1111;

/// Room for the Global Route Header at the start of every UD receive buffer (ibv_post_recv(3):
/// the first 40 bytes receive the GRH; the payload follows).
const GRH_LEN: usize = 40;

fn run(opts: &Options) -> Result<Duration, Box<dyn StdError>> {
    let ctx = pingpong::open(opts)?;
    let size = opts.size as usize;
    let mtu = ctx.query_port(opts.ib_port)?.active_mtu().map_or(0, Mtu::bytes);
    if opts.size > mtu {
        return Err(
            format!("requested size {size} larger than the port's MTU ({mtu}): a UD message is one packet").into()
        );
    }
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(opts.rx_depth + 1)?;
    let caps =
        QpCaps { max_send_wr: 1, max_recv_wr: opts.rx_depth, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = pd.create_qp::<UD>(&QpConfig::new(&cq).caps(caps))?;
    let qp = qp.to_init(&UdInit { port: opts.ib_port, pkey_index: 0, qkey: QKEY })?;

    // The receive ring: `-r` buffers of 40 + size bytes, posted now, in INIT.
    let mut check = pingpong::Check::new(opts, pingpong::FILL);
    let ring = pd.alloc_mr((GRH_LEN + size) * opts.rx_depth as usize, access::LOCAL_RW)?.into_chunks(GRH_LEN + size)?;
    let mut posted = VecDeque::with_capacity(ring.len());
    for mut chunk in ring {
        check.fill_recv(chunk.as_mut_slice());
        posted.push_back(qp.post_recv_owned(wr::Recv::new(chunk)).map_err(|e| e.error)?);
    }
    // The send buffer (the C tool sends the bytes after its receive buffer's GRH room).
    let mut send_mr = pd.alloc_mr(size, access::LOCAL_READ)?;
    check.fill_send(send_mr.as_mut_slice());
    let mut send_buf = send_mr.into_chunks(size)?.pop();

    let me = pingpong::local_endpoint(&ctx, &qp, opts)?;
    print_address("local address: ", &me);

    // UD needs no peer attributes to reach RTS; the C server does it once it has read the
    // client's address, the client once the exchange is over.
    let (peer, server_conn) = match &opts.server {
        Some(host) => (pingpong::client_exchange(host, opts.port, &me, opts.timeout, opts.timeout)?, None),
        None => {
            let listener = pingpong::Listener::bind(opts.port)?;
            println!("  waiting for a client on port {}", listener.port());
            let (conn, peer) = listener.accept(opts.accept_timeout, opts.timeout)?;
            (peer, Some(conn))
        }
    };
    print_address("remote address:", &peer);
    let qp = qp.to_rtr(&UdRtr)?.to_rts(&SqPsn { sq_psn: me.psn })?;
    // Where the datagrams go: a GRH towards the peer's GID (RoCE), or its LID (InfiniBand).
    let ah = pd.create_ah(&address_vector(opts, &peer))?;
    if let Some(conn) = server_conn {
        // The client sends its first message once it has read this.
        conn.finish(&me)?;
    }

    let wait = opts.timeout;
    let mut send = |i: u32| -> Result<(), Box<dyn StdError>> {
        let buf = send_buf.take().ok_or("the send buffer is in use")?;
        let token = qp.post_send_owned(wr::Send::new(buf).to(&ah, peer.qp_num, QKEY)).map_err(|e| e.error)?;
        let (c, buf) = token.wait(wait).map_err(|e| format!("send {i}: {}", e.error))?;
        send_buf = Some(buf);
        c.ok().map_err(|e| format!("send {i}: {e}"))?;
        Ok(())
    };
    let mut recv = |i: u32| -> Result<(), Box<dyn StdError>> {
        // One QP's receive queue completes in order: the oldest receive is the next one.
        let token = posted.pop_front().ok_or("no receive posted")?;
        let (c, mut chunk) = token.wait(wait).map_err(|e| format!("receive {i}: {}", e.error))?;
        c.ok().map_err(|e| format!("receive {i}: {e}"))?;
        // A UD receive's length counts the GRH room; the payload follows it.
        let byte_len = (c.byte_len() as usize).saturating_sub(GRH_LEN);
        check.received(u64::from(i), byte_len, &chunk.as_slice()[GRH_LEN..])?;
        // The buffer goes straight back into the ring.
        check.fill_recv(chunk.as_mut_slice());
        posted.push_back(qp.post_recv_owned(wr::Recv::new(chunk)).map_err(|e| e.error)?);
        Ok(())
    };

    // The client sends first; each side sends its next message once its previous send has
    // completed and the peer's message has arrived.
    let start = Instant::now();
    for i in 1..=opts.iters {
        if opts.server.is_some() {
            send(i)?;
            recv(i)?;
        } else {
            recv(i)?;
            send(i)?;
        }
    }
    let elapsed = start.elapsed();
    check.print();
    // The receives still posted are flushed when the QP is destroyed; their buffers stay with
    // the QP until then (dropped owned tokens).
    Ok(elapsed)
}

fn main() -> ExitCode {
    pingpong::program("ud_pingpong", Tool::Ud, run)
}
