//! `buffer_pool`: a program's own buffer pool, registered once and used in pieces, the way a
//! storage engine or an RPC stack uses its arena.
//!
//! 1. The program allocates one arena of 4 MiB itself: huge pages when built with the
//!    `memmap2` feature and the system has 2 MiB huge pages reserved, heap memory otherwise.
//! 2. It registers the arena once ([`Pd::register`]) and, in one scope, posts at the same time
//!    8 SENDs and 8 RDMA WRITEs from disjoint 4 KiB slots of it, and one SEND gathered from two
//!    slots (a header and a body: a scatter/gather list), to a second RC QP on the same device
//!    (loopback), which receives into its own buffers.
//! 3. It deregisters the arena and gets the same buffer back, registers it again, and cuts it
//!    into owned 64 KiB chunks, which travel in owned work requests (`post_send_owned`) and
//!    come back with their completions.
//!
//! Every byte that arrives is checked; the program exits 0 only if all of it is right.
//!
//! Usage: `buffer_pool [DEVICE [GID_INDEX]]` (defaults: `$TYPED_VERBS_DEVICE` or the first
//! device, the GID index of the port's IPv4 address). Build with huge pages:
//! `cargo build --release --example buffer_pool --features memmap2`.

use std::time::Duration;

use typed_verbs::caller::{Registered, StableBuffer};
use typed_verbs::prelude::*;

const PORT: u8 = 1;
const ARENA: usize = 4 << 20;
const SLOT: usize = 4096;
const SLOTS: usize = 8;
const CHUNK: usize = 64 << 10;
const WAIT: Duration = Duration::from_secs(30);

/// The byte at `i` of slot `slot`'s message.
fn pattern(slot: usize, i: usize) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add((slot as u8).wrapping_mul(31).wrapping_add(1))
}

/// A program's own buffer pool, registered once and used in pieces.
#[derive(clap::Parser)]
struct Args {
    /// The device (default: the first one).
    #[arg(env = "TYPED_VERBS_DEVICE")]
    device: Option<String>,
    /// The GID index (default: the GID of the port's IPv4 address).
    gid_index: Option<u8>,
}

fn main() {
    let Args { device: dev, gid_index: gid } = clap::Parser::parse();
    let result = match huge_arena() {
        Some(arena) => {
            println!("arena: {} MiB of 2 MiB huge pages (the program's own mapping)", ARENA >> 20);
            run(dev, gid, arena)
        }
        None => {
            println!("arena: {} MiB of heap memory (the program's own Vec)", ARENA >> 20);
            run(dev, gid, vec![0u8; ARENA])
        }
    };
    match result {
        Ok(()) => println!("buffer pool: every byte checked, all correct"),
        Err(e) => {
            eprintln!("buffer_pool: {e}");
            std::process::exit(1);
        }
    }
}

/// A 4 MiB arena in 2 MiB huge pages, if this build can map one and the system has them.
#[cfg(feature = "memmap2")]
fn huge_arena() -> Option<memmap2::MmapMut> {
    memmap2::MmapOptions::new().len(ARENA).huge(Some(21)).map_anon().ok()
}

#[cfg(not(feature = "memmap2"))]
fn huge_arena() -> Option<Vec<u8>> {
    None
}

/// A failed check, as an error of this program.
fn check(ok: bool, what: impl FnOnce() -> String) -> typed_verbs::Result<()> {
    if ok {
        return Ok(());
    }
    eprintln!("buffer_pool: wrong data: {}", what());
    std::process::exit(1);
}

