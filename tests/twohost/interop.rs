//! Our pingpong examples against rdma-core's C tools across the wire, both roles: our example
//! on host A with the C tool on host B, and the C tool on host A with our example on host B,
//! with `-c` on both sides (the C tool checks its page marks, ours every received byte).
//! The server starts first on its host; the client is given the server's address.

use std::time::{Duration, Instant};

use crate::common::{assert_pingpong_checked, c_tool, device_name, example, gid_index, Proc, TcpPort};
use crate::peer::{local_addr, peer_addr, Peer, RemoteProc};

/// Bound on one whole ping-pong (both processes).
const DEADLINE: Duration = Duration::from_secs(120);
/// Small: an RC round trip across the wire takes tens of milliseconds under emulation.
const ITERS: u32 = 40;
const SIZE: u32 = 4096;
/// `ibv_ud_pingpong` refuses messages larger than the port's MTU (1024 on rxe over a 1500-byte
/// link).
const UD_SIZE: u32 = 1024;
/// QPs per side in the SRQ runs.
const SRQ_QPS: &str = "4";

fn args(port: TcpPort, size: u32, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "-d",
        &device_name(),
        "-g",
        &gid_index().to_string(),
        "-p",
        &port.get().to_string(),
        "-n",
        &ITERS.to_string(),
        "-s",
        &size.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Both sides printed their result lines; each printed the other's QP numbers as remote.
fn assert_results(server: &str, client: &str, size: u32, report: &str) {
    let bytes = format!("{} bytes in ", u64::from(size) * u64::from(ITERS) * 2);
    let iters = format!("{ITERS} iters in ");
    for out in [server, client] {
        assert!(out.contains(&bytes) && out.contains(&iters), "missing result lines {bytes:?} {iters:?}:\n{report}");
    }
    let qpns = |out: &str, which: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains(which))
            .filter_map(|l| l.find("QPN ").map(|at| l[at + 4..at + 12].to_string()))
            .collect()
    };
    let local = qpns(server, "local address");
    assert!(!local.is_empty(), "no local address printed:\n{report}");
    assert_eq!(local, qpns(client, "remote address"), "QPNs differ:\n{report}");
    assert_eq!(qpns(client, "local address"), qpns(server, "remote address"), "QPNs differ:\n{report}");
    // Across the wire: each side's GID is its own host's address (the server runs on host A,
    // the client on host B, in both placements), and each side addressed the other's.
    let gids = |out: &str, which: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains(which))
            .filter_map(|l| l.split_once("GID ").map(|(_, g)| g.trim().to_string()))
            .collect()
    };
    let (a, b) = (format!("::ffff:{}", local_addr()), format!("::ffff:{}", peer_addr()));
    for (out, side, mine, theirs) in [(server, "server (host A)", &a, &b), (client, "client (host B)", &b, &a)] {
        let (local, remote) = (gids(out, "local address"), gids(out, "remote address"));
        assert!(
            !local.is_empty() && local.iter().all(|g| g == mine),
            "{side}: local GIDs {local:?}, not {mine}:\n{report}"
        );
        assert!(
            !remote.is_empty() && remote.iter().all(|g| g == theirs),
            "{side}: remote GIDs {remote:?}, not {theirs}:\n{report}"
        );
    }
}

/// Where our example runs.
#[derive(Clone, Copy, PartialEq)]
enum Ours {
    /// Our example is the server on host A, the C tool the client on host B.
    ServerOnA,
    /// The C tool is the server on host A, our example the client on host B.
    ClientOnB,
}

