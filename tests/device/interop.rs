//! Interoperation with rdma-core's C tools: `examples/{rc,uc,ud,srq}_pingpong` against
//! `ibv_{rc,uc,ud,srq}_pingpong` (package ibverbs-utils), in both roles, as separate processes
//! on the device under test, with `-c` on both sides: the C tool checks its page marks, ours
//! every byte of every message it receives.
//!
//! The examples must be built first (`cargo build --examples`): `cargo test --test device`
//! alone does not build them. They are looked up next to this test binary
//! (`target/<profile>/examples/`).

use std::io::Read;
use std::time::{Duration, Instant};

use crate::common::{assert_pingpong_checked, c_tool, device_name, example, gid_index, Proc, TcpPort};

/// Bound on one whole ping-pong (both processes), generous for software emulation.
const DEADLINE: Duration = Duration::from_secs(120);
/// Small, to keep the run short under emulation.
const ITERS: u32 = 100;
const SIZE: u32 = 4096;

/// The processes of one test: all killed when the test ends, also when it fails.
struct Procs(Vec<Proc>);

/// What [`Procs::wait_all`] saw.
struct Outcome {
    /// Every process exited by itself with status 0.
    ok: bool,
    /// Per process, in order: whether it had exited by itself before `wait_all` killed the
    /// rest (recorded before any kill, so a process that had to be killed reads `false`).
    exited_by_itself: Vec<bool>,
    /// Every process's status and output.
    report: String,
}

