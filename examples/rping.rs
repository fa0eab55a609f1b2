//! `rping`: librdmacm's `rping` (rdma-core, package rdmacm-utils), written with this library,
//! and interoperable with the C tool in both roles: its command line, its wire protocol and
//! its output (`-v`: `ping data: ...` on the client, `server ping data: ...` on the server).
//!
//! An RC connection through the RDMA connection manager (`CmListener` / `CmId`), then, for
//! each ping:
//!
//! 1. the client fills its *start* buffer with the ping data (`"rdma-ping-N: "` and letters)
//!    and SENDs its advertisement (address, rkey, size: 16 bytes, big endian);
//! 2. the server RDMA READs the start buffer into its own and SENDs a go-ahead;
//! 3. the client SENDs the advertisement of its *sink* buffer;
//! 4. the server RDMA WRITEs what it read into the sink and SENDs a go-ahead;
//! 5. the client compares sink and start (`-V`) and prints the sink (`-v`).
//!
//! The client disconnects after `-C` pings (0: pings until stopped); the server serves until
//! the client disconnects, then disconnects too. The rights the types demand are the ones the
//! protocol needs: the start buffer lets the peer read (`REMOTE_READ`), the sink lets it write
//! (`REMOTE_WRITE`, hence `LOCAL_WRITE`), the server's buffer is local (`LOCAL_WRITE`: an RDMA
//! READ destination). Each side posts its receive before the peer can send: before `accept`
//! (server) and before `connect` (client), and posts it again as soon as a message is in,
//! before answering. Advertisements and go-aheads are inline SENDs.
//!
//! Unlike the C tool, every wait is bounded (`--timeout`, `--accept-timeout`), and a client
//! whose connection is refused (no server listening yet) tries again until `--timeout`. Exits
//! 0 on success, 1 on a failure, 2 for a bad command line.
//!
//! Usage: `rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]` or
//! `rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]`, and
//! `[--timeout SECS] [--accept-timeout SECS]` (`rping -h`). On a machine without RDMA
//! hardware: `scripts/softroce-run -- bash -c 'target/debug/examples/rping -s -a 192.0.2.1 -v &
//! sleep 2; rping -c -a 192.0.2.1 -v -V -C 5; wait'`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use typed_verbs::cm::{CmId, CmListener, ConnParam, Connection, PeerEnded};
use typed_verbs::owned::OwnedWaitError;
use typed_verbs::prelude::*;

#[path = "common/rping.rs"]
mod rping;

use rping::{c_str, fill_ping, Info, Options, Role, INFO_LEN};

type AppResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The receive buffer of one advertisement or go-ahead, and its posted receive.
type RecvBuf = Chunk<access::LocalRw>;
type PostedRecv = OwnedToken<RecvBuf>;

/// The C tool's queues: 16 sends, 2 receives, a CQ of 32 for both.
const SQ_DEPTH: u32 = 16;
const RQ_DEPTH: u32 = 2;

/// How often a wait for the peer's next message also looks for its disconnect.
const POLL_SLICE: Duration = Duration::from_millis(50);

macro_rules! debug {
    ($o:expr, $($arg:tt)*) => {
        if $o.debug {
            println!($($arg)*);
        }
    };
}

fn main() {
    // A bad command line exits with status 2, as the C tool's.
    let opts = rping::parse_args(std::env::args().skip(1)).unwrap_or_else(|e| e.exit());
    let result = match opts.role() {
        Role::Server => server(&opts),
        Role::Client => client(&opts),
    };
    if let Err(e) = result {
        let side = if opts.role() == Role::Server { "server" } else { "client" };
        eprintln!("rping {side} failed: {e}");
        std::process::exit(1);
    }
}

/// What both sides ask of the connection: as the C tool, one RDMA READ in flight each way,
/// 7 retries, and retrying forever after a receiver-not-ready NAK.
fn conn_param() -> ConnParam {
    ConnParam { responder_resources: 1, initiator_depth: 1, retry_count: 7, rnr_retry_count: 7, ..ConnParam::default() }
}

