//! `memory_window`: a server lends a client write access to part of a buffer through a memory
//! window, then takes it back.
//!
//! 1. The server registers a buffer with MW_BIND and no remote rights of its own: nobody can
//!    reach it remotely except through a window bound to it.
//! 2. It binds a window to 1 KiB of the buffer with REMOTE_WRITE and tells the client the
//!    window's address, length and rkey, only as ibv_bind_mw(3) allows: after the bind's
//!    successful completion (type 1, `Scope::bind_mw`), or in a SEND posted after the bind on
//!    the same QP, which the QP executes after the bind (type 2, `BindMw` then
//!    `Scope::advertise_window`).
//! 3. The client RDMA-WRITEs through the window: it succeeds, the server sees the bytes.
//! 4. The server revokes the window: LOCAL_INV for type 2, a zero-length rebind
//!    (`Scope::unbind_mw`) for type 1.
//! 5. The client writes again with the same rkey: the server's device refuses it, and the
//!    client's completion says `REM_ACCESS_ERR`. The buffer is unchanged.
//!
//! Both sides live in this one process: two RC queue pairs on one device, connected to each
//! other (loopback), as in `rdma_read_write`. Only the window's description crosses from
//! server to client, in a SEND, as it would between two machines.
//!
//! Usage: `memory_window [--type 1|2] [DEVICE [GID_INDEX]]` (defaults: type 2, the first
//! device, GID index 1 as on Soft-RoCE). Exits non-zero unless every step turns out as
//! described. Without RDMA hardware:
//! `scripts/softroce-run -- target/debug/examples/memory_window --type 1`.

use std::process::ExitCode;
use std::time::Duration;

use typed_verbs::access::{self, window};
use typed_verbs::mw::{BoundMw, Type1, Type2, WindowAdvert};
use typed_verbs::prelude::*;
use typed_verbs::wc::CompletionError;
use typed_verbs::wr::{BindMw, LocalInv};

const PORT: u8 = 1;
const WAIT: Duration = Duration::from_secs(30);
/// The window covers `OFFSET..OFFSET + LEN` of the server's 4 KiB buffer.
const OFFSET: u64 = 1024;
const LEN: u64 = 1024;
const MESSAGE: &[u8] = b"written by the client through the window";

type Buffer = Mr<access::WindowBindable>;
type Window<'m, K> = BoundMw<'m, K, window::Write>;

/// The two ends, in one process.
struct Peers {
    /// The server's QP: it binds, advertises and revokes the window.
    server: Qp<RC, RTS>,
    /// The client's QP: it receives the advertisement and writes.
    client: Qp<RC, RTS>,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("\nOK: the window granted access, and revoking it took the access away.");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memory_window: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A server lends a client write access to part of a buffer through a memory window, then
/// takes it back.
#[derive(clap::Parser)]
struct Args {
    /// The window type: 1 (ibv_bind_mw) or 2 (a BIND_MW work request).
    #[arg(short, long = "type", default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    r#type: u8,
    /// The device (default: the first one).
    device: Option<String>,
    /// The GID index.
    #[arg(default_value_t = 1)]
    gid_index: u8,
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let Args { r#type: mw_type, device, gid_index } = clap::Parser::parse();
    let name = match device {
        Some(n) => n,
        None => devices()?.first().map(|d| d.name.clone()).ok_or("no RDMA device found")?,
    };

    let ctx = Context::open(&name)?;
    let pd = ctx.alloc_pd()?;
    // The CQ holds what the two QPs' queues can have outstanding (4 send and 4 receive
    // requests each). The advertisement travels as an inline SEND of 21 bytes.
    let cq = ctx.create_cq(16)?;
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, max_inline_data: 64, ..QpCaps::default() };
    let server = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let client = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let (es, ec) = (server.endpoint(PORT, gid_index, 0x100)?, client.endpoint(PORT, gid_index, 0x200)?);
    let connect = |qp: Qp<RC, RESET>, me: &Endpoint, peer: &Endpoint| -> typed_verbs::Result<Qp<RC, RTS>> {
        // The server's QP must accept incoming RDMA WRITEs at all; what they may touch is
        // decided by the rkey they carry.
        let qp = qp.to_init(&ConnectedInit::new(PORT, Access::NONE.remote_write()))?;
        let av = AddressVector::global(PORT, peer.gid, gid_index);
        let qp = qp.to_rtr(&RcRtr::new(av, peer.qp_num, peer.psn))?;
        Ok(qp.to_rts(&RcRts::new(me.psn))?)
    };
    let peers = Peers { server: connect(server, &es, &ec)?, client: connect(client, &ec, &es)? };
    println!("device {name}: server QP {:#x} <-> client QP {:#x} (RC, loopback)", es.qp_num, ec.qp_num);

