//! `async_echo`: an RC echo server and a client on tokio, with owned buffers awaited as
//! futures (`tokio` feature).
//!
//! The server accepts `--connections` connections (the RDMA connection manager's async
//! accept) and echoes every message back on its connection. The client opens `--connections`
//! connections at once and keeps `--depth` requests in flight on each (16 by default): each
//! request is a receive posted for the reply and a SEND of a message naming the connection and
//! the request, both owned chunks, awaited by a task of their own. Every reply is checked
//! against the messages sent (the replies of a connection are those messages, each once); the
//! client exits non-zero on any failure or mismatch, as the server does on any failure.
//!
//! ```text
//! async_echo server -s 192.0.2.1 --connections 4              # server
//! async_echo client -s 192.0.2.1 --connections 4 -n 256       # client
//! ```
//!
//! The completion queues report to a completion channel (`create_cq_with_channel`), which is
//! what lets a future sleep until its request completes: nothing spins while a task waits.
//! Without RDMA hardware, both ends run in the Soft-RoCE VM (`scripts/softroce-run`; the
//! address is rxe0's, e.g. the one `rping` uses).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::timeout;
use typed_verbs::cm::{CmId, CmListener, ConnParam, Connection};
use typed_verbs::mr::Chunk;
use typed_verbs::owned::OwnedToken;
use typed_verbs::prelude::*;

/// An async RC echo server and client over owned, awaited work requests.
#[derive(clap::Parser)]
struct Options {
    #[command(subcommand)]
    role: Role,
}

#[derive(clap::Subcommand)]
enum Role {
    /// Accept `--connections` connections and echo every message on each.
    Server(Common),
    /// Open `--connections` connections and send `-n` messages on each, `--depth` at a time.
    Client {
        #[command(flatten)]
        common: Common,
        /// messages per connection
        #[arg(short = 'n', long, default_value_t = 256)]
        messages: usize,
    },
}

#[derive(clap::Args, Clone)]
struct Common {
    /// the address to listen on (server) or to connect to (client): the RDMA device's
    #[arg(short = 's', long)]
    addr: IpAddr,
    /// the port (RDMA CM port space)
    #[arg(short = 'p', long, default_value_t = 7472)]
    port: u16,
    /// connections to serve (server) or to open (client)
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// requests in flight per connection
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// message size in bytes (at least 8)
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(8..=4096))]
    size: u32,
    /// the bound of the whole run, in seconds
    #[arg(short = 't', long, default_value = "120", value_parser = |s: &str| s.parse().map(Duration::from_secs))]
    timeout: Duration,
}

