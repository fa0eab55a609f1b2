//! rdma-core's `rping` (package rdmacm-utils) and our `examples/rping.rs` against each other on
//! the device's address: our server with the C client, our client with the C server, ours with
//! ours. Each side's `-v` lines must be exactly the ping data rping.c's client writes (its
//! format, its letters, one line per ping), the validating client (`-V`) must exit 0, and so
//! must the server once the client disconnected. Then the failures: a client whose pings do
//! not fit the server's buffer, and a client with nobody to talk to, both ending non-zero in
//! bounded time. Every process is bounded.

use std::time::{Duration, Instant};

use crate::cm::local_ip;
use crate::common::{c_tool, example, expected_pings, lines_with, Proc, TcpPort, WAIT};

/// Bound on one process (a few pings, under emulation).
const RUN: Duration = Duration::from_secs(90);

/// `args` and the address and port of the device's address, as strings.
fn argv(port: TcpPort, args: &[&str]) -> Vec<String> {
    let head = ["-a".to_string(), local_ip().to_string(), "-p".to_string(), port.get().to_string()];
    head.into_iter().chain(args.iter().map(|s| s.to_string())).collect()
}

/// Starts our server (`-d`: it says when it listens) with `args`, and waits until it listens.
fn our_server(port: TcpPort, args: &[&str]) -> Proc {
    let mut args = argv(port, args);
    args.extend(["-s", "-d", "--timeout", "30", "--accept-timeout", "60"].map(String::from));
    let mut server = Proc::spawn("rping -s (ours)", &example("rping"), &args);
    server.wait_for_line("rdma_listen on", WAIT).unwrap_or_else(|e| panic!("{e}\n{}", server.output()));
    server
}

/// Our client with `args`; it retries a refused connection (the C server says nothing when it
/// listens) for up to `--timeout`.
fn our_client(port: TcpPort, args: &[&str]) -> Proc {
    let mut args = argv(port, args);
    args.extend(["-c", "--timeout", "30"].map(String::from));
    Proc::spawn("rping -c (ours)", &example("rping"), &args)
}

#[test]
fn our_rping_server_serves_rdma_cores_rping_client() {
    let port = TcpPort::CmRpingOurServerWithCClient;
    let mut server = our_server(port, &["-v"]);
    let mut client = Proc::spawn("rping -c (rdma-core)", &c_tool("rping"), &argv(port, &["-c", "-v", "-V", "-C", "5"]));
    // The C client validated every ping (-V: it exits non-zero on a mismatch) and printed it.
    let out = client.expect_success(RUN);
    assert_eq!(lines_with(&out, "ping data: "), expected_pings("ping data: ", 5, 64), "{out}");
    // Ours read exactly that, and ended with the client's disconnect.
    let out = server.expect_success(RUN);
    assert_eq!(lines_with(&out, "server ping data: "), expected_pings("server ping data: ", 5, 64), "{out}");
    assert!(out.contains("served 5 pings"), "{out}");
}

#[test]
fn our_rping_client_pings_rdma_cores_rping_server() {
    let port = TcpPort::CmRpingCServerWithOurClient;
    // Not the default size: both sides follow -S.
    let mut server = Proc::spawn("rping -s (rdma-core)", &c_tool("rping"), &argv(port, &["-s", "-v", "-S", "100"]));
    let mut client = our_client(port, &["-v", "-V", "-C", "5", "-S", "100"]);
    let out = client.expect_success(RUN);
    assert_eq!(lines_with(&out, "ping data: "), expected_pings("ping data: ", 5, 100), "{out}");
    // What the C server RDMA READ from our start buffer is rping.c's ping data.
    let out = server.expect_success(RUN);
    assert_eq!(lines_with(&out, "server ping data: "), expected_pings("server ping data: ", 5, 100), "{out}");
}

#[test]
fn our_rping_client_and_server_talk_to_each_other() {
    let port = TcpPort::CmRpingOursWithOurs;
    let mut server = our_server(port, &["-v", "-S", "1000"]);
    // 60 pings: the letters go around more than once ('A' to 'z' is 58 of them).
    let mut client = our_client(port, &["-v", "-V", "-C", "60", "-S", "1000"]);
    let out = client.expect_success(RUN);
    assert_eq!(lines_with(&out, "ping data: "), expected_pings("ping data: ", 60, 1000), "{out}");
    let out = server.expect_success(RUN);
    assert_eq!(lines_with(&out, "server ping data: "), expected_pings("server ping data: ", 60, 1000), "{out}");
    assert!(out.contains("served 60 pings"), "{out}");
}

/// A client whose ping data is larger than the server's buffer: the server refuses to READ it
/// and exits non-zero, the client sees the connection end while it waits for the go-ahead and
/// exits non-zero too, both well before their timeouts.
#[test]
fn pings_larger_than_the_servers_buffer_fail_both_sides_in_bounded_time() {
    let port = TcpPort::CmRpingSizeMismatch;
    let mut server = our_server(port, &["-S", "64"]);
    let mut client = our_client(port, &["-V", "-C", "3", "-S", "100"]);
    let start = Instant::now();
    let (status, _) = server.wait_exit(RUN).unwrap_or_else(|| panic!("the server did not exit:\n{}", server.output()));
    assert!(!status.success(), "{}", server.output());
    assert!(server.output().contains("do not fit"), "{}", server.output());
    let (status, _) = client.wait_exit(RUN).unwrap_or_else(|| panic!("the client did not exit:\n{}", client.output()));
    assert!(!status.success(), "{}", client.output());
    assert!(client.output().contains("ended the connection"), "{}", client.output());
    assert!(start.elapsed() < Duration::from_secs(30), "{:?}", start.elapsed());
}

/// Nobody listens: the client's connection is refused, it tries again until its --timeout and
/// then exits non-zero, saying so.
#[test]
fn our_rping_client_gives_up_when_nobody_listens() {
    let mut args = argv(TcpPort::CmRpingNobodyListens, &["-c", "-C", "1", "--timeout", "5"]);
    args.push("-d".into());
    let mut client = Proc::spawn("rping -c (ours)", &example("rping"), &args);
    let (status, took) =
        client.wait_exit(RUN).unwrap_or_else(|| panic!("the client did not exit:\n{}", client.output()));
    assert!(!status.success(), "{}", client.output());
    assert!(client.output().contains("rejected the connection"), "{}", client.output());
    assert!(client.output().contains("trying again"), "it retried: {}", client.output());
    assert!(took >= Duration::from_secs(5) && took < Duration::from_secs(60), "{took:?}");
}
