//! What the pingpong examples share: the command line, the connection exchange of rdma-core's
//! `ibv_*_pingpong` tools (wire format and TCP protocol), and the ping-pong loop, which is the
//! same for every connected transport (RC, UC). `ud_pingpong` and `srq_pingpong` have loops of
//! their own and use the rest.
//!
//! The exchange, as rdma-core's `libibverbs/examples/*_pingpong.c` do it (TCP port 18515 by
//! default):
//!
//! 1. the client connects and writes its 52-byte address message;
//! 2. the server reads it, moves its QP to RTR and RTS towards the client, then writes its own
//!    52 bytes;
//! 3. the client reads them and writes `"done\0"` (5 bytes), which the server reads; both close
//!    the connection and the client moves its QP to RTR and RTS.
//!
//! The address message is `printf("%04x:%06x:%06x:%s", lid, qpn, psn, gid)` plus its NUL:
//! 51 characters and a terminating zero byte, where `gid` is the 16 bytes of the GID in
//! network order as 32 lowercase hex digits (rdma-core's `gid_to_wire_gid`).
//!
//! `ibv_srq_pingpong` sends a fixed 256 such messages each way (one per possible QP, unused
//! ones all zeros) before `"done\0"`: [`client_exchange_all`], [`Listener::accept_all`],
//! [`ServerConn::finish_all`].
//!
//! Then the client sends first; each side posts its next SEND once its previous SEND has
//! completed and a message from the peer has arrived, until both have sent and received
//! `iters` messages of `size` bytes.

// Each example uses a part of this module (`ud_pingpong` has no path MTU, only
// `srq_pingpong` exchanges many addresses).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use typed_verbs::device::LinkLayer;
use typed_verbs::prelude::*;
use typed_verbs::qp::{PeerPath, Transitions};
use typed_verbs::transport::{SupportsSend, Unaddressed};

/// The length of the address message on the wire, NUL included.
pub const WIRE_LEN: usize = 52;

/// What the client writes after reading the server's address (`sizeof "done"`).
pub const DONE: &[u8; 5] = b"done\0";

/// The default TCP port of the rdma-core pingpong tools.
pub const DEFAULT_PORT: u16 = 18515;

// --- wire format ----------------------------------------------------------------------------

/// A malformed address message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed pingpong address message: {}", self.0)
    }
}

impl std::error::Error for WireError {}

/// Encodes `ep` as the 52-byte message (`"%04x:%06x:%06x:%s"` and a NUL).
pub fn encode(ep: &Endpoint) -> [u8; WIRE_LEN] {
    let mut text = format!("{:04x}:{:06x}:{:06x}:", ep.lid, ep.qp_num & 0xff_ffff, ep.psn & 0xff_ffff);
    for b in ep.gid.0 {
        text.push_str(&format!("{b:02x}"));
    }
    let mut out = [0u8; WIRE_LEN];
    out[..WIRE_LEN - 1].copy_from_slice(text.as_bytes());
    out
}

fn hex_field(msg: &[u8], start: usize, len: usize, what: &str) -> Result<u32, WireError> {
    let field = &msg[start..start + len];
    let mut v: u32 = 0;
    for &c in field {
        let d = (c as char).to_digit(16).ok_or_else(|| {
            WireError(format!(
                "{what} must be {len} hex digits at offset {start}, found {:?}",
                String::from_utf8_lossy(field)
            ))
        })?;
        v = (v << 4) | d;
    }
    Ok(v)
}

/// Parses a 52-byte address message. Strict: exactly 52 bytes, fields of exactly 4, 6, 6 and
/// 32 hex digits (either case) separated by `:`, then the NUL.
///
/// # Errors
/// [`WireError`] describing the first thing that is wrong.
pub fn parse(msg: &[u8]) -> Result<Endpoint, WireError> {
    if msg.len() != WIRE_LEN {
        return Err(WireError(format!("expected {WIRE_LEN} bytes, got {}", msg.len())));
    }
    for (pos, what) in [(4, "LID"), (11, "QPN"), (18, "PSN")] {
        if msg[pos] != b':' {
            return Err(WireError(format!(
                "expected ':' after the {what} at offset {pos}, found {:?}",
                msg[pos] as char
            )));
        }
    }
    if msg[WIRE_LEN - 1] != 0 {
        return Err(WireError(format!(
            "expected a NUL terminator at offset {}, found {:?}",
            WIRE_LEN - 1,
            msg[WIRE_LEN - 1] as char
        )));
    }
    let lid = hex_field(msg, 0, 4, "the LID")?;
    let qp_num = hex_field(msg, 5, 6, "the QPN")?;
    let psn = hex_field(msg, 12, 6, "the PSN")?;
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        // Each byte is two hex digits; report the whole GID field when one is bad.
        let v = hex_field(msg, 19 + 2 * i, 2, "each GID byte").map_err(|_| {
            WireError(format!(
                "the GID must be 32 hex digits at offset 19, found {:?}",
                String::from_utf8_lossy(&msg[19..WIRE_LEN - 1])
            ))
        })?;
        *b = v as u8;
    }
    Ok(Endpoint { lid: lid as u16, qp_num, psn, gid: Gid(gid) })
}