impl Procs {
    /// Waits until every process exited, at most until `deadline`; kills the rest then.
    fn wait_all(&mut self, deadline: Instant) -> Outcome {
        loop {
            let running = self.0.iter_mut().map(|p| p.poll().is_none()).filter(|&r| r).count();
            // One failure dooms the ping-pong: the peer would only wait for its timeouts.
            let failed = self.0.iter_mut().any(|p| matches!(p.poll(), Some(s) if !s.success()));
            if running == 0 || failed || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Before anything is killed: which processes have ended on their own.
        let exited: Vec<_> = self.0.iter_mut().map(|p| p.poll()).collect();
        let mut ok = true;
        let mut report = String::new();
        for (p, exited) in self.0.iter_mut().zip(&exited) {
            p.stop();
            let status = match exited {
                Some(s) => {
                    ok &= s.success();
                    s.to_string()
                }
                None => {
                    ok = false;
                    format!("still running after the deadline, killed ({:?})", p.status)
                }
            };
            report.push_str(&format!("----- {}: {status}\n{}\n", p.label, p.output()));
        }
        Outcome { ok, exited_by_itself: exited.iter().map(Option::is_some).collect(), report }
    }
}

fn common_args(port: u16) -> Vec<String> {
    args_with(port, SIZE, ITERS, &[])
}

/// The arguments both sides get: device, GID index, TCP port, iterations, size, and `extra`.
fn args_with(port: u16, size: u32, iters: u32, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-d".into(),
        device_name(),
        "-g".into(),
        gid_index().to_string(),
        "-p".into(),
        port.to_string(),
        "-n".into(),
        iters.to_string(),
        "-s".into(),
        size.to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// The result lines both the C tool and ours print.
fn assert_result_lines(label: &str, output: &str, report: &str, size: u32, iters: u32) {
    let bytes = format!("{} bytes in ", u64::from(size) * u64::from(iters) * 2);
    let iters = format!("{iters} iters in ");
    assert!(
        output.contains(&bytes) && output.contains(&iters) && output.contains("Mbit/sec"),
        "{label} did not print its result lines ({bytes:?}, {iters:?}):\n{report}"
    );
}

/// Which side is ours.
#[derive(Clone, Copy, PartialEq)]
enum Ours {
    Server,
    Client,
}

/// Runs one ping-pong between our example `ours` and the C tool `theirs` on TCP port `port`.
fn pingpong(ours: &str, theirs: &str, our_role: Ours, port: u16) {
    pingpong_with(ours, theirs, our_role, port, SIZE, ITERS, &["-c"]);
}

/// [`pingpong`] with `size`-byte messages, `iters` iterations and `extra` arguments for both
/// sides. Returns the outputs of (ours, theirs).
fn pingpong_with(
    ours: &str,
    theirs: &str,
    our_role: Ours,
    port: u16,
    size: u32,
    iters: u32,
    extra: &[&str],
) -> (String, String) {
    let our_bin = example(ours);
    let c_bin = c_tool(theirs);
    let deadline = Instant::now() + DEADLINE;
    let server_args = args_with(port, size, iters, extra);
    let mut client_args = args_with(port, size, iters, extra);
    client_args.push("127.0.0.1".into());
    let mut procs = Procs(Vec::new());

    match our_role {
        Ours::Server => {
            // Extra time bounds of ours: the C client does not retry its connection, so it
            // is started only once our server listens.
            let mut args = server_args;
            args.extend(["--timeout".into(), "60".into()]);
            args.extend(["--accept-timeout".into(), "100".into()]);
            procs.0.push(Proc::spawn(&format!("{ours} (server)"), &our_bin, &args));
            if let Err(e) = procs.0[0].wait_for_line("waiting for a client", Duration::from_secs(60)) {
                panic!("{e}\n{}", procs.wait_all(Instant::now()).report);
            }
            procs.0.push(Proc::spawn(&format!("{theirs} (client)"), &c_bin, &client_args));
        }
        Ours::Client => {
            // The C server starts listening after its device set-up; our client retries its
            // connection meanwhile (bounded by --timeout).
            procs.0.push(Proc::spawn(&format!("{theirs} (server)"), &c_bin, &server_args));
            let mut args = client_args;
            args.extend(["--timeout".into(), "60".into()]);
            procs.0.push(Proc::spawn(&format!("{ours} (client)"), &our_bin, &args));
        }
    }

    let Outcome { ok, report, .. } = procs.wait_all(deadline);
    assert!(ok, "the ping-pong failed:\n{report}");
    let (ours_out, theirs_out) = match our_role {
        Ours::Server => (procs.0[0].output(), procs.0[1].output()),
        Ours::Client => (procs.0[1].output(), procs.0[0].output()),
    };
    assert_result_lines(ours, &ours_out, &report, size, iters);
    assert_result_lines(theirs, &theirs_out, &report, size, iters);
    if extra.contains(&"-c") {
        // srq_pingpong counts messages over all QPs and may receive up to -q - 1 more.
        assert_pingpong_checked(&ours_out, &theirs_out, iters, ours != "srq_pingpong", &report);
    }
    // Both sides agree on each other's QP numbers: ours printed the C tool's local address
    // as its remote one.
    let qpn_of = |out: &str, which: &str| -> Option<String> {
        let line = out.lines().find(|l| l.contains(which))?;
        let at = line.find("QPN ")? + 4;
        Some(line[at..at + 8].to_string())
    };
    assert_eq!(qpn_of(&theirs_out, "local address"), qpn_of(&ours_out, "remote address"), "QPN mismatch:\n{report}");
    assert_eq!(qpn_of(&ours_out, "local address"), qpn_of(&theirs_out, "remote address"), "QPN mismatch:\n{report}");
    println!("{report}");
    (ours_out, theirs_out)
}

// Distinct TCP ports (common::TcpPort) so the tests can run in parallel.

#[test]
fn rc_pingpong_server_with_c_client() {
    pingpong("rc_pingpong", "ibv_rc_pingpong", Ours::Server, TcpPort::RcServerWithC.get());
}

#[test]
fn rc_pingpong_client_with_c_server() {
    pingpong("rc_pingpong", "ibv_rc_pingpong", Ours::Client, TcpPort::RcClientWithC.get());
}

#[test]
fn uc_pingpong_server_with_c_client() {
    pingpong("uc_pingpong", "ibv_uc_pingpong", Ours::Server, TcpPort::UcServerWithC.get());
}

#[test]
fn uc_pingpong_client_with_c_server() {
    pingpong("uc_pingpong", "ibv_uc_pingpong", Ours::Client, TcpPort::UcClientWithC.get());
}

/// `ibv_ud_pingpong` refuses messages larger than the port's MTU (1024 on rxe over veth); its
/// default size is 1024.
const UD_SIZE: u32 = 1024;

#[test]
fn ud_pingpong_server_with_c_client() {
    pingpong_with(
        "ud_pingpong",
        "ibv_ud_pingpong",
        Ours::Server,
        TcpPort::UdServerWithC.get(),
        UD_SIZE,
        ITERS,
        &["-c"],
    );
}

#[test]
fn ud_pingpong_client_with_c_server() {
    pingpong_with(
        "ud_pingpong",
        "ibv_ud_pingpong",
        Ours::Client,
        TcpPort::UdClientWithC.get(),
        UD_SIZE,
        ITERS,
        &["-c"],
    );
}

/// QPs per side in the SRQ tests: several, so that completions of different QPs interleave.
const SRQ_QPS: usize = 4;

/// Every QP of one side printed its local address, and the other side printed the same QP
/// numbers as its remote addresses, in order (the 256-message exchange lined up).
fn assert_srq_addresses(ours: &str, theirs: &str) {
    let qpns = |out: &str, which: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains(which))
            .filter_map(|l| l.find("QPN ").map(|at| l[at + 4..at + 12].to_string()))
            .collect()
    };
    for (a, b) in [(ours, theirs), (theirs, ours)] {
        let local = qpns(a, "local address");
        assert_eq!(local.len(), SRQ_QPS, "one local address per QP:\n{a}");
        assert_eq!(local, qpns(b, "remote address"), "QPNs differ:\n{a}\n{b}");
    }
}

