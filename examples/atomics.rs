//! `atomics`: compare-and-swap and fetch-and-add on an 8-byte word in another QP's memory.
//!
//! A remote atomic reads a 64-bit word on the remote side, changes it, and brings the value it
//! found back into a local 8-byte buffer; no other RDMA access to the word can come between
//! the read and the write on that device. Two RC queue pairs on one device, connected to each
//! other (loopback, as in `rdma_read_write`): the "owner" holds the word, the "client" operates
//! on it.
//!
//! Usage: `cargo run --example atomics [-- DEVICE [GID_INDEX]]` (defaults: the first device,
//! GID index 1 as on Soft-RoCE). Without RDMA hardware:
//! `scripts/softroce-run -- target/debug/examples/atomics`.

use std::process::ExitCode;
use std::time::Duration;

use typed_verbs::prelude::*;

const PORT: u8 = 1;
const WAIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("atomics: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Compare-and-swap and fetch-and-add on a word in another QP's memory (loopback).
#[derive(clap::Parser)]
struct Args {
    /// The device (default: the first one).
    device: Option<String>,
    /// The GID index.
    #[arg(default_value_t = 1)]
    gid_index: u8,
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let Args { device, gid_index } = clap::Parser::parse();
    let name = match device {
        Some(n) => n,
        None => devices()?.first().map(|d| d.name.clone()).ok_or("no RDMA device found")?,
    };

    let ctx = Context::open(&name)?;
    if ctx.query_device()?.atomic_cap() == typed_verbs_sys::IBV_ATOMIC_NONE {
        return Err(format!("{name} does not support atomic operations (atomic_cap = IBV_ATOMIC_NONE)").into());
    }
    let pd = ctx.alloc_pd()?;
    // A CQ holds what the queues completing on it can have outstanding: two QPs of 4 send and
    // 4 receive requests (the library refuses a CQ that could overrun).
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, ..QpCaps::default() };
    let cq = ctx.create_cq(16)?;

    // The owner's word. REMOTE_ATOMIC lets peers operate on it; ibv_reg_mr(3) requires
    // LOCAL_WRITE with it (leave `.local_write()` out and this does not compile).
    let word_access = Access::NONE.local_write().remote_atomic();
    let mut word = pd.alloc_mr(8, word_access)?;
    // Peers may change it at any time, so it is never a plain slice: copy in and out.
    word.write_volatile_from(0, &100u64.to_ne_bytes())?;
    // Where the client receives the value the word had before each operation. The device
    // writes it, so it needs LOCAL_WRITE.
    let mut result = pd.alloc_mr(8, access::LOCAL_RW)?;

    // The owner's QP must allow remote atomics; RcRtr/RcRts default to one outstanding
    // atomic (max_dest_rd_atomic / max_rd_atomic = 1).
    let owner = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let client = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let (eo, ec) = (owner.endpoint(PORT, gid_index, 1)?, client.endpoint(PORT, gid_index, 2)?);
    let connect = |qp: Qp<RC, RESET>, init: ConnectedInit, me: &Endpoint, peer: &Endpoint| -> typed_verbs::Result<_> {
        let qp = qp.to_init(&init)?;
        let av = AddressVector::global(PORT, peer.gid, gid_index);
        let qp = qp.to_rtr(&RcRtr::new(av, peer.qp_num, peer.psn))?;
        Ok(qp.to_rts(&RcRts::new(me.psn))?)
    };
    // The owner grants its peer what the word's registration allows (the remote bits of the
    // set: atomics); the client grants nothing.
    let _owner = connect(owner, ConnectedInit::new(PORT, word_access), &eo, &ec)?;
    let client = connect(client, ConnectedInit::new(PORT, Access::NONE), &ec, &eo)?;
    println!("connected RC QPs on {name}: owner {:#x}, client {:#x}", eo.qp_num, ec.qp_num);

    // What the client knows of the word: address, length, rkey, and the rights (atomic).
    let target = word.remote(..)?;
    let read_word = |word: &Mr<_>| -> typed_verbs::Result<u64> {
        let mut b = [0u8; 8];
        word.read_volatile_into(0, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    };
    println!("owner's word starts at {}", read_word(&word)?);

    // 1. Compare-and-swap: "if the word is 100, make it 200". It is 100: swapped.
    scope(|s| -> typed_verbs::Result<()> {
        let t = s.post_send(&client, wr::CompareSwap::new(result.slice_mut(..)?, target, 100, 200))?;
        s.wait(t, WAIT)?.0.ok()?;
        Ok(())
    })??;
    show("compare_and_swap(compare 100, swap 200): the word was 100, so it was swapped", &result, read_word(&word)?);

    // 2. The same again: the word is 200 now, not 100, so nothing changes; the client learns
    //    the current value from the result.
    scope(|s| -> typed_verbs::Result<()> {
        let t = s.post_send(&client, wr::CompareSwap::new(result.slice_mut(..)?, target, 100, 300))?;
        s.wait(t, WAIT)?.0.ok()?;
        Ok(())
    })??;
    show(
        "compare_and_swap(compare 100, swap 300): the word was not 100, so it was left alone",
        &result,
        read_word(&word)?,
    );

    // 3. Fetch-and-add: add 5 and return what was there.
    scope(|s| -> typed_verbs::Result<()> {
        let t = s.post_send(&client, wr::FetchAdd::new(result.slice_mut(..)?, target, 5))?;
        s.wait(t, WAIT)?.0.ok()?;
        Ok(())
    })??;
    show("fetch_and_add(5): added 5, whatever the word was", &result, read_word(&word)?);

    let last = read_word(&word)?;
    if last != 205 {
        return Err(format!("expected the word to end at 205, found {last}").into());
    }
    Ok(())
}

/// Prints both sides after an operation: what the client got back, what the owner holds.
fn show(op: &str, result: &Mr<access::LocalRw>, now: u64) {
    // No peer can write `result` (no remote rights), so once the scope is over it is a plain
    // slice. Atomics work on the word in the owner's byte order (x86: little endian).
    let old = u64::from_ne_bytes(result.as_slice().try_into().expect("8 bytes"));
    println!("\n{op}\n  client got back the old value: {old}\n  owner's word is now:          {now}");
}