// --- TCP exchange ---------------------------------------------------------------------------

fn timed_out(what: &str, after: Duration) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what}: no answer within {} s", after.as_secs_f64()))
}

fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Client side of the exchange: connects to `host:port` (retrying until `connect_timeout`, so
/// the server may start later), writes `me`, reads the server's address, writes `"done\0"`.
/// Every read and write is bounded by `io_timeout`.
///
/// # Errors
/// The connection failed for `connect_timeout`, an I/O error or timeout, or a malformed reply.
pub fn client_exchange(
    host: &str,
    port: u16,
    me: &Endpoint,
    connect_timeout: Duration,
    io_timeout: Duration,
) -> Result<Endpoint, Box<dyn std::error::Error>> {
    let peers = client_exchange_all(host, port, std::slice::from_ref(me), connect_timeout, io_timeout)?;
    Ok(peers[0])
}

/// [`client_exchange`] of several addresses: writes one message per entry of `mine`, then
/// reads as many from the server, then writes `"done\0"` (`ibv_srq_pingpong` exchanges 256).
///
/// # Errors
/// As [`client_exchange`]; a malformed reply names the message's index.
pub fn client_exchange_all(
    host: &str,
    port: u16,
    mine: &[Endpoint],
    connect_timeout: Duration,
    io_timeout: Duration,
) -> Result<Vec<Endpoint>, Box<dyn std::error::Error>> {
    Ok(client_exchange_with(host, port, mine, &[], 0, connect_timeout, io_timeout)?.0)
}

/// [`client_exchange_all`] with bytes of the caller's after the addresses, each way: `extra`
/// is written right after `mine` (in the same write), and `extra_len` bytes are read after the
/// server's addresses. (Not part of the C tools' protocol: for `perf`'s two-process tests,
/// which also exchange where their RDMA WRITEs go.)
///
/// # Errors
/// As [`client_exchange`].
pub fn client_exchange_with(
    host: &str,
    port: u16,
    mine: &[Endpoint],
    extra: &[u8],
    extra_len: usize,
    connect_timeout: Duration,
    io_timeout: Duration,
) -> Result<(Vec<Endpoint>, Vec<u8>), Box<dyn std::error::Error>> {
    let deadline = Instant::now() + connect_timeout;
    let mut stream = loop {
        let attempt = (host, port).to_socket_addrs().and_then(|addrs| {
            let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"));
            for addr in addrs {
                let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
                match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(5))) {
                    Ok(s) => return Ok(s),
                    Err(e) => last = e,
                }
            }
            Err(last)
        });
        match attempt {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "couldn't connect to {host}:{port} within {} s: {e}",
                    connect_timeout.as_secs_f64()
                )
                .into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    stream.set_read_timeout(Some(io_timeout))?;
    stream.set_write_timeout(Some(io_timeout))?;
    // One write call: the C servers of rc/uc/ud read the message with a single read(2).
    send_addresses(&mut stream, mine, extra)?;
    let (peers, theirs) =
        read_addresses(&mut stream, mine.len(), extra_len, io_timeout, "reading the server's address")?;
    stream.write_all(DONE).map_err(|e| context(e, "sending \"done\""))?;
    Ok((peers, theirs))
}

/// Writes the messages of `mine`, then `extra`, in one write call.
fn send_addresses(stream: &mut TcpStream, mine: &[Endpoint], extra: &[u8]) -> io::Result<()> {
    let mut out = encode_all(mine);
    out.extend_from_slice(extra);
    stream.write_all(&out).map_err(|e| context(e, "sending the local address"))
}

/// Reads `count` messages and then `extra_len` bytes (bounded by `timeout`; `what` names the
/// read in errors); returns the addresses and those bytes.
fn read_addresses(
    stream: &mut TcpStream,
    count: usize,
    extra_len: usize,
    timeout: Duration,
    what: &str,
) -> Result<(Vec<Endpoint>, Vec<u8>), Box<dyn std::error::Error>> {
    let mut msgs = vec![0u8; WIRE_LEN * count + extra_len];
    read_exact_bounded(stream, &mut msgs, timeout, what)?;
    let extra = msgs.split_off(WIRE_LEN * count);
    Ok((parse_all(&msgs)?, extra))
}

/// The messages of `eps`, back to back.
pub fn encode_all(eps: &[Endpoint]) -> Vec<u8> {
    eps.iter().flat_map(encode).collect()
}

/// Parses back-to-back messages (a multiple of [`WIRE_LEN`] bytes).
///
/// # Errors
/// [`WireError`] naming the first malformed message (by index when there are several).
pub fn parse_all(msgs: &[u8]) -> Result<Vec<Endpoint>, WireError> {
    if msgs.len() % WIRE_LEN != 0 {
        return Err(WireError(format!("{} bytes is not a whole number of {WIRE_LEN}-byte messages", msgs.len())));
    }
    let n = msgs.len() / WIRE_LEN;
    msgs.chunks(WIRE_LEN)
        .enumerate()
        .map(|(i, m)| parse(m).map_err(|e| if n == 1 { e } else { WireError(format!("message {i} of {n}: {}", e.0)) }))
        .collect()
}

