//! `peer_memory`: one process lends its memory to a peer on another host, which RDMA WRITEs,
//! READs and runs atomics on it; the owner then shows what its memory holds.
//!
//! ```text
//! peer_memory serve [--window] [OPTIONS]         # the owner (waits for one client)
//! peer_memory access HOST [OPTIONS]              # the user of the owner's memory
//! ```
//!
//! The owner registers a 4 KiB region (every remote right, MW_BIND) filled with a known
//! pattern, creates an RC QP that accepts remote WRITE, READ and atomics, and waits for a
//! client on a TCP port. The two exchange their QP addresses as rdma-core's pingpong tools do
//! (`examples/common/pingpong.rs`), followed by each port's active MTU and, from the owner,
//! the advertisement (address, length, rkey) of what the client may use: the whole region, or
//! with `--window` a type 1 memory window bound over it (`Scope::bind_mw`; the rkey leaves only
//! after the bind completed). Both sides use the smaller of the two active MTUs as the path MTU
//! unless `--mtu` says otherwise (to see what a path MTU the peer's port cannot carry does).
//!
//! The client then, each step checked:
//! 1. WRITEs 64 bytes at offset 0 and READs them back;
//! 2. READs 64 bytes of the untouched pattern at offset 256;
//! 3. FETCH_AND_ADDs 5 to the word at offset 128 (gets the pattern's word back);
//! 4. COMPARE_AND_SWAPs the word at offset 136 from the pattern's value to
//!    `0x1122334455667788` (gets the pattern's word back);
//! 5. SENDs `done`. On its arrival the owner prints its whole region (`region: HEX`) and exits; RC executes the SEND after the requests before it, so they are all in.
//!
//! The owner also prints every asynchronous event of its device (`async event: ...`).
//!
//! Options: `-d DEVICE` (default: the first), `-g GID_INDEX` (default 1, as on Soft-RoCE),
//! `-p PORT` (TCP, default 18515), `--mtu BYTES` (path MTU), `--timeout SECS` (bounds every
//! wait and the TCP exchange; default 60), `--window` (serve only).
//! Exits 0 when every step turned out as described, 1 otherwise (saying which and why).
//!
//! Without RDMA hardware, on two Soft-RoCE hosts: `scripts/softroce-run --hosts 2` (see its
//! header; the two-host tests in `tests/twohost/` run this example on the second host).

#[path = "common/pingpong.rs"]
mod pingpong;
#[path = "common/remote.rs"]
mod remote;

use std::process::ExitCode;
use std::time::Duration;

use typed_verbs::access::AccessSet;
use typed_verbs::access::{self, window};
use typed_verbs::device::Mtu;
use typed_verbs::mw::{Type1, WindowAdvert};
use typed_verbs::prelude::*;

const PORT: u8 = 1;
const REGION: usize = 4096;
/// What the client writes at offset 0.
const MESSAGE: &[u8; 64] = b"written by peer_memory's client across the wire, 64 bytes long!!";
const SWAPPED: u64 = 0x1122_3344_5566_7788;

type Error = Box<dyn std::error::Error>;

/// One process lends its memory to a peer on another host, which RDMA WRITEs, READs and runs
/// atomics on it.
#[derive(clap::Parser)]
#[command(args_override_self = true)]
struct Opts {
    #[command(subcommand)]
    role: Role,
    /// the device (default: the first)
    #[arg(short = 'd', global = true, value_name = "DEVICE")]
    device: Option<String>,
    /// the GID index
    #[arg(short = 'g', global = true, value_name = "GID_INDEX", default_value_t = 1)]
    gid_index: u8,
    /// the TCP port
    #[arg(short = 'p', global = true, value_name = "PORT", default_value_t = pingpong::DEFAULT_PORT)]
    port: u16,
    /// the path MTU in bytes (default: the smaller of the two ports' active MTUs)
    #[arg(long, global = true, value_name = "BYTES",
          value_parser = |s: &str| s.parse::<u32>().map_err(|e| e.to_string()).and_then(remote::mtu_from_bytes))]
    mtu: Option<Mtu>,
    /// the bound of every wait and of the TCP exchange, in seconds
    #[arg(long, global = true, value_name = "SECS", default_value = "60",
          value_parser = |s: &str| s.parse().map(Duration::from_secs))]
    timeout: Duration,
}

#[derive(clap::Subcommand)]
enum Role {
    /// The owner: waits for one client.
    Serve {
        /// Lend a type 1 memory window bound over the region instead of the region.
        #[arg(long)]
        window: bool,
    },
    /// The user of the owner's memory.
    Access {
        /// The owner's host.
        host: String,
    },
}

