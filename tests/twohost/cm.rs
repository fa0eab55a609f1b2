//! The RDMA connection manager across the wire: our `rdma_server` / `rdma_client` examples on
//! host A against rdma-core's on host B, both roles. Neither client retries a refused connect
//! (it exits 1), so the client is re-run until the server listens, bounded.

use std::time::{Duration, Instant};

use crate::common::{c_tool, example, Proc, TcpPort};
use crate::peer::{local_addr, peer_addr, Peer};

/// Bound on one whole exchange (both processes, the client's re-runs included).
const DEADLINE: Duration = Duration::from_secs(90);

fn args(addr: &str, port: TcpPort) -> Vec<String> {
    ["-s", addr, "-p", &port.get().to_string()].iter().map(|s| s.to_string()).collect()
}

#[test]
fn our_rdma_server_on_a_serves_rdma_cores_rdma_client_on_b() {
    let peer = Peer::get();
    let args = args(&local_addr(), TcpPort::TwoHostCmOursOnA);
    let mut server = Proc::spawn("rdma_server (ours, host A)", &example("rdma_server"), &args);
    server.wait_for_line("rdma_server: start", DEADLINE).unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let client: Vec<&str> = std::iter::once("rdma_client").chain(args.iter().map(String::as_str)).collect();
    let out = loop {
        let (status, out) = peer.run(&client, DEADLINE);
        if status == 0 {
            break out;
        }
        assert!(start.elapsed() < DEADLINE, "rdma_client on B kept failing:\n{out}\n{}", server.output());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(out.contains("rdma_client: end 0"), "{out}");
    let Some((status, _)) = server.wait_exit(DEADLINE) else {
        server.stop();
        panic!("our rdma_server did not exit:\n{}", server.output());
    };
    assert!(status.success() && server.output().contains("rdma_server: end 0"), "{}", server.output());
}

#[test]
fn our_rdma_client_on_a_talks_to_rdma_cores_rdma_server_on_b() {
    let peer = Peer::get();
    let args = args(&peer_addr(), TcpPort::TwoHostCmOursOnB);
    let server: Vec<String> =
        std::iter::once(c_tool("rdma_server").display().to_string()).chain(args.clone()).collect();
    let mut server = peer.spawn("rdma_server (rdma-core)", &server);
    let start = Instant::now();
    loop {
        let mut client = Proc::spawn("rdma_client (ours, host A)", &example("rdma_client"), &args);
        let Some((status, _)) = client.wait_exit(DEADLINE) else {
            client.stop();
            panic!("our rdma_client did not exit:\n{}", client.output());
        };
        if status.success() {
            assert!(client.output().contains("rdma_client: end 0"), "{}", client.output());
            break;
        }
        assert!(start.elapsed() < DEADLINE, "our rdma_client kept failing:\n{}\n{}", client.output(), server.output());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(server.wait_exit(DEADLINE), Some(0), "rdma_server on B:\n{}", server.output());
}