fn read_exact_bounded(stream: &mut TcpStream, buf: &mut [u8], timeout: Duration, what: &str) -> io::Result<()> {
    stream.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(what, timeout),
        io::ErrorKind::UnexpectedEof => {
            io::Error::new(io::ErrorKind::UnexpectedEof, format!("{what}: the peer closed the connection early"))
        }
        _ => context(e, what),
    })
}

/// Server side, first half: listening on `port` on every address, IPv6 and IPv4.
pub struct Listener {
    listeners: Vec<TcpListener>,
    port: u16,
}

/// What [`Listener::accept_with`] returns: the connection, the client's addresses, and the
/// bytes it sent after them.
pub type Accepted = (ServerConn, Vec<Endpoint>, Vec<u8>);

/// Server side, second half: the accepted connection, after the client's address was read.
pub struct ServerConn {
    stream: TcpStream,
    io_timeout: Duration,
}

impl Listener {
    /// Binds `[::]:port` and `0.0.0.0:port`. Where `[::]` is dual-stack (the Linux default)
    /// it already covers IPv4 and the second bind is refused; where IPv6 sockets are
    /// IPv6-only, both are kept; where IPv6 is unavailable, IPv4 alone. Port 0 picks a free
    /// port (see [`Listener::port`]).
    ///
    /// # Errors
    /// No address could be bound.
    pub fn bind(port: u16) -> io::Result<Listener> {
        let mut listeners = Vec::new();
        let mut port = port;
        let mut first_err = None;
        for ip in [IpAddr::V6(Ipv6Addr::UNSPECIFIED), IpAddr::V4(Ipv4Addr::UNSPECIFIED)] {
            match TcpListener::bind(SocketAddr::new(ip, port)) {
                Ok(l) => {
                    port = l.local_addr()?.port();
                    listeners.push(l);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if listeners.is_empty() {
            let e = first_err.unwrap_or_else(|| io::Error::other("no address to bind"));
            return Err(context(e, &format!("couldn't listen on port {port}")));
        }
        Ok(Listener { listeners, port })
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits at most `accept_timeout` for one client and reads its address (bounded by
    /// `io_timeout`). The listening sockets are closed afterwards, as the C tool does.
    ///
    /// # Errors
    /// No client in time, an I/O error or timeout, or a malformed message.
    pub fn accept(
        self,
        accept_timeout: Duration,
        io_timeout: Duration,
    ) -> Result<(ServerConn, Endpoint), Box<dyn std::error::Error>> {
        let (conn, peers) = self.accept_all(1, accept_timeout, io_timeout)?;
        Ok((conn, peers[0]))
    }

    /// [`Listener::accept`] reading `count` addresses (`ibv_srq_pingpong` sends 256).
    ///
    /// # Errors
    /// As [`Listener::accept`].
    pub fn accept_all(
        self,
        count: usize,
        accept_timeout: Duration,
        io_timeout: Duration,
    ) -> Result<(ServerConn, Vec<Endpoint>), Box<dyn std::error::Error>> {
        let (conn, peers, _) = self.accept_with(count, 0, accept_timeout, io_timeout)?;
        Ok((conn, peers))
    }

    /// [`Listener::accept_all`] that also reads `extra_len` bytes after the addresses (the
    /// `extra` of [`client_exchange_with`]).
    ///
    /// # Errors
    /// As [`Listener::accept`].
    pub fn accept_with(
        self,
        count: usize,
        extra_len: usize,
        accept_timeout: Duration,
        io_timeout: Duration,
    ) -> Result<Accepted, Box<dyn std::error::Error>> {
        for l in &self.listeners {
            l.set_nonblocking(true)?;
        }
        let deadline = Instant::now() + accept_timeout;
        let mut stream = 'wait: loop {
            for l in &self.listeners {
                match l.accept() {
                    Ok((s, _)) => break 'wait s,
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    Err(e) => return Err(context(e, "accept").into()),
                }
            }
            if Instant::now() >= deadline {
                return Err(timed_out(&format!("waiting for a client on port {}", self.port), accept_timeout).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(io_timeout))?;
        stream.set_write_timeout(Some(io_timeout))?;
        let (peers, theirs) =
            read_addresses(&mut stream, count, extra_len, io_timeout, "reading the client's address")?;
        Ok((ServerConn { stream, io_timeout }, peers, theirs))
    }
}

impl ServerConn {
    /// Writes the server's address (call it once the QP is in RTS and its receives are
    /// posted: the client sends as soon as it has read it), then reads the client's
    /// `"done\0"`.
    ///
    /// # Errors
    /// An I/O error or timeout, or something else than `"done\0"`.
    pub fn finish(self, me: &Endpoint) -> Result<(), Box<dyn std::error::Error>> {
        self.finish_all(std::slice::from_ref(me))
    }

    /// [`ServerConn::finish`] with one message per entry of `mine`, written at once.
    ///
    /// # Errors
    /// As [`ServerConn::finish`].
    pub fn finish_all(self, mine: &[Endpoint]) -> Result<(), Box<dyn std::error::Error>> {
        self.finish_with(mine, &[])
    }

    /// [`ServerConn::finish_all`] writing `extra` right after the addresses (in the same
    /// write): what [`client_exchange_with`] reads as its `extra_len` bytes.
    ///
    /// # Errors
    /// As [`ServerConn::finish`].
    pub fn finish_with(mut self, mine: &[Endpoint], extra: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
        send_addresses(&mut self.stream, mine, extra)?;
        let mut done = [0u8; DONE.len()];
        read_exact_bounded(&mut self.stream, &mut done, self.io_timeout, "reading \"done\"")?;
        if &done != DONE {
            return Err(
                format!("expected \"done\\0\" from the client, got {:?}", String::from_utf8_lossy(&done)).into()
            );
        }
        Ok(())
    }
}

// --- command line ---------------------------------------------------------------------------

/// Which C tool's command line an example follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `ibv_rc_pingpong`, `ibv_uc_pingpong`.
    Connected,
    /// `ibv_ud_pingpong`: no `-m` (UD has no path MTU; a message must fit the port's MTU),
    /// default size 1024.
    Ud,
    /// `ibv_srq_pingpong`: `-q` QPs (default 16) sharing one receive queue.
    Srq,
}

/// The options of the `ibv_*_pingpong` tools that these examples implement, plus the time
/// bounds: getopt's forms (`-p 1`, `-p1`, `--port=1`, `--port 1`), numbers as `strtoul` reads
/// them (decimal, `0x` hex, `0` octal).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct Options {
    /// listen on/connect to port <port>
    #[arg(short, long, value_name = "port", default_value_t = DEFAULT_PORT, value_parser = c_num::<u16, 0, 65535>)]
    pub port: u16,
    /// use IB device <dev> (default first device found)
    #[arg(short = 'd', long = "ib-dev", value_name = "dev")]
    pub ib_dev: Option<String>,
    /// use port <port> of IB device
    #[arg(short = 'i', long = "ib-port", value_name = "port", default_value_t = 1, value_parser = c_num::<u8, 1, 255>)]
    pub ib_port: u8,
    /// size of message to exchange
    #[arg(short, long, value_name = "size", default_value = "4096", value_parser = c_num::<u32, 1, { u32::MAX as u64 }>)]
    pub size: u32,
    /// `-m`: the path MTU (connected transports: the flag is in `PathMtu`).
    #[arg(skip = Mtu::Mtu1024)]
    pub mtu: Mtu,
    /// number of receives to post at a time
    #[arg(short, long = "rx-depth", value_name = "dep", default_value_t = 500,
          value_parser = c_num::<u32, 1, { u32::MAX as u64 }>)]
    pub rx_depth: u32,
    /// number of exchanges (srq_pingpong: over all QPs, as the C tool counts)
    #[arg(short = 'n', long, value_name = "iters", default_value_t = 1000,
          value_parser = c_num::<u32, 1, { u32::MAX as u64 }>)]
    pub iters: u32,
    /// service level value
    #[arg(short = 'l', long, value_name = "sl", default_value_t = 0, value_parser = c_num::<u8, 0, 15>)]
    pub sl: u8,
    /// local port gid index (none: no GID is sent, LID addressing)
    #[arg(short = 'g', long = "gid-idx", value_name = "gid index", value_parser = c_num::<u8, 0, 255>)]
    pub gid_index: Option<u8>,
    /// `-q`: the number of QPs (`srq_pingpong`: the flag is in `SrqCli`).
    #[arg(skip = 16u32)]
    pub num_qp: u32,
    /// bound on each completion, socket read/write and the client's connection attempts
    #[arg(long, value_name = "secs", default_value = "30", value_parser = seconds)]
    pub timeout: Duration,
    /// how long the server waits for a client
    #[arg(long = "accept-timeout", value_name = "secs", default_value = "300", value_parser = seconds)]
    pub accept_timeout: Duration,
    /// validate received buffer (every byte of every message; both sides must use it)
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// connect to the server at <host>; without it, start a server and wait for a connection
    #[arg(value_name = "host")]
    pub server: Option<String>,
}