fn main() -> ExitCode {
    let opts = <Options as clap::Parser>::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("async_echo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (name, bound, run) = match opts.role {
        Role::Server(c) => ("server", c.timeout, rt.spawn(server(c))),
        Role::Client { common, messages } => ("client", common.timeout, rt.spawn(client(common, messages))),
    };
    let outcome = rt.block_on(async { timeout(bound, run).await });
    let result = match outcome {
        Err(_) => Err(format!("not done after {bound:?}")),
        Ok(Err(joined)) => Err(format!("the task failed: {joined}")),
        Ok(Ok(r)) => r,
    };
    // Tasks still waiting are dropped with the runtime: their buffers stay with the library.
    rt.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(summary) => {
            println!("async_echo: {name}: {summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("async_echo: {name}: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

type Buf = Chunk<access::LocalRw>;

/// What one connection needs: a PD, a CQ on a completion channel, an RC QP in RESET.
struct Resources {
    _ctx: Context,
    pd: Pd,
    _channel: CompChannel,
    _cq: Cq,
    qp: Qp<RC, RESET>,
}

fn resources(device: &str, depth: usize) -> typed_verbs::Result<Resources> {
    let ctx = Context::open(device)?;
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    let depth = depth as u32;
    let cq = ctx.create_cq_with_channel(4 * depth, &channel)?;
    let caps = QpCaps { max_send_wr: depth, max_recv_wr: depth, ..QpCaps::default() };
    let qp = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    Ok(Resources { _ctx: ctx, pd, _channel: channel, _cq: cq, qp })
}

/// `n` owned buffers of `size` bytes, one region.
fn buffers(pd: &Pd, n: usize, size: u32) -> typed_verbs::Result<Vec<Buf>> {
    pd.alloc_mr(n * size as usize, access::LOCAL_RW)?.into_chunks(size as usize)
}

/// A request's message: its connection and number, then bytes derived from both.
fn fill(buf: &mut Buf, conn: u32, seq: u32) {
    let bytes = buf.as_mut_slice();
    bytes[..4].copy_from_slice(&conn.to_le_bytes());
    bytes[4..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in bytes[8..].iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(7).wrapping_add(conn * 31 + seq) as u8;
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

// --- server ------------------------------------------------------------------------------------

async fn server(c: Common) -> Result<String, String> {
    let listener = CmListener::bind(SocketAddr::new(c.addr, c.port), c.connections as u16).map_err(err)?;
    println!("async_echo: server listening on {}:{}", c.addr, listener.port());
    let mut conns = JoinSet::new();
    for i in 0..c.connections {
        let req = listener.next_request_async().await.map_err(err)?;
        let device = req.device_name().ok_or("the request names no device")?;
        let res = resources(&device, c.depth).map_err(err)?;
        let accepting = req.prepare(res.qp, Access::NONE, ConnParam::default()).map_err(err)?;
        // The client sends once connected: every receive is posted before the accept.
        let mut receives = Vec::new();
        for buf in buffers(&res.pd, c.depth, c.size).map_err(err)? {
            receives.push(accepting.qp().post_recv_owned(wr::Recv::new(buf)).map_err(|e| err(e.error))?);
        }
        let conn = accepting.accept_async().await.map_err(err)?;
        let sends = buffers(&res.pd, c.depth, c.size).map_err(err)?;
        conns.spawn(async move {
            let echoed = echo(conn, receives, sends).await;
            drop((res._cq, res._channel, res.pd, res._ctx));
            echoed.map(|n| (i, n))
        });
    }
    let mut total = 0;
    while let Some(joined) = conns.join_next().await {
        let (i, n) = joined.map_err(err)??;
        println!("async_echo: server: connection {i}: {n} messages echoed");
        total += n;
    }
    Ok(format!("{} connections, {total} messages echoed", c.connections))
}

/// What one of a connection's tasks finished.
enum Done {
    Received(std::result::Result<(Completion, Buf), String>),
    Sent(std::result::Result<(Completion, Buf), String>),
}

async fn recv_task(t: OwnedToken<Buf>) -> Done {
    Done::Received(t.await.map_err(|e| err(e.error)))
}

/// Echoes every message on `conn` until the peer disconnects, then ends the connection: the
/// receives still posted come back flushed. Each receive and each echo is awaited by a task of
/// its own; the buffers circulate. Returns how many messages were echoed.
async fn echo(conn: Connection, receives: Vec<OwnedToken<Buf>>, mut free: Vec<Buf>) -> Result<usize, String> {
    let mut tasks = JoinSet::new();
    for t in receives {
        tasks.spawn(recv_task(t));
    }
    let mut echoed = 0;
    let mut backlog = std::collections::VecDeque::new();
    loop {
        let joined = tokio::select! {
            joined = tasks.join_next() => joined.ok_or("no receive posted")?,
            // The client disconnects once it has every reply.
            ended = conn.wait_disconnected_async() => {
                ended.map_err(err)?;
                break;
            }
        };
        match joined.map_err(err)? {
            Done::Received(got) => {
                let (c, buf) = got?;
                c.ok().map_err(err)?;
                backlog.push_back(buf);
            }
            Done::Sent(got) => {
                let (c, buf) = got?;
                c.ok().map_err(err)?;
                free.push(buf);
                echoed += 1;
            }
        }
        // Echo what was received, as far as send buffers are free (at most the queue's depth
        // of echoes in flight); each receive buffer is posted again once copied.
        while let (Some(_), Some(_)) = (backlog.front(), free.last()) {
            let (Some(buf), Some(mut out)) = (backlog.pop_front(), free.pop()) else { break };
            out.as_mut_slice().copy_from_slice(buf.as_slice());
            let t = conn.qp().post_send_owned(wr::Send::new(out)).map_err(|e| err(e.error))?;
            tasks.spawn(async move { Done::Sent(t.await.map_err(|e| err(e.error))) });
            let again = conn.qp().post_recv_owned(wr::Recv::new(buf)).map_err(|e| err(e.error))?;
            tasks.spawn(recv_task(again));
        }
    }
    // The QP moves to ERR: what is still posted completes (flushed) and comes back.
    let _qp = conn.disconnect().map_err(err)?;
    while let Some(joined) = tasks.join_next().await {
        if let Done::Sent(Ok((c, _))) = joined.map_err(err)? {
            echoed += usize::from(c.is_success());
        }
    }
    Ok(echoed)
}

// --- client ------------------------------------------------------------------------------------

async fn client(c: Common, messages: usize) -> Result<String, String> {
    let to = SocketAddr::new(c.addr, c.port);
    let mut conns = JoinSet::new();
    for i in 0..c.connections {
        let c = c.clone();
        conns.spawn(async move { one_connection(&c, i as u32, to, messages).await.map(|n| (i, n)) });
    }
    let mut total = 0;
    while let Some(joined) = conns.join_next().await {
        let (i, n) = joined.map_err(err)??;
        println!("async_echo: client: connection {i}: {n} replies verified");
        total += n;
    }
    Ok(format!("{} connections, {total} replies verified", c.connections))
}

/// Connects (retrying while the server is not listening yet), sends `messages` messages with
/// `depth` in flight, checks the replies, disconnects. Returns how many replies were verified.
async fn one_connection(c: &Common, id: u32, to: SocketAddr, messages: usize) -> Result<usize, String> {
    let (conn, res) = connect(c, to).await?;
    let mut recv_bufs = buffers(&res.pd, c.depth, c.size).map_err(err)?;
    let mut send_bufs = buffers(&res.pd, c.depth, c.size).map_err(err)?;
    // Every message sent, by number, until its reply is seen.
    let mut expected: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut tasks = JoinSet::new();
    let (mut next, mut verified) = (0u32, 0usize);
    loop {
        while (next as usize) < messages && !send_bufs.is_empty() {
            let (Some(rbuf), Some(mut sbuf)) = (recv_bufs.pop(), send_bufs.pop()) else { break };
            fill(&mut sbuf, id, next);
            expected.insert(next, sbuf.as_slice().to_vec());
            next += 1;
            // The reply's receive first: it must be posted before the echo can arrive.
            let recv = conn.qp().post_recv_owned(wr::Recv::new(rbuf)).map_err(|e| err(e.error))?;
            let send = conn.qp().post_send_owned(wr::Send::new(sbuf)).map_err(|e| err(e.error))?;
            tasks.spawn(async move {
                let sent = send.await.map_err(|e| err(e.error))?;
                let got = recv.await.map_err(|e| err(e.error))?;
                Ok::<_, String>((sent, got))
            });
        }
        let Some(joined) = tasks.join_next().await else { break };
        let ((sc, sbuf), (rc, rbuf)) = joined.map_err(err)??;
        sc.ok().map_err(err)?;
        rc.ok().map_err(err)?;
        // Replies come in the server's order: this receive holds some request's reply. Its
        // length is the peer's word: checked, never trusted to slice with.
        let reply = rbuf
            .as_slice()
            .get(..rc.byte_len() as usize)
            .filter(|r| r.len() >= 8)
            .ok_or_else(|| format!("connection {id}: a reply of {} bytes", rc.byte_len()))?;
        let seq = u32::from_le_bytes(reply[4..8].try_into().map_err(err)?);
        let conn_of = u32::from_le_bytes(reply[..4].try_into().map_err(err)?);
        match expected.remove(&seq) {
            Some(sent) if conn_of == id && sent == reply => verified += 1,
            Some(_) => return Err(format!("connection {id}: the reply to request {seq} differs from the request")),
            None => return Err(format!("connection {id}: a reply to request {seq}, unknown or answered twice")),
        }
        recv_bufs.push(rbuf);
        send_bufs.push(sbuf);
    }
    if !expected.is_empty() || verified != messages {
        return Err(format!("connection {id}: {verified} of {messages} replies, {} missing", expected.len()));
    }
    conn.disconnect().map_err(err)?;
    drop(res);
    Ok(verified)
}

/// What the client keeps for a connection besides the `Connection`.
struct ClientSide {
    _ctx: Context,
    pd: Pd,
    _channel: CompChannel,
    _cq: Cq,
}

async fn connect(c: &Common, to: SocketAddr) -> Result<(Connection, ClientSide), String> {
    let mut tries = 0;
    loop {
        let id = CmId::new().map_err(err)?;
        let id = id.resolve_addr_async(None, to, c.timeout).await.map_err(err)?;
        let id = id.resolve_route_async(c.timeout).await.map_err(err)?;
        let device = id.device_name().ok_or("the route names no device")?;
        let res = resources(&device, c.depth).map_err(err)?;
        match id.connect_async(res.qp, Access::NONE, &ConnParam::default()).await {
            Ok(conn) => {
                let side = ClientSide { _ctx: res._ctx, pd: res.pd, _channel: res._channel, _cq: res._cq };
                return Ok((conn, side));
            }
            // The server may not listen yet: a refused connect is retried, bounded.
            Err(e) if tries < 50 => {
                tries += 1;
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("connecting to {to}: {e}")),
        }
    }
}