fn pingpong(ours: &str, theirs: &str, placement: Ours, port: TcpPort, size: u32, extra: &[&str]) {
    let peer = Peer::get();
    let start = Instant::now();
    let server_args = args(port, size, extra);
    let mut client_args = args(port, size, extra);
    let (server_out, client_out, report) = match placement {
        Ours::ServerOnA => {
            let mut sa = server_args;
            sa.extend(["--timeout".into(), "60".into(), "--accept-timeout".into(), "100".into()]);
            let mut server = Proc::spawn(&format!("{ours} (server, host A)"), &example(ours), &sa);
            if let Err(e) = server.wait_for_line("waiting for a client", Duration::from_secs(60)) {
                panic!("{e}\n{}", server.output());
            }
            client_args.insert(0, c_tool(theirs).display().to_string());
            client_args.push(local_addr());
            let mut client = peer.spawn(&format!("{theirs} (client)"), &client_args);
            let c = client.wait_exit(DEADLINE);
            let s = server.wait_exit(DEADLINE.saturating_sub(start.elapsed())).map(|(st, _)| st);
            let report = format!(
                "----- {}: {s:?}\n{}\n----- {}: {c:?}\n{}",
                server.label,
                server.output(),
                client.label,
                client.output()
            );
            assert_eq!(c, Some(0), "the C client on host B failed:\n{report}");
            assert!(s.is_some_and(|st| st.success()), "our server on host A failed:\n{report}");
            (server.output(), client.output(), report)
        }
        Ours::ClientOnB => {
            let mut server = Proc::spawn(&format!("{theirs} (server, host A)"), &c_tool(theirs), &server_args);
            client_args.insert(0, example(ours).display().to_string());
            client_args.extend([local_addr(), "--timeout".into(), "60".into()]);
            let mut client: RemoteProc = peer.spawn(&format!("{ours} (client)"), &client_args);
            let c = client.wait_exit(DEADLINE);
            let s = server.wait_exit(DEADLINE.saturating_sub(start.elapsed())).map(|(st, _)| st);
            let report = format!(
                "----- {}: {s:?}\n{}\n----- {}: {c:?}\n{}",
                server.label,
                server.output(),
                client.label,
                client.output()
            );
            assert_eq!(c, Some(0), "our client on host B failed:\n{report}");
            assert!(s.is_some_and(|st| st.success()), "the C server on host A failed:\n{report}");
            (server.output(), client.output(), report)
        }
    };
    assert_results(&server_out, &client_out, size, &report);
    let (ours_out, theirs_out) = match placement {
        Ours::ServerOnA => (&server_out, &client_out),
        Ours::ClientOnB => (&client_out, &server_out),
    };
    // srq_pingpong counts messages over all QPs and may receive up to -q - 1 more.
    assert_pingpong_checked(ours_out, theirs_out, ITERS, ours != "srq_pingpong", &report);
    println!("{report}\n{ours} vs {theirs} across hosts: {:?}", start.elapsed());
}

#[test]
fn rc_pingpong_ours_on_a_c_on_b() {
    pingpong("rc_pingpong", "ibv_rc_pingpong", Ours::ServerOnA, TcpPort::TwoHostRcOursOnA, SIZE, &["-c"]);
}

#[test]
fn rc_pingpong_c_on_a_ours_on_b() {
    pingpong("rc_pingpong", "ibv_rc_pingpong", Ours::ClientOnB, TcpPort::TwoHostRcOursOnB, SIZE, &["-c"]);
}

#[test]
fn uc_pingpong_ours_on_a_c_on_b() {
    pingpong("uc_pingpong", "ibv_uc_pingpong", Ours::ServerOnA, TcpPort::TwoHostUcOursOnA, SIZE, &["-c"]);
}

#[test]
fn uc_pingpong_c_on_a_ours_on_b() {
    pingpong("uc_pingpong", "ibv_uc_pingpong", Ours::ClientOnB, TcpPort::TwoHostUcOursOnB, SIZE, &["-c"]);
}

#[test]
fn ud_pingpong_ours_on_a_c_on_b() {
    pingpong("ud_pingpong", "ibv_ud_pingpong", Ours::ServerOnA, TcpPort::TwoHostUdOursOnA, UD_SIZE, &["-c"]);
}

#[test]
fn ud_pingpong_c_on_a_ours_on_b() {
    pingpong("ud_pingpong", "ibv_ud_pingpong", Ours::ClientOnB, TcpPort::TwoHostUdOursOnB, UD_SIZE, &["-c"]);
}

#[test]
fn srq_pingpong_ours_on_a_c_on_b() {
    pingpong(
        "srq_pingpong",
        "ibv_srq_pingpong",
        Ours::ServerOnA,
        TcpPort::TwoHostSrqOursOnA,
        SIZE,
        &["-q", SRQ_QPS, "-c"],
    );
}

#[test]
fn srq_pingpong_c_on_a_ours_on_b() {
    pingpong(
        "srq_pingpong",
        "ibv_srq_pingpong",
        Ours::ClientOnB,
        TcpPort::TwoHostSrqOursOnB,
        SIZE,
        &["-q", SRQ_QPS, "-c"],
    );
}