/// The device's context, a PD and the CQ: what both sides set up once the CM named the device.
struct Resources {
    _ctx: Context,
    pd: Pd,
    cq: Cq,
}

impl Resources {
    fn open(dev: Option<String>) -> typed_verbs::Result<Resources> {
        let dev = dev.ok_or(Error::DeviceNotFound { name: "(the connection's)".into(), available: vec![] })?;
        let ctx = Context::open(&dev)?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(2 * SQ_DEPTH)?;
        Ok(Resources { _ctx: ctx, pd, cq })
    }

    /// A new RC QP (in RESET) with the C tool's queue sizes; 16 bytes inline for the SENDs.
    fn qp(&self) -> typed_verbs::Result<Qp<RC, RESET>> {
        let caps = QpCaps {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: RQ_DEPTH,
            max_inline_data: INFO_LEN as u32,
            ..QpCaps::default()
        };
        self.pd.create_qp::<RC>(&QpConfig::new(&self.cq).caps(caps))
    }

    /// The buffer that receives the peer's 16-byte messages.
    fn recv_buf(&self) -> typed_verbs::Result<RecvBuf> {
        Ok(self.pd.alloc_mr(INFO_LEN, access::LOCAL_RW)?.into_chunks(INFO_LEN)?.remove(0))
    }
}

/// Posts the receive of the peer's next message on `qp` (in INIT, RTR or RTS).
fn post_recv<S: typed_verbs::transport::CanPostRecv>(qp: &Qp<RC, S>, buf: RecvBuf) -> typed_verbs::Result<PostedRecv> {
    qp.post_recv_owned(wr::Recv::new(buf)).map_err(|e| e.error)
}

/// The advertisement of `region` (where the peer may read or write, by its rights).
fn advertise<A>(region: RemoteSlice<A>) -> Info {
    Info { addr: region.addr(), rkey: region.rkey(), size: region.len() as u32 }
}

/// SENDs `msg` (an advertisement or a go-ahead, inline) and waits for its completion.
fn send_msg(conn: &Connection, msg: &[u8; INFO_LEN], timeout: Duration) -> typed_verbs::Result<()> {
    scope(|s| -> typed_verbs::Result<()> {
        let t = s.post_inline(conn.qp(), wr::InlineSend::new(msg)).map_err(|e| e.error)?;
        s.wait(t, timeout)?.0.ok()?;
        Ok(())
    })?
}

/// What came while waiting for the peer's next message.
enum Next {
    /// The message (its 16 bytes), and the receive posted again for the one after it.
    Message([u8; INFO_LEN], PostedRecv),
    /// The peer ended the connection; the receive is still posted.
    PeerEnded(PeerEnded, PostedRecv),
}