/// `-m` of the connected tools.
#[derive(Debug, clap::Args)]
struct PathMtu {
    /// path MTU
    #[arg(short, long, value_name = "size", default_value = "1024", value_parser = mtu)]
    mtu: Mtu,
}

/// Ping-pong over RC or UC, as rdma-core's ibv_rc_pingpong / ibv_uc_pingpong (and with them).
#[derive(Debug, clap::Parser)]
#[command(args_override_self = true)]
struct ConnectedCli {
    #[command(flatten)]
    opts: Options,
    #[command(flatten)]
    path: PathMtu,
}

/// Ping-pong over UD, as rdma-core's ibv_ud_pingpong (and with it).
#[derive(Debug, clap::Parser)]
#[command(args_override_self = true)]
struct UdCli {
    #[command(flatten)]
    opts: Options,
}

/// Ping-pong over RC QPs sharing a receive queue, as rdma-core's ibv_srq_pingpong (and with
/// it).
#[derive(Debug, clap::Parser)]
#[command(args_override_self = true)]
struct SrqCli {
    #[command(flatten)]
    opts: Options,
    #[command(flatten)]
    path: PathMtu,
    /// number of QPs to use (at most 255, as the C tool's address table)
    #[arg(short = 'q', long = "num-qp", value_name = "num", default_value_t = 16, value_parser = c_num::<u32, 1, 255>)]
    num_qp: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options::for_tool(Tool::Connected)
    }
}

