//! `rdma_server`: librdmacm's `rdma_server` example (rdma-core), written with this library, and
//! interoperable with the C `rdma_client` (and our `rdma_client` with the C `rdma_server`).
//!
//! Listens (the RDMA connection manager, `CmListener`), takes one connection request, posts a
//! 16-byte receive before accepting it, waits for the client's message, answers with 16 bytes
//! and disconnects. Prints `rdma_server: start` and `rdma_server: end STATUS` as the C tool does.
//!
//! Usage: `rdma_server [-s SERVER_ADDRESS] [-p PORT_NUMBER] [-t TIMEOUT_SECS]` (defaults: every
//! address, port 7471, 60 s for each wait).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use typed_verbs::cm::{CmListener, ConnParam};
use typed_verbs::prelude::*;

#[path = "common/cm_args.rs"]
mod cm_args;

fn main() {
    // A bad command line exits with status 2 and the usage.
    let opts = <cm_args::Options as clap::Parser>::parse();
    println!("rdma_server: start");
    let status = match run(&opts) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rdma_server: {e}");
            1
        }
    };
    println!("rdma_server: end {status}");
    std::process::exit(status);
}

fn run(opts: &cm_args::Options) -> typed_verbs::Result<()> {
    let listener =
        CmListener::bind(SocketAddr::new(opts.addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), opts.port), 1)?;
    let req = listener.next_request(opts.timeout)?;
    let dev = req.device_name().ok_or(Error::DeviceNotFound { name: "(the request's)".into(), available: vec![] })?;
    let ctx = Context::open(&dev)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(8)?;
    let caps = QpCaps { max_send_wr: 1, max_recv_wr: 1, max_inline_data: 16, ..QpCaps::default() };
    let qp = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let accepting = req.prepare(qp, Access::NONE, ConnParam::default())?;
    // The client sends as soon as it is connected: the receive is posted first.
    let recv_buf = pd.alloc_mr(16, access::LOCAL_RW)?.into_chunks(16)?.remove(0);
    let recv = accepting.qp().post_recv_owned(wr::Recv::new(recv_buf)).map_err(|e| e.error)?;
    let conn = accepting.accept(opts.timeout)?;
    let (c, _msg) = recv.wait(opts.timeout).map_err(|e| e.error)?;
    c.ok()?;
    let answer = [0u8; 16];
    scope(|s| -> typed_verbs::Result<()> {
        let t = s.post_inline(conn.qp(), wr::InlineSend::new(&answer)).map_err(|e| e.error)?;
        s.wait(t, opts.timeout)?.0.ok()?;
        Ok(())
    })??;
    conn.disconnect()?;
    Ok(())
}
