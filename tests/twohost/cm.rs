//! The RDMA connection manager across the wire: our `rdma_server` / `rdma_client`, `rping` and
//! `udaddy` examples on host A against rdma-core's on host B, both roles, and a multicast group
//! joined on A whose datagrams rdma-core's `mckey` receives on B. Neither `rdma_client` retries
//! a refused connect (it exits 1), nor does the C `rping` client: they are re-run until the
//! server listens, bounded (our `rping` client retries by itself).

use std::time::{Duration, Instant};

use crate::common::{
    assert_lines_in_order, c_tool, example, expected_pings, lines_with, Proc, TcpPort, UDADDY_CLIENT_LINES,
    UDADDY_SERVER_LINES,
};
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

/// Runs the C client `client` on host B until it exits 0, and its output: a run may fail before
/// it reaches our `server` on A (the first address resolution across the wire), which then must
/// still be waiting for it. Bounded by [`DEADLINE`].
fn run_on_b_until_it_succeeds(peer: &Peer, client: &[&str], server: &mut Proc) -> String {
    let start = Instant::now();
    loop {
        let (status, out) = peer.run(client, DEADLINE);
        if status == 0 {
            return out;
        }
        assert!(server.poll().is_none(), "our server ended after a failed client:\n{out}\n{}", server.output());
        assert!(start.elapsed() < DEADLINE, "{} on B kept failing:\n{out}\n{}", client[0], server.output());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `rping`'s address and port options for `addr` and `port`, then `rest`.
fn rping_args(addr: &str, port: TcpPort, rest: &[&str]) -> Vec<String> {
    let head = ["-a", addr, "-p", &port.get().to_string()].map(String::from);
    head.into_iter().chain(rest.iter().map(|s| s.to_string())).collect()
}

#[test]
fn our_rping_server_on_a_serves_rdma_cores_rping_client_on_b() {
    let peer = Peer::get();
    let port = TcpPort::TwoHostRpingOursOnA;
    let server_args = rping_args(&local_addr(), port, &["-s", "-v", "-d", "--timeout", "60", "--accept-timeout", "90"]);
    let mut server = Proc::spawn("rping -s (ours, host A)", &example("rping"), &server_args);
    server.wait_for_line("rdma_listen on", DEADLINE).unwrap_or_else(|e| panic!("{e}"));
    let rping = c_tool("rping").display().to_string();
    let client: Vec<String> =
        std::iter::once(rping).chain(rping_args(&local_addr(), port, &["-c", "-v", "-V", "-C", "5"])).collect();
    let client: Vec<&str> = client.iter().map(String::as_str).collect();
    let out = run_on_b_until_it_succeeds(&peer, &client, &mut server);
    // The C client validated (-V) and printed each ping.
    assert_eq!(lines_with(&out, "ping data: "), expected_pings("ping data: ", 5, 64), "{out}");
    let Some((status, _)) = server.wait_exit(DEADLINE) else {
        server.stop();
        panic!("our rping server did not exit:\n{}", server.output());
    };
    let out = server.output();
    assert!(status.success(), "{out}");
    assert_eq!(lines_with(&out, "server ping data: "), expected_pings("server ping data: ", 5, 64), "{out}");
}

#[test]
fn our_rping_client_on_a_pings_rdma_cores_rping_server_on_b() {
    let peer = Peer::get();
    let port = TcpPort::TwoHostRpingOursOnB;
    let server: Vec<String> = std::iter::once(c_tool("rping").display().to_string())
        .chain(rping_args(&peer_addr(), port, &["-s", "-v", "-S", "200"]))
        .collect();
    let mut server = peer.spawn("rping -s (rdma-core)", &server);
    // Our client retries a refused connection (the C server not listening yet) for --timeout.
    let client_args = rping_args(&peer_addr(), port, &["-c", "-v", "-V", "-C", "5", "-S", "200", "--timeout", "60"]);
    let mut client = Proc::spawn("rping -c (ours, host A)", &example("rping"), &client_args);
    let out = client.expect_success(DEADLINE);
    assert_eq!(lines_with(&out, "ping data: "), expected_pings("ping data: ", 5, 200), "{out}");
    assert_eq!(server.wait_exit(DEADLINE), Some(0), "rping -s on B:\n{}", server.output());
    let out = server.output();
    assert_eq!(lines_with(&out, "server ping data: "), expected_pings("server ping data: ", 5, 200), "{out}");
}

#[test]
fn our_udaddy_server_on_a_answers_rdma_cores_udaddy_client_on_b() {
    let peer = Peer::get();
    // udaddy's port is fixed (7174, of RDMA_PS_UDP); one such test runs at a time here.
    let mut server = Proc::spawn("udaddy (ours, host A)", &example("udaddy"), &["-C".into(), "5".into()]);
    server.wait_for_line("udaddy: starting server", DEADLINE).unwrap_or_else(|e| panic!("{e}"));
    let udaddy = c_tool("udaddy").display().to_string();
    let client = [udaddy.as_str(), "-s", &local_addr(), "-C", "5"];
    let out = run_on_b_until_it_succeeds(&peer, &client, &mut server);
    assert_lines_in_order(&out, UDADDY_CLIENT_LINES);
    let out = server.expect_success(DEADLINE);
    assert_lines_in_order(&out, UDADDY_SERVER_LINES);
}

#[test]
fn our_udaddy_client_on_a_talks_to_rdma_cores_udaddy_server_on_b() {
    let peer = Peer::get();
    let server = [c_tool("udaddy").display().to_string(), "-C".into(), "5".into()];
    let mut server = peer.spawn("udaddy (rdma-core, host B)", &server);
    let start = Instant::now();
    // The C server listens a moment after it starts: a resolution that finds nobody is re-run.
    let out = loop {
        let args = ["-s".to_string(), peer_addr(), "-C".into(), "5".into(), "--timeout".into(), "30".into()];
        let mut client = Proc::spawn("udaddy (ours, host A)", &example("udaddy"), &args);
        let Some((status, _)) = client.wait_exit(DEADLINE) else {
            client.stop();
            panic!("our udaddy client did not exit:\n{}", client.output());
        };
        if status.success() {
            break client.output();
        }
        assert!(start.elapsed() < DEADLINE, "our udaddy kept failing:\n{}\n{}", client.output(), server.output());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_lines_in_order(&out, UDADDY_CLIENT_LINES);
    assert_eq!(server.wait_exit(DEADLINE), Some(0), "udaddy on B:\n{}", server.output());
    assert_lines_in_order(&server.output(), UDADDY_SERVER_LINES);
}

#[test]
fn rdma_cores_mckey_on_b_receives_our_multicast_sends_from_a() {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use typed_verbs::cm::CmId;
    use typed_verbs::prelude::*;

    let peer = Peer::get();
    let group = IpAddr::V4(Ipv4Addr::new(239, 7, 0, 200));
    // Line-buffered, so that its "joined" line is seen before it exits.
    let receiver = ["stdbuf", "-oL", "mckey", "-m", &group.to_string(), "-b", &peer_addr(), "-C", "5"].map(|s| {
        if s == "mckey" {
            c_tool("mckey").display().to_string()
        } else {
            s.to_string()
        }
    });
    let mut receiver = peer.spawn("mckey (rdma-core, host B)", &receiver);
    receiver.wait_for_line("mckey: joined", DEADLINE).unwrap_or_else(|e| panic!("{e}"));

    let local: IpAddr = local_addr().parse().expect("host A's address");
    let id = CmId::new_ud()
        .unwrap()
        .resolve_addr(Some(SocketAddr::new(local, 0)), SocketAddr::new(group, 0), Duration::from_secs(10))
        .expect("the group's address resolved from host A's");
    let ctx = Context::open(&id.device_name().expect("a device")).unwrap();
    let (pd, cq) = (ctx.alloc_pd().unwrap(), ctx.create_cq(256).unwrap());
    let qp = id.ready_qp(pd.create_qp::<UD>(&QpConfig::new(&cq)).unwrap()).unwrap();
    let joined = id.join_multicast(group, &qp, &pd, Duration::from_secs(30)).expect("joined on host A");
    let to = joined.peer();
    let src = pd.alloc_mr(100, access::LOCAL_RW).unwrap();
    scope(|s| {
        for _ in 0..5 {
            let wr = wr::SendImm::new(src.slice(..).unwrap(), qp.qp_num()).to(to.ah(), to.qp_num(), to.qkey());
            let t = s.post_send(&qp, wr).unwrap();
            assert!(s.wait(t, DEADLINE).unwrap().0.is_success());
        }
    })
    .unwrap();
    assert_eq!(receiver.wait_exit(DEADLINE), Some(0), "mckey on B:\n{}", receiver.output());
    let out = receiver.output();
    assert!(out.contains("data transfers complete") && out.contains("return status 0"), "{out}");
    joined.leave().expect("detach and leave");
}