#[test]
fn srq_pingpong_server_with_c_client() {
    let q = SRQ_QPS.to_string();
    let (ours, theirs) = pingpong_with(
        "srq_pingpong",
        "ibv_srq_pingpong",
        Ours::Server,
        TcpPort::SrqServerWithC.get(),
        SIZE,
        ITERS,
        &["-q", &q, "-c"],
    );
    assert_srq_addresses(&ours, &theirs);
}

#[test]
fn srq_pingpong_client_with_c_server() {
    let q = SRQ_QPS.to_string();
    let (ours, theirs) = pingpong_with(
        "srq_pingpong",
        "ibv_srq_pingpong",
        Ours::Client,
        TcpPort::SrqClientWithC.get(),
        SIZE,
        ITERS,
        &["-q", &q, "-c"],
    );
    assert_srq_addresses(&ours, &theirs);
}

// --- failure paths: bounded, non-zero, and saying why ---------------------------------------

/// The 52-byte message of the C tools for `qpn`/`psn` and the device's GID (read from the
/// address our example printed, so this test does not need its own device context).
fn c_style_message(qpn: u32, psn: u32, gid: std::net::Ipv6Addr) -> Vec<u8> {
    let hex: String = gid.octets().iter().map(|b| format!("{b:02x}")).collect();
    let mut m = format!("{:04x}:{qpn:06x}:{psn:06x}:{hex}", 0).into_bytes();
    m.push(0);
    m
}

fn gid_in(output: &str) -> std::net::Ipv6Addr {
    let line = output.lines().find(|l| l.contains("local address")).expect("a local address line");
    line.rsplit("GID ").next().and_then(|g| g.trim().parse().ok()).expect("a GID")
}

/// How long our client may take to refuse a malformed address once it has it.
const MALFORMED_BOUND: Duration = Duration::from_secs(20);

/// A server (this test) that answers our client with garbage: the client must refuse it and
/// exit non-zero, naming the problem.
#[test]
fn rc_pingpong_client_rejects_a_malformed_address() {
    use std::io::Write as _;
    let port = TcpPort::RcClientMalformedAddress.get();
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap_or_else(|e| panic!("bind {port}: {e}"));
    let mut args = common_args(port);
    args.extend(["127.0.0.1".into(), "--timeout".into(), "30".into()]);
    let mut procs = Procs(vec![Proc::spawn("rc_pingpong (client)", &example("rc_pingpong"), &args)]);
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + DEADLINE;
    let mut conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(_) if Instant::now() < deadline && procs.0[0].poll().is_none() => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                panic!("our client never connected ({e}):\n{}", procs.wait_all(Instant::now()).report);
            }
        }
    };
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut msg = [0u8; 52];
    conn.read_exact(&mut msg).expect("the client's 52-byte address");
    assert_eq!(msg[51], 0, "NUL-terminated: {msg:?}");
    assert_eq!((msg[4], msg[11], msg[18]), (b':', b':', b':'), "{:?}", String::from_utf8_lossy(&msg));
    conn.write_all(&[b'x'; 52]).unwrap();
    // The client checks the message as soon as it has read it: it must exit by itself, long
    // before its 30 s completion timeout could matter.
    let answered = Instant::now();
    let Outcome { ok, exited_by_itself, report } = procs.wait_all(answered + MALFORMED_BOUND);
    assert_eq!(exited_by_itself, [true], "the client did not exit by itself within {MALFORMED_BOUND:?}:\n{report}");
    assert!(!ok, "the client accepted a malformed address:\n{report}");
    assert!(report.contains("malformed pingpong address message"), "{report}");
}

