//! `udaddy`: librdmacm's `udaddy` example (rdma-core), written with this library, and
//! interoperable with the C tool in both roles.
//!
//! UD through the RDMA connection manager (port space `RDMA_PS_UDP`): the client resolves the
//! server's IP address and route, readies a UD QP with the CM's Q_Key, posts its receives and
//! asks the server's service for its QP number and Q_Key (`CmId::resolve_peer`, a SIDR
//! exchange), which gives it an address handle. It then sends `-C` datagrams of `-S` bytes,
//! each SEND_WITH_IMM carrying its own QP number, and waits for as many replies. The server
//! (`CmListener::bind_ud`) readies a UD QP per request, posts its receives and accepts
//! (`ConnRequest::accept`, which tells the client the QP number and Q_Key); it learns where
//! each client is from its first datagram (an address handle from the completion and the
//! datagram's GRH, `Pd::create_ah_from_wc`; the QP number from the immediate data) and
//! answers with as many datagrams.
//!
//! The server prints `udaddy: starting server` once it listens (the C tool, just before).
//!
//! Usage, as the C tool: `udaddy [-s server_address] [-b bind_address] [-c connections]
//! [-C message_count] [-S message_size]`, and two options of this program: `--port PORT` (the
//! C tool's port is always 7174) and `--timeout SECS` (the bound of every wait, 60 s). Prints
//! the C tool's progress lines and `return status N`; exits with that status.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use typed_verbs::ah::GrhBytes;
use typed_verbs::cm::{CmId, CmListener};
use typed_verbs::owned::OwnedToken;
use typed_verbs::prelude::*;

/// What every step returns: a verbs error, or the tool's own complaint.
type R<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The room for the Global Route Header at the start of every UD receive buffer.
const GRH_LEN: usize = 40;

/// The C tool's fixed port.
const UDADDY_PORT: u16 = 7174;

/// librdmacm's udaddy, written with typed-verbs: UD datagrams through the RDMA connection
/// manager.
#[derive(clap::Parser)]
#[command(args_override_self = true)]
struct Options {
    /// the server to connect to; a server without it
    #[arg(short = 's', value_name = "server_address")]
    server: Option<IpAddr>,
    /// the local address to bind to (the server's listening address)
    #[arg(short = 'b', value_name = "bind_address")]
    bind: Option<IpAddr>,
    /// connections (at least 1)
    #[arg(short = 'c', value_name = "connections", default_value_t = 1,
          value_parser = |s: &str| s.parse::<usize>().map(|n| n.max(1)))]
    connections: usize,
    /// datagrams each way per connection
    #[arg(short = 'C', value_name = "message_count", default_value_t = 10)]
    count: usize,
    /// bytes per datagram
    #[arg(short = 'S', value_name = "message_size", default_value_t = 100)]
    size: usize,
    /// the port (the C tool's is always 7174)
    #[arg(long, default_value_t = UDADDY_PORT)]
    port: u16,
    /// the bound of every wait, in seconds
    #[arg(long, value_name = "secs", default_value = "60", value_parser = |s: &str| s.parse().map(Duration::from_secs))]
    timeout: Duration,
}

fn main() -> ExitCode {
    let opts = <Options as clap::Parser>::try_parse().unwrap_or_else(|e| {
        // Status 1 for a bad command line, as the C tool's (clap's is 2); 0 for --help.
        let _ = e.print();
        std::process::exit(if e.use_stderr() { 1 } else { 0 });
    });
    let r = match opts.server {
        Some(server) => client(&opts, server),
        None => server(&opts),
    };
    println!("test complete");
    let status = match r {
        Ok(()) => 0,
        Err(e) => {
            println!("udaddy: {e}");
            1
        }
    };
    println!("return status {status}");
    ExitCode::from(status)
}

/// One connection's verbs objects: a UD QP readied by the CM on the request's or route's
/// device, and its receive buffers.
struct Node {
    pd: Pd,
    qp: Qp<UD, RTS>,
    _cq: Cq,
    _ctx: Context,
    /// The posted receives, one buffer each (`-S` bytes after the GRH).
    recvs: Vec<OwnedToken<Chunk<access::LocalRw>>>,
}

impl Node {
    /// A context, PD, CQ and UD QP on `device` (in RESET), checking that `-S` fits the
    /// port's MTU as the C tool does.
    fn create(device: &str, port: u8, opts: &Options) -> R<(Context, Pd, Cq, Qp<UD, RESET>)> {
        let ctx = Context::open(device)?;
        let mtu = ctx.query_port(port)?.active_mtu().map_or(0, Mtu::bytes) as usize;
        if opts.count > 0 && opts.size > mtu {
            return Err(format!("message_size {} is larger than active mtu {mtu}", opts.size).into());
        }
        let pd = ctx.alloc_pd()?;
        let depth = opts.count.max(1) as u32;
        let cq = ctx.create_cq(2 * depth)?;
        let caps = QpCaps { max_send_wr: depth, max_recv_wr: depth, ..QpCaps::default() };
        let qp = pd.create_qp::<UD>(&QpConfig::new(&cq).caps(caps))?;
        Ok((ctx, pd, cq, qp))
    }

