//! `rdma_client`: librdmacm's `rdma_client` example (rdma-core), written with this library, and
//! interoperable with the C `rdma_server` (and our `rdma_server` with the C `rdma_client`).
//!
//! Resolves the server's address and route (the RDMA connection manager, `CmId`), posts a
//! 16-byte receive, connects, sends 16 bytes, waits for the send and for the server's answer,
//! and disconnects. Prints `rdma_client: start` and `rdma_client: end STATUS` as the C tool
//! does.
//!
//! Usage: `rdma_client [-s SERVER_ADDRESS] [-p PORT_NUMBER] [-t TIMEOUT_SECS]` (defaults:
//! 127.0.0.1, port 7471, 60 s for each wait).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use typed_verbs::cm::{CmId, ConnParam};
use typed_verbs::prelude::*;

#[path = "common/cm_args.rs"]
mod cm_args;

fn main() {
    // A bad command line exits with status 2 and the usage.
    let opts = <cm_args::Options as clap::Parser>::parse();
    println!("rdma_client: start");
    let status = match run(&opts) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rdma_client: {e}");
            1
        }
    };
    println!("rdma_client: end {status}");
    std::process::exit(status);
}

fn run(opts: &cm_args::Options) -> typed_verbs::Result<()> {
    let id = CmId::new()?.resolve_addr(
        None,
        SocketAddr::new(opts.addr.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)), opts.port),
        opts.timeout,
    )?;
    let id = id.resolve_route(opts.timeout)?;
    let dev = id.device_name().ok_or(Error::DeviceNotFound { name: "(the route's)".into(), available: vec![] })?;
    let ctx = Context::open(&dev)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(8)?;
    let caps = QpCaps { max_send_wr: 1, max_recv_wr: 1, max_inline_data: 16, ..QpCaps::default() };
    let qp = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps))?;
    let connecting = id.prepare(qp, Access::NONE)?;
    let recv_buf = pd.alloc_mr(16, access::LOCAL_RW)?.into_chunks(16)?.remove(0);
    let recv = connecting.qp().post_recv_owned(wr::Recv::new(recv_buf)).map_err(|e| e.error)?;
    let conn = connecting.connect(&ConnParam::default(), opts.timeout)?;
    let msg = [0u8; 16];
    scope(|s| -> typed_verbs::Result<()> {
        let t = s.post_inline(conn.qp(), wr::InlineSend::new(&msg)).map_err(|e| e.error)?;
        s.wait(t, opts.timeout)?.0.ok()?;
        Ok(())
    })??;
    let (c, _answer) = recv.wait(opts.timeout).map_err(|e| e.error)?;
    c.ok()?;
    conn.disconnect()?;
    Ok(())
}