impl Options {
    /// The defaults of `tool`.
    pub fn for_tool(tool: Tool) -> Self {
        parse_args_for(tool, std::iter::empty()).expect("the defaults parse")
    }
}

/// `strtoul(s, NULL, 0)`-like: decimal, `0x` hex, or `0` octal; but the whole string must be a
/// number, from `LO` to `HI`.
fn c_num<T: TryFrom<u64>, const LO: u64, const HI: u64>(s: &str) -> Result<T, String> {
    let t = s.trim();
    let parsed = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    };
    let v = parsed.map_err(|_| format!("{s:?} is not a number"))?;
    if !(LO..=HI).contains(&v) {
        return Err(format!("{v} is out of range {LO}..={HI}"));
    }
    T::try_from(v).map_err(|_| format!("{v} is out of range"))
}

fn seconds(s: &str) -> Result<Duration, String> {
    c_num::<u64, 1, 86_400>(s).map(Duration::from_secs)
}

fn mtu(s: &str) -> Result<Mtu, String> {
    Ok(match c_num::<u32, 0, { u32::MAX as u64 }>(s)? {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        v => return Err(format!("{v} is not 256, 512, 1024, 2048 or 4096")),
    })
}

/// Parses the arguments (without the program name) of `rc_pingpong` / `uc_pingpong`.
///
/// # Errors
/// clap's error naming the bad option or value (`-h` is an error of kind `DisplayHelp`).
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Options, clap::Error> {
    parse_args_for(Tool::Connected, args)
}

/// [`parse_args`] for the command line of `tool`.
///
/// # Errors
/// As [`parse_args`].
pub fn parse_args_for<I: IntoIterator<Item = String>>(tool: Tool, args: I) -> Result<Options, clap::Error> {
    parse_argv(tool, std::iter::once(String::from("pingpong")).chain(args))
}

/// [`parse_args_for`] of a whole `argv`, the program's name first (what the usage shows).
fn parse_argv<I: IntoIterator<Item = String>>(tool: Tool, argv: I) -> Result<Options, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = match tool {
        Tool::Connected => ConnectedCli::command(),
        // ibv_ud_pingpong's code uses 1024 (its usage text says 2048).
        Tool::Ud => UdCli::command().mut_arg("size", |a| a.default_value("1024")),
        Tool::Srq => SrqCli::command(),
    };
    let m = cmd.try_get_matches_from_mut(argv)?;
    Ok(match tool {
        Tool::Connected => {
            let cli = ConnectedCli::from_arg_matches(&m)?;
            Options { mtu: cli.path.mtu, ..cli.opts }
        }
        Tool::Ud => UdCli::from_arg_matches(&m)?.opts,
        Tool::Srq => {
            let cli = SrqCli::from_arg_matches(&m)?;
            if cli.num_qp > cli.opts.rx_depth {
                let why = format!(
                    "rx_depth {} is too small for {} QPs -- must have at least one receive per QP",
                    cli.opts.rx_depth, cli.num_qp
                );
                return Err(cmd.error(clap::error::ErrorKind::ArgumentConflict, why));
            }
            Options { mtu: cli.path.mtu, num_qp: cli.num_qp, ..cli.opts }
        }
    })
}

// --- the ping-pong --------------------------------------------------------------------------

/// How a transport moves its QP from INIT to RTS towards the peer (the only step in which
/// `ibv_rc_pingpong` and `ibv_uc_pingpong` differ).
pub type Connect<T> = fn(Qp<T, INIT>, &Options, &Endpoint, &Endpoint) -> typed_verbs::Result<Qp<T, RTS>>;

/// Connects an RC QP to `peer` with `ibv_rc_pingpong`'s attributes (`ibv_srq_pingpong` uses the
/// same ones, per QP): the library's `connect_path`, whose timers are the C tools' (one incoming
/// and one outstanding RDMA READ/atomic, RNR NAK timer code 12, ACK timeout code 14, 7 retries,
/// 7 RNR retries), along the C tools' path ([`path`]: `-m`, `-g`, `-l`).
pub fn connect_rc(
    qp: Qp<RC, INIT>,
    opts: &Options,
    me: &Endpoint,
    peer: &Endpoint,
) -> typed_verbs::Result<Qp<RC, RTS>> {
    qp.connect_path(me, peer, &path(opts, peer))
}

/// The path the C tools set at RTR: MTU from `-m`, the address of [`address_vector`].
pub fn path(opts: &Options, peer: &Endpoint) -> PeerPath {
    PeerPath { av: address_vector(opts, peer), mtu: opts.mtu }
}

/// The address vector the C tools use (at RTR for rc/uc/srq, for the address handle in ud):
/// a GRH (hop limit 1, from the local GID index) when the peer sent a GID whose interface ID
/// (its last 8 bytes) is not zero, LID addressing otherwise.
pub fn address_vector(opts: &Options, peer: &Endpoint) -> AddressVector {
    let mut av = if peer.gid.0[8..].iter().any(|&b| b != 0) {
        let sgid_index = opts.gid_index.unwrap_or(0);
        let mut av = AddressVector::global(opts.ib_port, peer.gid, sgid_index);
        if let Some(grh) = av.grh.as_mut() {
            grh.hop_limit = 1;
        }
        av.dlid = peer.lid;
        av
    } else {
        AddressVector::local(opts.ib_port, peer.lid)
    };
    av.sl = opts.sl;
    av
}