/// Waits at most `timeout` for the peer's next message (`what`), or for its disconnect. A
/// message is copied out and its buffer posted again at once, before this side answers.
fn next_message(conn: &Connection, mut recv: PostedRecv, timeout: Duration, what: &str) -> AppResult<Next> {
    let deadline = Instant::now() + timeout;
    loop {
        match recv.wait(POLL_SLICE) {
            Ok((c, buf)) => {
                let c = c.ok().map_err(|e| format!("{what}: {e}"))?;
                if c.byte_len() as usize != INFO_LEN {
                    return Err(format!("{what}: received bogus data, size {}", c.byte_len()).into());
                }
                let mut msg = [0u8; INFO_LEN];
                msg.copy_from_slice(buf.as_slice());
                return Ok(Next::Message(msg, post_recv(conn.qp(), buf)?));
            }
            Err(OwnedWaitError { error: Error::Timeout { .. }, token }) => recv = token,
            Err(e) => return Err(e.error.into()),
        }
        match conn.wait_disconnected(Duration::ZERO) {
            Ok(how) => return Ok(Next::PeerEnded(how, recv)),
            Err(Error::Timeout { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: nothing within {} s", timeout.as_secs()).into());
        }
    }
}

/// [`next_message`] where the peer must not end the connection.
fn expect_message(
    conn: &Connection,
    recv: PostedRecv,
    o: &Options,
    what: &str,
) -> AppResult<([u8; INFO_LEN], PostedRecv)> {
    match next_message(conn, recv, o.timeout, what)? {
        Next::Message(msg, recv) => Ok((msg, recv)),
        Next::PeerEnded(how, _) => {
            Err(format!("the peer ended the connection ({how:?}) while waiting for {what}").into())
        }
    }
}

/// Disconnects, and collects the receive still posted (flushed by the disconnect).
fn finish(conn: Connection, recv: PostedRecv, timeout: Duration) -> AppResult<()> {
    let _qp = conn.disconnect()?;
    let (c, _buf) = recv.wait(timeout).map_err(|e| e.error)?;
    if c.status() != WcStatus::WrFlushErr {
        return Err(format!("the last receive completed with {:?}, not flushed by the disconnect", c.status()).into());
    }
    Ok(())
}

// --- server ----------------------------------------------------------------------------------

fn server(o: &Options) -> AppResult<()> {
    let addr = SocketAddr::new(o.addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), o.port);
    let listener = CmListener::bind(addr, 3)?;
    debug!(o, "rdma_listen on {addr}");
    let req = listener.next_request(o.accept_timeout)?;
    let res = Resources::open(req.device_name())?;
    // The RDMA READ destination, then the RDMA WRITE source: the peer never names it.
    let mut buf = res.pd.alloc_mr(o.size, access::LOCAL_RW)?;
    // Nobody reads or writes the server's memory: its QP grants the peer nothing.
    let accepting = req.prepare(res.qp()?, Access::NONE, conn_param())?;
    // The client sends its first advertisement as soon as it is connected.
    let mut recv = post_recv(accepting.qp(), res.recv_buf()?)?;
    let conn = accepting.accept(o.timeout)?;
    debug!(o, "accepted the connection request");

    let mut ping = 0u64;
    loop {
        // The client's start buffer, or its disconnect after its last ping.
        let (msg, posted) = match next_message(&conn, recv, o.timeout, "the client's start advertisement")? {
            Next::Message(msg, posted) => (msg, posted),
            Next::PeerEnded(PeerEnded::Disconnected, posted) => {
                eprintln!("server DISCONNECT EVENT...");
                debug!(o, "served {ping} pings");
                return finish(conn, posted, o.timeout);
            }
            Next::PeerEnded(how, _) => return Err(format!("the client ended the connection: {how:?}").into()),
        };
        recv = posted;
        let src = Info::decode(&msg)?;
        debug!(o, "Received rkey {:x} addr {:x} len {} from peer", src.rkey, src.addr, src.size);
        let len = src.size as usize;
        if len > buf.len() {
            return Err(format!("the client's {len} bytes do not fit this server's {} (-S)", buf.len()).into());
        }
        // RDMA READ the ping data. The client's rkey grants REMOTE_READ (its word for it: a
        // false claim fails at the client's device, it cannot corrupt this side).
        let start = RemoteSlice::<access::RemoteReadOnly>::from_wire(src.addr, len as u64, src.rkey);
        scope(|s| -> typed_verbs::Result<()> {
            let t = s.post_send(conn.qp(), wr::Read::new(buf.slice_mut(..len)?, start)).map_err(|e| e.error)?;
            s.wait(t, o.timeout)?.0.ok()?;
            Ok(())
        })??;
        let echo_len = (c_str(buf.as_slice()).len() + 1).min(buf.len());
        if o.verbose {
            println!("server ping data: {}", String::from_utf8_lossy(c_str(buf.as_slice())));
        }
        send_msg(&conn, &[0; INFO_LEN], o.timeout)?; // go ahead

        // The client's sink buffer: RDMA WRITE the data back into it.
        let (msg, posted) = expect_message(&conn, recv, o, "the client's sink advertisement")?;
        recv = posted;
        let sink = Info::decode(&msg)?;
        debug!(o, "Received rkey {:x} addr {:x} len {} from peer", sink.rkey, sink.addr, sink.size);
        if echo_len > sink.size as usize {
            return Err(
                format!("the client's sink of {} bytes is smaller than the {echo_len} to echo", sink.size).into()
            );
        }
        let sink = RemoteSlice::<access::LocalRemoteWrite>::from_wire(sink.addr, echo_len as u64, sink.rkey);
        scope(|s| -> typed_verbs::Result<()> {
            let t = s.post_send(conn.qp(), wr::Write::new(buf.slice(..echo_len)?, sink)).map_err(|e| e.error)?;
            s.wait(t, o.timeout)?.0.ok()?;
            Ok(())
        })??;
        debug!(o, "server rdma write complete");
        send_msg(&conn, &[0; INFO_LEN], o.timeout)?; // go ahead
        ping += 1;
    }
}

// --- client ----------------------------------------------------------------------------------

fn client(o: &Options) -> AppResult<()> {
    let dst = SocketAddr::new(o.addr.expect("the command line requires -a for the client"), o.port);
    let src = o.source.map(|ip| SocketAddr::new(ip, 0));
    let resolve =
        || -> typed_verbs::Result<_> { CmId::new()?.resolve_addr(src, dst, o.timeout)?.resolve_route(o.timeout) };
    let mut id = resolve()?;
    let res = Resources::open(id.device_name())?;
    // The start buffer: the server RDMA READs it; the program writes it (no peer can).
    let mut start = res.pd.alloc_mr(o.size, access::REMOTE_READ_ONLY)?;
    // The sink: the server RDMA WRITEs into it (REMOTE_WRITE needs LOCAL_WRITE).
    let mut sink = res.pd.alloc_mr(o.size, access::LOCAL_REMOTE_WRITE)?;
    let mut recv_buf = res.recv_buf()?;

    // Connect, the receive posted first; a refused connection (no server listening yet) is
    // tried again, bounded by --timeout.
    let deadline = Instant::now() + o.timeout;
    let (conn, mut recv) = loop {
        let connecting = id.prepare(res.qp()?, Access::NONE.remote_write().remote_read())?;
        let recv = post_recv(connecting.qp(), recv_buf)?;
        match connecting.connect(&conn_param(), o.timeout) {
            Ok(conn) => break (conn, recv),
            Err(Error::Rejected { status, .. }) if Instant::now() < deadline => {
                debug!(o, "connection refused (status {status}); trying again");
                // The failed connect moved the QP to ERR: the receive comes back, flushed.
                recv_buf = recv.wait(o.timeout).map_err(|e| e.error)?.1;
                std::thread::sleep(Duration::from_millis(200));
                id = resolve()?;
            }
            Err(e) => return Err(e.into()),
        }
    };
    debug!(o, "rdma_connect successful");

    let (mut seen, zeros) = (vec![0u8; o.size], vec![0u8; o.size]);
    let mut ping = 0u64;
    while o.count == 0 || ping < o.count {
        fill_ping(start.as_mut_slice(), ping);
        // Cleared, so that -V sees what the server wrote, not the last ping's data.
        sink.write_volatile_from(0, &zeros)?;

        let info = advertise(start.remote(..)?);
        debug!(o, "RDMA addr {:x} rkey {:x} len {}", info.addr, info.rkey, info.size);
        send_msg(&conn, &info.encode(), o.timeout)?;
        // The go-ahead: the server has read the start buffer.
        recv = expect_message(&conn, recv, o, "the server's go-ahead after its RDMA READ")?.1;

        let info = advertise(sink.remote(..)?);
        debug!(o, "RDMA addr {:x} rkey {:x} len {}", info.addr, info.rkey, info.size);
        send_msg(&conn, &info.encode(), o.timeout)?;
        // The go-ahead: the server's RDMA WRITE into the sink is complete.
        recv = expect_message(&conn, recv, o, "the server's go-ahead after its RDMA WRITE")?.1;

        sink.read_volatile_into(0, &mut seen)?;
        if o.validate && seen != start.as_slice() {
            eprintln!("data mismatch!");
            return Err(format!("ping {ping}: the data written back differs from the data read").into());
        }
        if o.verbose {
            println!("ping data: {}", String::from_utf8_lossy(c_str(&seen)));
        }
        ping += 1;
    }
    finish(conn, recv, o.timeout)
}