    /// Posts `-C` receives of GRH + `-S` bytes.
    fn post_recvs(qp: &Qp<UD, RTS>, pd: &Pd, opts: &Options) -> R<Vec<OwnedToken<Chunk<access::LocalRw>>>> {
        if opts.count == 0 {
            return Ok(Vec::new());
        }
        let len = GRH_LEN + opts.size;
        let chunks = pd.alloc_mr(len * opts.count, access::LOCAL_RW)?.into_chunks(len)?;
        Ok(chunks
            .into_iter()
            .map(|c| qp.post_recv_owned(wr::Recv::new(c)).map_err(|e| e.error))
            .collect::<Result<_>>()?)
    }

    /// Waits for every posted receive; the first one's completion and GRH.
    fn receive_all(&mut self, opts: &Options) -> R<Option<(Completion, GrhBytes)>> {
        let mut first = None;
        for token in self.recvs.drain(..) {
            let (c, chunk) = token.wait(opts.timeout).map_err(|e| e.error)?;
            c.ok()?;
            if first.is_none() {
                let grh: GrhBytes = chunk.as_slice()[..GRH_LEN].try_into().expect("40 bytes");
                first = Some((c, grh));
            }
        }
        Ok(first)
    }

    /// Sends `-C` SEND_WITH_IMM datagrams of `-S` bytes to `(ah, qpn, qkey)`, each carrying this
    /// QP's number, and waits for their completions.
    fn send_all(&self, ah: &Ah, qpn: u32, qkey: u32, opts: &Options) -> R<()> {
        if opts.count == 0 {
            return Ok(());
        }
        let mut src = self.pd.alloc_mr(opts.size.max(1), access::LOCAL_RW)?;
        src.as_mut_slice().fill(0x5a);
        let me = self.qp.qp_num();
        scope(|s| -> Result<()> {
            let mut tokens = Vec::with_capacity(opts.count);
            for _ in 0..opts.count {
                let wr = wr::SendImm::new(src.slice(..opts.size)?, me).to(ah, qpn, qkey);
                tokens.push(s.post_send(&self.qp, wr).map_err(|e| e.error)?);
            }
            for t in tokens {
                s.wait(t, opts.timeout)?.0.ok()?;
            }
            Ok(())
        })??;
        Ok(())
    }
}

fn server(opts: &Options) -> R<()> {
    let addr = opts.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let listener = CmListener::bind_ud(SocketAddr::new(addr, opts.port), 0)?;
    // Printed once it listens (the C tool prints it just before), so a client started after it
    // finds the service.
    println!("udaddy: starting server");
    let mut nodes = Vec::new();
    for _ in 0..opts.connections {
        let req = listener.next_request(opts.timeout)?;
        let device = req.device_name().ok_or("a request on no device")?;
        let (ctx, pd, cq, qp) = Node::create(&device, req.port_num(), opts)?;
        let qp = req.ready_qp(qp)?;
        let qkey = req.qkey()?;
        let recvs = Node::post_recvs(&qp, &pd, opts)?;
        let port = req.port_num();
        req.accept(&qp, &[])?;
        nodes.push((Node { pd, qp, _cq: cq, _ctx: ctx, recvs }, qkey, port));
    }
    if opts.count > 0 {
        println!("receiving data transfers");
        let mut replies = Vec::new();
        for (node, qkey, port) in &mut nodes {
            let (c, grh) = node.receive_all(opts)?.ok_or("no datagram")?;
            // The client's address from its first datagram, its QP number from the immediate.
            let ah = node.pd.create_ah_from_wc(*port, &c, &grh)?;
            let qpn = c.imm().ok_or("a datagram without immediate data")?;
            replies.push((ah, qpn, *qkey));
        }
        println!("sending replies");
        for ((node, ..), (ah, qpn, qkey)) in nodes.iter().zip(&replies) {
            node.send_all(ah, *qpn, *qkey, opts)?;
        }
        println!("data transfers complete");
    }
    Ok(())
}

fn client(opts: &Options, server: IpAddr) -> R<()> {
    println!("udaddy: starting client");
    println!("udaddy: connecting");
    let mut nodes = Vec::new();
    for _ in 0..opts.connections {
        let id = CmId::new_ud()?
            .resolve_addr(
                opts.bind.map(|a| SocketAddr::new(a, 0)),
                SocketAddr::new(server, opts.port),
                Duration::from_secs(2),
            )?
            .resolve_route(Duration::from_secs(2))?;
        let device = id.device_name().ok_or("a route on no device")?;
        let (ctx, pd, cq, qp) = Node::create(&device, id.port_num(), opts)?;
        let qp = id.ready_qp(qp)?;
        let recvs = Node::post_recvs(&qp, &pd, opts)?;
        let peer = id.resolve_peer(&pd, &[], opts.timeout)?;
        nodes.push((Node { pd, qp, _cq: cq, _ctx: ctx, recvs }, peer));
    }
    if opts.count > 0 {
        println!("initiating data transfers");
        for (node, peer) in &nodes {
            node.send_all(peer.ah(), peer.qp_num(), peer.qkey(), opts)?;
        }
        println!("receiving data transfers");
        for (node, _) in &mut nodes {
            node.receive_all(opts)?;
        }
        println!("data transfers complete");
    }
    Ok(())
}