/// Prints an address the way the C tools do (`which` is `"local address: "` or
/// `"remote address:"`).
pub fn print_address(which: &str, ep: &Endpoint) {
    println!(
        "  {which} LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        ep.lid,
        ep.qp_num,
        ep.psn,
        Ipv6Addr::from(ep.gid.0)
    );
}

/// Opens `-d`'s device, or the first one found.
///
/// # Errors
/// No such device (or none at all), or `ibv_open_device` failed.
pub fn open(opts: &Options) -> typed_verbs::Result<Context> {
    match &opts.ib_dev {
        Some(name) => Context::open(name),
        None => {
            let first = devices()?
                .into_iter()
                .next()
                .ok_or(Error::DeviceNotFound { name: "(any)".into(), available: vec![] })?;
            Context::open(&first.name)
        }
    }
}

/// What this side sends the peer for `qp`: the port's LID, the QP number, a random PSN, and
/// the GID of `-g` (all zeros without `-g`, as the C tools do).
///
/// # Errors
/// The port or GID query failed; an InfiniBand port without a LID (not active).
pub fn local_endpoint<T: typed_verbs::transport::Transport, S: typed_verbs::transport::QpState>(
    ctx: &Context,
    qp: &Qp<T, S>,
    opts: &Options,
) -> Result<Endpoint, Box<dyn std::error::Error>> {
    let port = ctx.query_port(opts.ib_port)?;
    if port.link_layer() != LinkLayer::Ethernet && port.lid() == 0 {
        return Err("couldn't get the local LID (port not active?)".into());
    }
    // The C tools' `lrand48() & 0xffffff`.
    let psn = rand::random::<u32>() & 0xff_ffff;
    Ok(match opts.gid_index {
        Some(g) => qp.endpoint(opts.ib_port, g, psn)?,
        None => Endpoint { lid: port.lid(), qp_num: qp.qp_num(), psn, gid: Gid::default() },
    })
}

