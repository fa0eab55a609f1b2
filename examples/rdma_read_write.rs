//! `rdma_read_write`: one-sided RDMA on a single device, between two RC queue pairs connected
//! to each other (loopback). The way a newcomer would learn the API:
//!
//! 1. open the device, allocate a protection domain and a completion queue;
//! 2. register memory with typed access rights;
//! 3. create two RC queue pairs and connect them (`Qp::connect`: RESET -> INIT -> RTR -> RTS);
//! 4. inside a `scope`, post an RDMA WRITE and an RDMA READ and wait for their completions.
//!
//! Usage: `cargo run --example rdma_read_write [-- DEVICE [GID_INDEX]]` (defaults: the first
//! device, the GID index of the port's IPv4 address, `Context::default_gid_index`). On a machine without RDMA hardware:
//! `scripts/softroce-run -- target/debug/examples/rdma_read_write`.

use std::time::Duration;

use typed_verbs::prelude::*;

const PORT: u8 = 1;

/// One-sided RDMA WRITE and READ between two RC queue pairs on one device (loopback).
#[derive(clap::Parser)]
struct Args {
    /// The device (default: the first one).
    device: Option<String>,
    /// The GID index (default: the GID of the port's IPv4 address, `Link::default_for`).
    gid_index: Option<u8>,
}

fn main() -> typed_verbs::Result<()> {
    let Args { device, gid_index } = clap::Parser::parse();
    let name = match device {
        Some(n) => n,
        None => devices()?
            .first()
            .map(|d| d.name.clone())
            .ok_or(Error::DeviceNotFound { name: "(any)".into(), available: vec![] })?,
    };

    let ctx = Context::open(&name)?;
    let pd = ctx.alloc_pd()?;
    // A CQ holds what the queues completing on it can have outstanding: here two QPs of 4
    // send and 4 receive requests (the library refuses a CQ that could overrun).
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, ..QpCaps::default() };
    let cq = ctx.create_cq(16)?;

    // The writer's source only needs local read; the target lets peers read and write.
    let mut src = pd.alloc_mr(4096, access::LOCAL_READ)?;
    src.as_mut_slice()[..26].copy_from_slice(b"written by an RDMA WRITE!\n");
    let target = pd.alloc_mr(4096, access::REMOTE_RW)?;
    // An RDMA READ writes into local memory: LOCAL_WRITE is required (the types insist).
    let mut back = pd.alloc_mr(4096, access::LOCAL_RW)?;

    // Two RC queue pairs, connected to each other: each side's endpoint (its QP number, a
    // random PSN, the GID of the port's IPv4 address) is what it would send a remote peer.
    // Each QP grants its peer the remote rights of `target`'s registration.
    let link = match gid_index {
        Some(gid_index) => Link { port: PORT, gid_index },
        None => Link::default_for(&ctx, PORT)?,
    };
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let (ea, eb) = (a.local_endpoint(link)?, b.local_endpoint(link)?);
    let a = a.connect(link, access::REMOTE_RW, &ea, &eb)?;
    let _b = b.connect(link, access::REMOTE_RW, &eb, &ea)?;
    println!("connected RC QPs {:#x} <-> {:#x} on {name}", ea.qp_num, eb.qp_num);

    scope(|s| -> typed_verbs::Result<()> {
        // WRITE src -> target. `src` stays borrowed until the completion hands it back.
        let t = s.post_send(&a, wr::Write::new(src.slice(..26)?, target.remote(..)?))?;
        let (c, _src) = s.wait(t, Duration::from_secs(30))?;
        println!("RDMA WRITE completed: {:?}", c.ok()?.status());

        // READ target -> back.
        let t = s.post_send(&a, wr::Read::new(back.slice_mut(..26)?, target.remote(..26)?))?;
        let (c, _back) = s.wait(t, Duration::from_secs(30))?;
        println!("RDMA READ completed: {:?}", c.ok()?.status());
        Ok(())
    })??;

    // The target may be written by peers at any time, so it is never a plain slice: copy out.
    let mut seen = [0u8; 26];
    target.read_volatile_into(0, &mut seen)?;
    print!("target now holds: {}", String::from_utf8_lossy(&seen));
    // `back` cannot be written by peers, so it is a plain slice once the scope is over.
    print!("read back:        {}", String::from_utf8_lossy(&back.as_slice()[..26]));
    assert_eq!(&back.as_slice()[..26], &src.as_slice()[..26]);
    Ok(())
}