fn main() -> ExitCode {
    let o = <Opts as clap::Parser>::try_parse().unwrap_or_else(|e| {
        let _ = e.print();
        std::process::exit(if e.use_stderr() { 1 } else { 0 });
    });
    let result = match &o.role {
        Role::Serve { window } => serve(&o, *window),
        Role::Access { host } => access(&o, host),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peer_memory: {e}");
            ExitCode::FAILURE
        }
    }
}

fn open(o: &Opts) -> Result<Context, Error> {
    let name = match &o.device {
        Some(n) => n.clone(),
        None => devices()?.first().map(|d| d.name.clone()).ok_or("no RDMA device found")?,
    };
    Ok(Context::open(&name)?)
}

fn active_mtu(ctx: &Context) -> Result<Mtu, Error> {
    Ok(ctx.query_port(PORT)?.active_mtu().ok_or("the port has no active MTU")?)
}

fn connect(
    qp: Qp<RC, RESET>,
    o: &Opts,
    access: impl AccessSet,
    me: &Endpoint,
    peer: &Endpoint,
    mtu: Mtu,
) -> Result<Qp<RC, RTS>, Error> {
    let qp = qp.to_init(&ConnectedInit::new(PORT, access)).map_err(|e| e.error)?;
    let av = AddressVector::global(PORT, peer.gid, o.gid_index);
    let rtr = RcRtr { path_mtu: mtu, ..RcRtr::new(av, peer.qp_num, peer.psn) };
    let qp = qp.to_rtr(&rtr).map_err(|e| e.error)?;
    Ok(qp.to_rts(&RcRts::new(me.psn)).map_err(|e| e.error)?)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// --- the owner ------------------------------------------------------------------------------

fn serve(o: &Opts, window: bool) -> Result<(), Error> {
    let ctx = open(o)?;
    // Every asynchronous event of the device, as it comes (its own context: port events reach
    // every context of the device).
    let events = open(o)?;
    std::thread::spawn(move || loop {
        match events.next_async_event(Duration::from_secs(3600)) {
            Ok(ev) => println!("async event: {ev}"),
            Err(typed_verbs::Error::Timeout { .. }) => {}
            Err(e) => {
                println!("async events: {e}");
                return;
            }
        }
    });
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16)?;
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, ..QpCaps::default() };
    let qp = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let mut region = pd.alloc_mr(REGION, access::FULL)?;
    let fill: Vec<u8> = (0..REGION).map(remote::pattern).collect();
    region.write_volatile_from(0, &fill)?;
    let mut inbox = pd.alloc_mr(64, access::LOCAL_RW)?;
    let mine = active_mtu(&ctx)?;

    let listener = pingpong::Listener::bind(o.port)?;
    let me = qp.endpoint(PORT, o.gid_index, rand::random::<u32>() & 0xff_ffff)?;
    pingpong::print_address("local address: ", &me);
    println!("port MTU {}; waiting for a client on port {}", mine.bytes(), listener.port());
    let (conn, peers, theirs) = listener.accept_with(1, remote::CLIENT_EXTRA, o.timeout, o.timeout)?;
    let peer = peers[0];
    let theirs = remote::decode_client(&theirs)?;
    let mtu = o.mtu.unwrap_or_else(|| remote::negotiate(mine, theirs));
    pingpong::print_address("remote address:", &peer);
    println!("path MTU {} (ours {}, the client's {})", mtu.bytes(), mine.bytes(), theirs.bytes());
    let rights = Access::NONE.remote_write().remote_read().remote_atomic();
    let qp = connect(qp, o, rights, &me, &peer, mtu)?;

    scope(|s| -> Result<(), Error> {
        let done = s.post_recv(&qp, wr::Recv::new(inbox.slice_mut(..)?)).map_err(|e| e.error)?;
        let mw = if window { Some(pd.alloc_mw::<Type1>()?) } else { None };
        let (advert, _window) = match mw {
            Some(mw) => {
                let t = s.bind_mw(&qp, mw, &region, 0, REGION as u64, window::ALL).map_err(|e| e.error)?;
                let (c, bound) = s.wait(t, o.timeout).map_err(|e| e.error)?;
                let bound = bound.map_err(|_| format!("the window's bind failed: {:?}", c.status()))?;
                let r = bound.remote(..)?;
                println!("bound a type 1 window over the region, rkey {:#x}", r.rkey());
                (WindowAdvert::of(&r), Some(bound))
            }
            None => {
                let r = region.remote(..)?;
                (WindowAdvert::of(&r), None)
            }
        };
        println!("advertised addr {:#x} len {} rkey {:#x}", advert.addr, advert.len, advert.rkey);
        conn.finish_with(&[me], &remote::encode_server(&advert, mine))?;
        let (c, _) = s.wait(done, o.timeout).map_err(|e| e.error)?;
        println!("received: {:?}, {} bytes", c.status(), c.byte_len());
        c.ok()?;
        Ok(())
    })??;
    let mut shown = [0u8; REGION];
    region.read_volatile_into(0, &mut shown)?;
    println!("region: {}", hex(&shown));
    Ok(())
}