/// Sets up the device, exchanges addresses, connects with `connect` and ping-pongs. Returns
/// the time the loop took.
///
/// # Errors
/// Any verbs, completion, I/O or protocol error; a wait beyond `opts.timeout`.
pub fn run<T>(opts: &Options, connect: Connect<T>) -> Result<Duration, Box<dyn std::error::Error>>
where
    T: Transitions<InitAttr = ConnectedInit> + SupportsSend + Unaddressed,
{
    let ctx = open(opts)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(opts.rx_depth + 1)?;
    let size = opts.size as usize;

    // The C tools use one buffer for everything, since they never look at the data. Here a
    // receive buffer is exclusively lent to the device until its completion comes back, so
    // each posted receive has its own; the send buffer is only read by the device.
    let mut check = Check::new(opts, FILL);
    let mut send_mr = pd.alloc_mr(size, access::LOCAL_READ)?;
    check.fill_send(send_mr.as_mut_slice());
    // Exactly `iters` receives are ever posted (see below), at most `rx_depth` at a time.
    // (`-c` rearms a buffer once its message is checked, before it is posted again.)
    let nbufs = opts.rx_depth.min(opts.iters) as usize;
    let mut recv_mr = pd.alloc_mr(size * nbufs, access::LOCAL_RW)?;
    check.fill_recv(recv_mr.as_mut_slice());

    let caps =
        QpCaps { max_send_wr: 1, max_recv_wr: opts.rx_depth, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = pd.create_qp::<T>(&QpConfig::new(&cq).caps(caps))?;
    let qp = qp.to_init(&ConnectedInit::new(opts.ib_port, Access::NONE))?;

    let me = local_endpoint(&ctx, &qp, opts)?;
    print_address("local address: ", &me);

    let (peer, server_conn) = match &opts.server {
        Some(host) => {
            let peer = client_exchange(host, opts.port, &me, opts.timeout, opts.timeout)?;
            (peer, None)
        }
        None => {
            let listener = Listener::bind(opts.port)?;
            println!("  waiting for a client on port {}", listener.port());
            let (conn, peer) = listener.accept(opts.accept_timeout, opts.timeout)?;
            (peer, Some(conn))
        }
    };
    print_address("remote address:", &peer);

    // The C tools post their receives in INIT, before the exchange. A QP that has receives
    // posted in a scope is borrowed by the scope and cannot change state, so here they are
    // posted in RTS, still before the peer is allowed to send: the server posts them before
    // writing its address (the client sends only after reading it), the client before its
    // first SEND (the server sends only after receiving it). Nothing arrives before a
    // receive is ready, which matters for UC, where such a message would be dropped.
    let qp = connect(qp, opts, &me, &peer)?;

    let mut free: Vec<LocalBufMut<'_>> = Vec::with_capacity(nbufs);
    let mut rest = recv_mr.slice_mut(..)?;
    for _ in 0..nbufs {
        let (head, tail) = rest.split_at(size)?;
        free.push(head);
        rest = tail;
    }
    let send_buf = send_mr.slice(..)?;
    let is_client = opts.server.is_some();
    let (iters, wait) = (opts.iters, opts.timeout);

    // Nothing is outstanding when the loop succeeds. After an error, the receives still
    // posted will not complete: the scope flushes them after a short wait and then reports
    // the QP as broken instead of the closure's result, so the loop's error is kept aside.
    let mut failure = None;
    let outcome = scope_with_timeout(Duration::from_secs(1), |s| {
        let result = (|| -> Result<Duration, Box<dyn std::error::Error>> {
            // Exactly `iters` receives in total, so that none is left outstanding at the end
            // (the C tools keep `rx_depth` posted and exit with them still posted).
            let mut posted = VecDeque::with_capacity(nbufs);
            let mut to_post = iters;
            for buf in free.drain(..) {
                posted.push_back(s.post_recv(&qp, wr::Recv::new(buf)).map_err(|e| e.error)?);
                to_post -= 1;
            }
            if let Some(conn) = server_conn {
                conn.finish(&me)?;
            }

            let start = Instant::now();
            for i in 0..iters {
                let mut recv = || -> Result<(), Box<dyn std::error::Error>> {
                    // The receive queue completes in order: the oldest receive is the next one.
                    let token = posted.pop_front().ok_or("no receive posted")?;
                    let (c, mut buf) = s.wait(token, wait).map_err(|e| e.error)?;
                    c.ok().map_err(|e| format!("receive {}: {e}", i + 1))?;
                    check.take(u64::from(i) + 1, c.byte_len() as usize, &mut buf)?;
                    if to_post > 0 {
                        posted.push_back(s.post_recv(&qp, wr::Recv::new(buf)).map_err(|e| e.error)?);
                        to_post -= 1;
                    }
                    Ok(())
                };
                let send = || -> Result<(), Box<dyn std::error::Error>> {
                    let token = s.post_send(&qp, wr::Send::new(send_buf)).map_err(|e| e.error)?;
                    let (c, _buf) = s.wait(token, wait).map_err(|e| e.error)?;
                    c.ok().map_err(|e| format!("send {}: {e}", i + 1))?;
                    Ok(())
                };
                // The client sends first; each side sends its next message once its previous
                // send completed and the peer's message arrived.
                if is_client {
                    send()?;
                    recv()?;
                } else {
                    recv()?;
                    send()?;
                }
            }
            let elapsed = start.elapsed();
            check.print();
            Ok(elapsed)
        })();
        if let Err(e) = &result {
            failure = Some(e.to_string());
        }
        result
    });
    match (outcome, failure) {
        (Ok(result), _) => result,
        (Err(scope_error), Some(first)) => Err(format!("{first} (then: {scope_error})").into()),
        (Err(scope_error), None) => Err(scope_error.into()),
    }
}

// --- message contents: `-c` --------------------------------------------------------------

/// What every byte of the rc, uc and ud C tools' buffers holds (`memset(ctx->buf, 0x7b, size)`);
/// `ibv_srq_pingpong` clears its buffer instead.
pub const FILL: u8 = 0x7b;

/// What a receive buffer holds before its message lands (with `-c`): no side ever sends it, so
/// a receive that completes without its bytes is caught.
pub const UNWRITTEN: u8 = 0xa5;

/// `-c` (`--chk`) of the C tools: the client writes `i / page_size % sizeof(char)`, which is 0,
/// at each page start `i` of its buffer, and the server checks those bytes of its buffer once
/// the loop ends, printing "invalid data in page N". The C tools send from the buffer they
/// receive into, so with `-c` on the client every message, both ways, holds the fill byte with
/// 0 at each page start. These examples mark their send buffer on both sides (a server echoes
/// the client's bytes) and check every byte of every message they receive, failing at the
/// first that differs.
pub struct Check {
    on: bool,
    fill: u8,
    size: usize,
    checked: u64,
    /// `-c`: a message's bytes copied out of a receive buffer ([`Check::take`]).
    copy: Vec<u8>,
    /// `-c`: [`UNWRITTEN`], `size` bytes: what a checked receive buffer is rearmed with.
    blank: Vec<u8>,
}

/// A receive buffer as [`Check::take`] reads and rearms it: a registered view (volatile
/// accesses, the device may write the region) or plain bytes.
pub trait RecvBuffer {
    /// Copies the first `dst.len()` bytes (at most the buffer's length) into `dst`.
    fn read_into(&self, dst: &mut [u8]);
    /// Overwrites the first `src.len()` bytes (at most the buffer's length) with `src`.
    fn write_from(&mut self, src: &[u8]);
}

impl RecvBuffer for LocalBufMut<'_> {
    fn read_into(&self, dst: &mut [u8]) {
        self.read_volatile_into(dst);
    }
    fn write_from(&mut self, src: &[u8]) {
        self.write_volatile_from(src);
    }
}

impl RecvBuffer for [u8] {
    fn read_into(&self, dst: &mut [u8]) {
        let n = dst.len().min(self.len());
        dst[..n].copy_from_slice(&self[..n]);
    }
    fn write_from(&mut self, src: &[u8]) {
        let n = src.len().min(self.len());
        self[..n].copy_from_slice(&src[..n]);
    }
}