/// `-c` on our server only: the C client sends its buffer without the page marks, and ours
/// must refuse the first message, naming the page and the byte, and exit non-zero by itself
/// (the check of the ping-pongs above is not vacuous).
#[test]
fn rc_pingpong_server_with_chk_refuses_a_c_client_without_the_marks() {
    let port = TcpPort::RcServerChkUnmarked.get();
    let server_args = args_with(port, SIZE, ITERS, &["-c", "--timeout", "60", "--accept-timeout", "100"]);
    let mut client_args = common_args(port);
    client_args.push("127.0.0.1".into());
    let mut procs = Procs(vec![Proc::spawn("rc_pingpong (server, -c)", &example("rc_pingpong"), &server_args)]);
    if let Err(e) = procs.0[0].wait_for_line("waiting for a client", Duration::from_secs(60)) {
        panic!("{e}\n{}", procs.wait_all(Instant::now()).report);
    }
    procs.0.push(Proc::spawn("ibv_rc_pingpong (client)", &c_tool("ibv_rc_pingpong"), &client_args));
    let Outcome { ok, exited_by_itself, report } = procs.wait_all(Instant::now() + DEADLINE);
    assert!(!ok, "the ping-pong succeeded:\n{report}");
    assert!(exited_by_itself[0], "our server did not exit by itself:\n{report}");
    assert!(
        report.contains("invalid data in page 0 (message 1: byte 0 is 0x7b, 0x00 expected)"),
        "our server did not name the first unmarked byte:\n{report}"
    );
}

/// A client (this test) that completes the exchange but never sends: our UC server must give
/// up after its --timeout, exit non-zero, and say what it was waiting for.
#[test]
fn uc_pingpong_server_times_out_when_the_peer_never_sends() {
    use std::io::Write as _;
    let port = TcpPort::UcServerNeverSends.get();
    let mut args = common_args(port);
    args.extend(["--timeout".into(), "3".into(), "--accept-timeout".into(), "100".into()]);
    let mut procs = Procs(vec![Proc::spawn("uc_pingpong (server)", &example("uc_pingpong"), &args)]);
    if let Err(e) = procs.0[0].wait_for_line("waiting for a client", Duration::from_secs(60)) {
        panic!("{e}\n{}", procs.wait_all(Instant::now()).report);
    }
    let gid = gid_in(&procs.0[0].output());
    let mut conn = connect_retry(port);
    conn.write_all(&c_style_message(0xabcd, 0x123456, gid)).unwrap();
    let mut reply = [0u8; 52];
    conn.read_exact(&mut reply).expect("the server's 52-byte address");
    conn.write_all(b"done\0").unwrap();
    let started = Instant::now();
    // --timeout 3, plus the scope's drain and a loaded emulator: 60 s, well below DEADLINE.
    let Outcome { ok, exited_by_itself, report } = procs.wait_all(started + Duration::from_secs(60));
    assert_eq!(exited_by_itself, [true], "the server did not exit by itself within 60 s:\n{report}");
    assert!(!ok, "the server succeeded without a peer:\n{report}");
    assert!(report.contains("timed out after 3s waiting for the completion of receive"), "{report}");
}

/// Connects to our server on `port` (it listens already; retried briefly all the same).
fn connect_retry(port: u16) -> std::net::TcpStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                return s;
            }
            Err(e) if Instant::now() >= deadline => panic!("cannot connect to port {port}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