    // The server's buffer: LOCAL_WRITE and MW_BIND, no remote rights. `wr::Write::new` would not
    // even compile with `buffer.remote(..)` as its target: the region's type lacks
    // REMOTE_WRITE. Its contents are read with copies (`read_volatile_into`), since a window
    // may let a peer write it at any time.
    let buffer: Buffer = pd.alloc_mr(4096, access::WINDOW_BINDABLE)?;
    let mut src = pd.alloc_mr(MESSAGE.len(), access::LOCAL_READ)?;
    src.as_mut_slice().copy_from_slice(MESSAGE);
    let mut inbox = pd.alloc_mr(64, access::LOCAL_RW)?;

    if mw_type == 1 {
        step(1, "type 1 window, bound with ibv_bind_mw, advertised after the bind completed");
        let window = bind_type1(&pd, &peers, &buffer, &mut inbox)?;
        let remote = client_receives(&inbox)?;
        client_writes(&peers, &src, &buffer, remote)?;
        step(4, "server revokes the window: zero-length ibv_bind_mw (type 1 windows cannot be LOCAL_INV'd)");
        let mw = scope(|s| -> typed_verbs::Result<_> {
            let t = s.unbind_mw(&peers.server, window)?;
            let (c, unbound) = s.wait(t, WAIT)?;
            println!("  server: unbind completed: {:?}", c.status());
            // On failure the window comes back still bound, with the completion's error.
            unbound.map_err(|_| failed(c))
        })??;
        println!(
            "  server: the window is unbound; the rkey the client holds grants nothing now (the window's is {:#x})",
            mw.raw_rkey()
        );
        client_is_refused(&peers, &src, &buffer, remote)?;
    } else {
        step(1, "type 2 window, bound with a BIND_MW work request, advertised on the same QP right after it");
        let window = bind_type2(&pd, &peers, &buffer, &mut inbox)?;
        let remote = client_receives(&inbox)?;
        client_writes(&peers, &src, &buffer, remote)?;
        step(4, "server revokes the window: LOCAL_INV work request");
        let mw = scope(|s| -> typed_verbs::Result<_> {
            let t = s.post_send(&peers.server, LocalInv::new(window))?;
            let (c, unbound) = s.wait(t, WAIT)?;
            println!("  server: LOCAL_INV completed: {:?}", c.status());
            unbound.map_err(|_| failed(c))
        })??;
        println!(
            "  server: the window is invalidated; rkey {:#x} grants nothing now (a new bind would give a new rkey)",
            mw.raw_rkey()
        );
        client_is_refused(&peers, &src, &buffer, remote)?;
    }
    Ok(())
}

/// The error of a work request that completed with an error status.
fn failed(c: Completion) -> Error {
    Error::Completion(CompletionError { completion: c })
}

fn step(n: u32, what: &str) {
    println!("\n[{n}] {what}");
}

/// Type 1: `ibv_bind_mw`; the rkey exists for us only once the bind completed successfully,
/// then it is sent in an ordinary inline SEND.
fn bind_type1<'m>(
    pd: &Pd,
    peers: &Peers,
    buffer: &'m Buffer,
    inbox: &mut Mr<access::LocalRw>,
) -> Result<Window<'m, Type1>, Box<dyn std::error::Error>> {
    let mw = pd.alloc_mw::<Type1>()?;
    println!("  server: allocated a type 1 window, rkey {:#x} (grants nothing yet)", mw.raw_rkey());
    let window = scope(|s| -> typed_verbs::Result<_> {
        let t = s.bind_mw(&peers.server, mw, buffer, OFFSET, LEN, window::WRITE)?;
        let (c, bound) = s.wait(t, WAIT)?;
        println!("  server: bind completed: {:?}", c.status());
        // A failed bind hands the window back unbound, with its old rkey.
        let bound = bound.map_err(|_| failed(c))?;
        println!(
            "  server: window = buffer[{OFFSET}..{}], REMOTE_WRITE, rkey {:#x}",
            OFFSET + bound.len(),
            bound.rkey()
        );
        // Now, and only now, the rkey may leave: `bound` exists after a successful completion.
        let remote = bound.remote(..)?;
        let advert = WindowAdvert::of(&remote);
        let bytes = advert.encode();
        let r = s.post_recv(&peers.client, wr::Recv::new(inbox.slice_mut(..)?))?;
        let t = s.post_inline(&peers.server, wr::InlineSend::new(&bytes))?;
        s.wait(t, WAIT)?.0.ok()?;
        println!("  server: sent the window's address, length and rkey to the client ({} bytes)", bytes.len());
        s.wait(r, WAIT)?.0.ok()?;
        Ok(bound)
    })??;
    Ok(window)
}