// --- the client -----------------------------------------------------------------------------

fn access(o: &Opts, host: &str) -> Result<(), Error> {
    let ctx = open(o)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16)?;
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, ..QpCaps::default() };
    let qp = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let mine = active_mtu(&ctx)?;
    let me = qp.endpoint(PORT, o.gid_index, rand::random::<u32>() & 0xff_ffff)?;
    pingpong::print_address("local address: ", &me);
    let (peers, extra) = pingpong::client_exchange_with(
        host,
        o.port,
        &[me],
        &mine.bytes().to_le_bytes(),
        remote::SERVER_EXTRA,
        o.timeout,
        o.timeout,
    )?;
    let peer = peers[0];
    let (advert, theirs) = remote::decode_server(&extra)?;
    let mtu = o.mtu.unwrap_or_else(|| remote::negotiate(mine, theirs));
    pingpong::print_address("remote address:", &peer);
    println!("path MTU {} (ours {}, the owner's {})", mtu.bytes(), mine.bytes(), theirs.bytes());
    println!("using addr {:#x} len {} rkey {:#x}", advert.addr, advert.len, advert.rkey);
    let qp = connect(qp, o, Access::NONE, &me, &peer, mtu)?;
    let target = advert.remote::<window::All>()?;

    let mut src = pd.alloc_mr(64, access::LOCAL_READ)?;
    src.as_mut_slice().copy_from_slice(MESSAGE);
    let mut back = pd.alloc_mr(64, access::LOCAL_RW)?;
    let mut word = pd.alloc_mr(8, access::LOCAL_RW)?;
    let check = |c: &Completion, what: &str| -> Result<(), Error> {
        println!("{what}: {:?}", c.status());
        if c.is_success() {
            Ok(())
        } else {
            Err(format!("{what} failed: {c:?}").into())
        }
    };

    // 1. WRITE, then READ it back.
    scope(|s| -> Result<(), Error> {
        let t = s.post_send(&qp, wr::Write::new(src.slice(..)?, target.slice(0, 64)?)).map_err(|e| e.error)?;
        check(&s.wait(t, o.timeout).map_err(|e| e.error)?.0, "write 64 bytes at 0")?;
        let t = s.post_send(&qp, wr::Read::new(back.slice_mut(..)?, target.slice(0, 64)?)).map_err(|e| e.error)?;
        check(&s.wait(t, o.timeout).map_err(|e| e.error)?.0, "read 64 bytes at 0")?;
        Ok(())
    })??;
    if back.as_slice() != MESSAGE {
        return Err(format!("read back {:?}, wrote {:?}", hex(back.as_slice()), hex(MESSAGE)).into());
    }
    // 2. READ the untouched pattern.
    scope(|s| -> Result<(), Error> {
        let t = s.post_send(&qp, wr::Read::new(back.slice_mut(..)?, target.slice(256, 64)?)).map_err(|e| e.error)?;
        check(&s.wait(t, o.timeout).map_err(|e| e.error)?.0, "read 64 bytes at 256")?;
        Ok(())
    })??;
    let want: Vec<u8> = (256..320).map(remote::pattern).collect();
    if back.as_slice() != want.as_slice() {
        return Err(format!("read {} at 256, the pattern is {}", hex(back.as_slice()), hex(&want)).into());
    }
    // 3. FETCH_AND_ADD, 4. COMPARE_AND_SWAP: both return the pattern's word.
    for (offset, what) in [(128u64, "fetch_and_add 5 at 128"), (136, "compare_and_swap at 136")] {
        let old = remote::pattern_word(offset as usize);
        scope(|s| -> Result<(), Error> {
            let t = if offset == 128 {
                s.post_send(&qp, wr::FetchAdd::new(word.slice_mut(..)?, target.slice(offset, 8)?, 5))
                    .map_err(|e| e.error)?
            } else {
                s.post_send(&qp, wr::CompareSwap::new(word.slice_mut(..)?, target.slice(offset, 8)?, old, SWAPPED))
                    .map_err(|e| e.error)?
            };
            check(&s.wait(t, o.timeout).map_err(|e| e.error)?.0, what)?;
            Ok(())
        })??;
        let got = u64::from_le_bytes(word.as_slice().try_into().expect("8 bytes"));
        println!("{what}: old value {got:#x}");
        if got != old {
            return Err(format!("{what} returned {got:#x}, the pattern's word is {old:#x}").into());
        }
    }
    // 5. SEND "done": the owner shows its region.
    scope(|s| -> Result<(), Error> {
        let t = s.post_inline(&qp, wr::InlineSend::new(b"done")).map_err(|e| e.error)?;
        check(&s.wait(t, o.timeout).map_err(|e| e.error)?.0, "send done")?;
        Ok(())
    })??;
    println!("all steps succeeded");
    Ok(())
}