fn run<B: StableBuffer>(dev: Option<String>, gid: Option<u8>, arena: B) -> typed_verbs::Result<()> {
    let dev = match dev {
        Some(d) => d,
        None => devices()?
            .first()
            .map(|d| d.name.clone())
            .ok_or(Error::DeviceNotFound { name: "(any)".into(), available: vec![] })?,
    };
    let ctx = Context::open(&dev)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(128)?;
    let caps = QpCaps { max_send_wr: 32, max_recv_wr: 32, max_send_sge: 2, ..QpCaps::default() };
    let link = match gid {
        Some(gid_index) => Link { port: PORT, gid_index },
        None => Link::default_for(&ctx, PORT)?,
    };
    let a = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let b = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let (ea, eb) = (a.local_endpoint(link)?, b.local_endpoint(link)?);
    let a = a.connect(link, access::LOCAL_REMOTE_WRITE, &ea, &eb)?;
    let b = b.connect(link, access::LOCAL_REMOTE_WRITE, &eb, &ea)?;

    // The pool, registered once. The device only reads it (sources of SENDs and WRITEs), so it
    // stays a plain slice for the program between requests.
    let mut pool: Registered<access::LocalRw, B> = pd.register(arena, access::LOCAL_RW)?;
    let base = pool.addr();
    for slot in 0..SLOTS + 2 {
        let bytes = &mut pool.as_mut_slice()[slot * SLOT..(slot + 1) * SLOT];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = pattern(slot, i);
        }
    }
    // The receiving side's memory: receive buffers, and a target for the RDMA WRITEs.
    let mut inbox = pd.alloc_mr((SLOTS + 1) * 2 * SLOT, access::LOCAL_RW)?;
    let target = pd.alloc_mr(SLOTS * SLOT, access::REMOTE_RW)?;

    scope(|s| -> typed_verbs::Result<()> {
        // One receive per message, into disjoint views of the inbox.
        let mut rest = inbox.slice_mut(..)?;
        let mut receives = Vec::new();
        for _ in 0..=SLOTS {
            let (slot, tail) = rest.split_at(2 * SLOT)?;
            receives.push(s.post_recv(&b, wr::Recv::new(slot))?);
            rest = tail;
        }
        // 8 SENDs and 8 RDMA WRITEs from the pool's slots, all in flight at once; then one SEND
        // gathered from slot 8 (a 64-byte header) and slot 9 (the body).
        let mut sends = Vec::new();
        for slot in 0..SLOTS {
            let view = pool.slice(slot * SLOT..(slot + 1) * SLOT)?;
            sends.push(s.post_send(&a, wr::Send::new(view))?);
            let dst = target.remote(slot * SLOT..(slot + 1) * SLOT)?;
            sends.push(s.post_send(&a, wr::Write::new(view, dst))?);
        }
        let header = pool.slice(SLOTS * SLOT..SLOTS * SLOT + 64)?;
        let body = pool.slice((SLOTS + 1) * SLOT..(SLOTS + 2) * SLOT)?;
        let gathered = s.post_send(&a, wr::Send::new((header, body)))?;
        for t in sends {
            s.wait(t, WAIT)?.0.ok()?;
        }
        s.wait(gathered, WAIT)?.0.ok()?;
        for (k, t) in receives.into_iter().enumerate() {
            let (c, _) = s.wait(t, WAIT)?;
            let want = if k < SLOTS { SLOT } else { 64 + SLOT };
            check(c.ok()?.byte_len() as usize == want, || format!("message {k}: {c:?}"))?;
        }
        Ok(())
    })??;
    println!(
        "scope: {SLOTS} SENDs and {SLOTS} RDMA WRITEs from disjoint slots of one registration, and a gathered SEND"
    );

    let inbox = inbox.as_slice();
    for slot in 0..SLOTS {
        let got = &inbox[slot * 2 * SLOT..][..SLOT];
        check(got.iter().enumerate().all(|(i, &b)| b == pattern(slot, i)), || format!("SEND of slot {slot}"))?;
        let mut written = vec![0u8; SLOT];
        target.read_volatile_into(slot * SLOT, &mut written)?;
        check(written.iter().enumerate().all(|(i, &b)| b == pattern(slot, i)), || format!("WRITE of slot {slot}"))?;
    }
    let gathered = &inbox[SLOTS * 2 * SLOT..][..64 + SLOT];
    let header_ok = gathered[..64].iter().enumerate().all(|(i, &b)| b == pattern(SLOTS, i));
    let body_ok = gathered[64..].iter().enumerate().all(|(i, &b)| b == pattern(SLOTS + 1, i));
    check(header_ok && body_ok, || "the gathered SEND".into())?;

    // The arena back, the same memory; registered again, and cut into owned chunks.
    let mut arena = pool.deregister().map_err(|(e, _)| e)?;
    check(arena.stable_bytes().as_ptr() as u64 == base, || "deregister handed back another buffer".into())?;
    let chunks = pd.register(arena, access::LOCAL_RW)?.into_mr().into_chunks(CHUNK)?;
    println!("owned: the arena handed back and registered again, as {} chunks of {} KiB", chunks.len(), CHUNK >> 10);
    let mut sink = pd.alloc_mr(4 * CHUNK, access::LOCAL_RW)?.into_chunks(CHUNK)?;
    let mut chunks = chunks.into_iter();
    let mut in_flight = Vec::new();
    for (k, mut chunk) in chunks.by_ref().take(4).enumerate() {
        chunk.as_mut_slice().fill(0xa0 + k as u8);
        let recv = b.post_recv_owned(wr::Recv::new(sink.remove(0))).map_err(|e| e.error)?;
        let send = a.post_send_owned(wr::Send::new(chunk)).map_err(|e| e.error)?;
        in_flight.push((send, recv));
    }
    for (k, (send, recv)) in in_flight.into_iter().enumerate() {
        let (c, chunk) = send.wait(WAIT).map_err(|e| e.error)?;
        c.ok()?;
        let (c, got) = recv.wait(WAIT).map_err(|e| e.error)?;
        c.ok()?;
        let want = 0xa0 + k as u8;
        check(chunk.as_slice().iter().all(|&b| b == want), || format!("chunk {k} came back changed"))?;
        check(got.as_slice().iter().all(|&b| b == want), || format!("owned SEND {k}"))?;
    }
    println!("owned: 4 chunks sent in owned work requests and handed back with their completions");
    Ok(())
}