/// Type 2: a BIND_MW work request; before its completion, the only legal way to hand out the
/// new rkey is a SEND on the same QP after it (`advertise_window`), which the QP executes after
/// the bind.
fn bind_type2<'m>(
    pd: &Pd,
    peers: &Peers,
    buffer: &'m Buffer,
    inbox: &mut Mr<access::LocalRw>,
) -> Result<Window<'m, Type2>, Box<dyn std::error::Error>> {
    let mw = pd.alloc_mw::<Type2>()?;
    println!("  server: allocated a type 2 window, rkey {:#x} (grants nothing yet)", mw.raw_rkey());
    let window = scope(|s| -> typed_verbs::Result<_> {
        let r = s.post_recv(&peers.client, wr::Recv::new(inbox.slice_mut(..)?))?;
        let bind = s.post_send(&peers.server, BindMw::new(mw, buffer, OFFSET, LEN, window::WRITE))?;
        println!("  server: posted BIND_MW for buffer[{OFFSET}..{}], REMOTE_WRITE", OFFSET + LEN);
        // `bind.rkey()` does not compile here: the bind has not completed. This SEND may carry
        // it because the QP executes it after the bind.
        let advert = s.advertise_window(&peers.server, &bind)?;
        println!("  server: posted the window's advertisement on the same QP, behind the bind");
        let (c, bound) = s.wait(bind, WAIT)?;
        println!("  server: bind completed: {:?}", c.status());
        let bound = bound.map_err(|_| failed(c))?;
        println!("  server: window rkey {:#x}", bound.rkey());
        s.wait(advert, WAIT)?.0.ok()?;
        s.wait(r, WAIT)?.0.ok()?;
        Ok(bound)
    })??;
    Ok(window)
}

/// The client decodes the advertisement it received.
fn client_receives(inbox: &Mr<access::LocalRw>) -> Result<RemoteSlice<window::Write>, Box<dyn std::error::Error>> {
    let advert = WindowAdvert::decode(&inbox.as_slice()[..WindowAdvert::LEN])?;
    println!("  client: received: window at {:#x}, {} bytes, rkey {:#x}", advert.addr, advert.len, advert.rkey);
    // The client states the rights it was told it has; if it claimed more, the server's device
    // would refuse the access, not corrupt anything.
    Ok(advert.remote::<window::Write>()?)
}

fn client_writes(
    peers: &Peers,
    src: &Mr<access::LocalRead>,
    buffer: &Buffer,
    remote: RemoteSlice<window::Write>,
) -> Result<(), Box<dyn std::error::Error>> {
    step(2, "client writes through the window");
    let status = write(peers, src, remote)?;
    println!("  client: RDMA WRITE of {} bytes completed: {status:?}", MESSAGE.len());
    if status != WcStatus::Success {
        return Err(format!("the write through the bound window failed: {status:?}").into());
    }
    step(3, "server looks at its buffer");
    let mut seen = vec![0u8; MESSAGE.len()];
    buffer.read_volatile_into(OFFSET as usize, &mut seen)?;
    println!("  server: buffer[{OFFSET}..] = {:?}", String::from_utf8_lossy(&seen));
    if seen != MESSAGE {
        return Err("the server's buffer does not hold what the client wrote".into());
    }
    let mut before = vec![0u8; OFFSET as usize];
    buffer.read_volatile_into(0, &mut before)?;
    if before.iter().any(|&b| b != 0) {
        return Err("bytes outside the window changed".into());
    }
    println!("  server: nothing outside the window changed");
    Ok(())
}

fn client_is_refused(
    peers: &Peers,
    src: &Mr<access::LocalRead>,
    buffer: &Buffer,
    remote: RemoteSlice<window::Write>,
) -> Result<(), Box<dyn std::error::Error>> {
    step(5, "client writes again with the same rkey");
    let mut before = vec![0u8; buffer.len()];
    buffer.read_volatile_into(0, &mut before)?;
    // At the end of the window this time, where a write getting through would show.
    let status = write(peers, src, remote.slice(LEN - MESSAGE.len() as u64, MESSAGE.len() as u64)?)?;
    println!("  client: RDMA WRITE completed: {status:?}");
    if status != WcStatus::RemAccessErr {
        return Err(format!("expected REM_ACCESS_ERR after the window was revoked, got {status:?}").into());
    }
    println!("  client: refused by the server's device: the rkey no longer grants anything");
    println!("  client: (a remote access error also moves the client's QP to the error state)");
    let mut after = vec![0u8; buffer.len()];
    buffer.read_volatile_into(0, &mut after)?;
    if after != before {
        return Err("the server's buffer changed after the window was revoked".into());
    }
    println!("  server: buffer unchanged");
    Ok(())
}

/// The client's RDMA WRITE of `MESSAGE` to `remote`; returns the completion status.
fn write(
    peers: &Peers,
    src: &Mr<access::LocalRead>,
    remote: RemoteSlice<window::Write>,
) -> typed_verbs::Result<WcStatus> {
    scope(|s| -> typed_verbs::Result<_> {
        let t = s.post_send(&peers.client, wr::Write::new(src.slice(..)?, remote))?;
        Ok(s.wait(t, WAIT)?.0.status())
    })?
}