/// The C tools' `page_size` (`sysconf(_SC_PAGESIZE)`) on the x86-64 hosts these examples run
/// on. (A peer with larger pages marks fewer bytes: `-c` then fails loudly, never silently.)
const PAGE_SIZE: usize = 4096;

impl Check {
    /// The check of `opts` (off without `-c`), for messages of the tool whose buffers hold
    /// `fill`.
    pub fn new(opts: &Options, fill: u8) -> Check {
        let size = opts.size as usize;
        let (copy, blank) = if opts.chk { (vec![0; size], vec![UNWRITTEN; size]) } else { (Vec::new(), Vec::new()) };
        Check { on: opts.chk, fill, size, checked: 0, copy, blank }
    }

    /// The byte at `offset` of every message.
    fn expected(&self, offset: usize) -> u8 {
        if offset % PAGE_SIZE == 0 {
            0
        } else {
            self.fill
        }
    }

    /// Writes the message into a send buffer of `size` bytes (`-c`: with the page marks).
    pub fn fill_send(&self, buf: &mut [u8]) {
        buf.fill(self.fill);
        if self.on {
            for at in (0..buf.len()).step_by(PAGE_SIZE) {
                buf[at] = 0;
            }
        }
    }

    /// Prepares a receive buffer (`-c`: [`UNWRITTEN`]).
    pub fn fill_recv(&self, buf: &mut [u8]) {
        if self.on {
            buf.fill(UNWRITTEN);
        }
    }

    /// Whether received messages are checked (`-c`).
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// `-c`: checks received message `n` (from 1), `byte_len` bytes long by its completion,
    /// whose payload is `payload` (the buffer's bytes after a UD GRH).
    pub fn received(&mut self, n: u64, byte_len: usize, payload: &[u8]) -> Result<(), String> {
        if !self.on {
            return Ok(());
        }
        if byte_len != self.size {
            return Err(format!("message {n}: {byte_len} bytes received, {} expected", self.size));
        }
        let got = payload.get(..self.size).ok_or_else(|| format!("message {n}: buffer shorter than the message"))?;
        if let Some((at, &b)) = got.iter().enumerate().find(|&(at, &b)| b != self.expected(at)) {
            return Err(format!(
                "invalid data in page {} (message {n}: byte {at} is {b:#04x}, {:#04x} expected)",
                at / PAGE_SIZE,
                self.expected(at)
            ));
        }
        self.checked += 1;
        Ok(())
    }

    /// `-c`: checks received message `n` (from 1), `byte_len` bytes long by its completion,
    /// in the receive buffer `buf` (its first bytes, as [`Check::received`]), then rearms the
    /// buffer ([`UNWRITTEN`]) for the message it is posted again for: a reused buffer still
    /// holds its previous message, which would pass for one that never landed.
    pub fn take<B: RecvBuffer + ?Sized>(&mut self, n: u64, byte_len: usize, buf: &mut B) -> Result<(), String> {
        if !self.on {
            return Ok(());
        }
        let mut copy = std::mem::take(&mut self.copy);
        let len = byte_len.min(copy.len());
        buf.read_into(&mut copy[..len]);
        let checked = self.received(n, byte_len, &copy[..len]);
        self.copy = copy;
        buf.write_from(&self.blank);
        checked
    }

    /// The line that says what was checked (`-c`), printed before the result lines.
    pub fn print(&self) {
        if self.on {
            println!("  -c: {} received messages checked, every byte as expected", self.checked);
        }
    }
}

/// The two result lines of the C tools.
pub fn report(opts: &Options, elapsed: Duration) -> String {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = u64::from(opts.size) * u64::from(opts.iters) * 2;
    format!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec\n{} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        bytes as f64 * 8.0 / usec,
        opts.iters,
        usec / 1e6,
        usec / f64::from(opts.iters)
    )
}

/// The whole program of `rc_pingpong` / `uc_pingpong`: parse the command line, run, print the
/// result; exit status 0 only on success.
pub fn main<T>(prog: &str, connect: Connect<T>) -> std::process::ExitCode
where
    T: Transitions<InitAttr = ConnectedInit> + SupportsSend + Unaddressed,
{
    program(prog, Tool::Connected, |opts| run::<T>(opts, connect))
}

/// The whole program of an example following `tool`, whose ping-pong is `run` (returning the
/// time its loop took): parse the command line, run, print the C tools' result lines; exit
/// status 0 only on success.
pub fn program(
    prog: &str,
    tool: Tool,
    run: impl FnOnce(&Options) -> Result<Duration, Box<dyn std::error::Error>>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    let opts = match parse_argv(tool, std::env::args()) {
        Ok(o) => o,
        Err(e) => {
            // The C tools' status for a bad command line is 1 (clap's is 2); 0 for `-h`.
            let _ = e.print();
            return if e.use_stderr() { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    match run(&opts) {
        Ok(elapsed) => {
            println!("{}", report(&opts, elapsed));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{prog}: {e}");
            ExitCode::FAILURE
        }
    }
}
