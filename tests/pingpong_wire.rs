//! Host tests of what the pingpong examples share (`examples/common/pingpong.rs`): the
//! 52-byte address message of rdma-core's `ibv_*_pingpong`, the command lines (rc/uc, ud,
//! srq), and the TCP exchange over loopback (one address each way, or `ibv_srq_pingpong`'s 256). (Unit tests inside an example are not run by `cargo test`, so the
//! module is included here.) The interoperation with the C tools themselves is tested on a
//! device: `tests/device/interop.rs`.

#[path = "../examples/common/pingpong.rs"]
mod pingpong;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use clap::error::ErrorKind;
use pingpong::{
    client_exchange, client_exchange_all, client_exchange_with, encode, encode_all, parse, parse_all, parse_args,
    parse_args_for, Check, Listener, Options, Tool, DONE, FILL, UNWRITTEN, WIRE_LEN,
};
use typed_verbs::prelude::*;

/// The GID rxe gives GID index 1 in the test VM: `::ffff:192.0.2.1`.
fn rxe_gid() -> Gid {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[192, 0, 2, 1]);
    Gid(g)
}

fn ep(lid: u16, qp_num: u32, psn: u32, gid: Gid) -> Endpoint {
    Endpoint { lid, qp_num, psn, gid }
}

/// What `sprintf(msg, "%04x:%06x:%06x:%s", ...)` plus the NUL produces in the C tools.
fn c_message(text: &str) -> Vec<u8> {
    let mut v = text.as_bytes().to_vec();
    v.push(0);
    v
}

#[test]
fn encodes_like_the_c_tools() {
    let m = encode(&ep(0, 0x11, 0xabcdef, rxe_gid()));
    assert_eq!(m.to_vec(), c_message("0000:000011:abcdef:00000000000000000000ffffc0000201"));
    assert_eq!(m.len(), WIRE_LEN);
    // The GID bytes in order (network order), lowercase; a LID on InfiniBand.
    let gid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x1a, 0x4b, 0xff, 0xfe, 0x01, 0xAB, 0xCD]);
    assert_eq!(
        encode(&ep(0x1f, 0xffffff, 0, gid)).to_vec(),
        c_message("001f:ffffff:000000:fe80000000000000021a4bfffe01abcd")
    );
    // rdma-core's gid_to_wire_gid, step by step: copy the GID into four 32-bit words in host
    // order, convert each with htobe32 and print it with %08x.
    for g in [gid, rxe_gid()] {
        let mut wire = String::new();
        for w in g.0.chunks(4) {
            let host = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
            wire.push_str(&format!("{:08x}", host.to_be()));
        }
        assert_eq!(&encode(&ep(0, 0, 0, g))[19..51], wire.as_bytes());
    }
}

#[test]
fn encode_keeps_24_bits_of_qpn_and_psn() {
    let m = encode(&ep(0, 0x1234567, 0xff000001, Gid::default()));
    assert_eq!(&m[..19], b"0000:234567:000001:");
}

#[test]
fn parses_what_the_c_tools_send() {
    let e = parse(&c_message("0000:000011:abcdef:00000000000000000000ffffc0000201")).unwrap();
    assert_eq!(e, ep(0, 0x11, 0xabcdef, rxe_gid()));
    // sscanf("%x") accepts upper case too.
    let e = parse(&c_message("00AB:0000FF:ABCDEF:FE800000000000000000000000000001")).unwrap();
    assert_eq!((e.lid, e.qp_num, e.psn), (0xab, 0xff, 0xabcdef));
    assert_eq!(e.gid.0[0], 0xfe);
    assert_eq!(e.gid.0[15], 0x01);
}

#[test]
fn round_trips() {
    for e in [
        ep(0, 0, 0, Gid::default()),
        ep(0xffff, 0xffffff, 0xffffff, Gid([0xff; 16])),
        ep(0x1234, 0x56789a, 0xbcdef0, rxe_gid()),
    ] {
        assert_eq!(parse(&encode(&e)).unwrap(), e);
    }
}

#[test]
fn rejects_malformed_messages() {
    let good = c_message("0000:000011:abcdef:00000000000000000000ffffc0000201");
    let bad = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = good.clone();
        f(&mut m);
        parse(&m).unwrap_err()
    };
    assert!(parse(&good[..51]).unwrap_err().0.contains("expected 52 bytes, got 51"));
    assert!(bad(&|m| m.push(0)).0.contains("got 53"));
    assert!(parse(&[]).is_err());
    assert!(bad(&|m| m[51] = b'0').0.contains("NUL"));
    assert!(bad(&|m| m[4] = b'-').0.contains("':' after the LID"));
    assert!(bad(&|m| m[11] = b' ').0.contains("':' after the QPN"));
    assert!(bad(&|m| m[18] = b'0').0.contains("':' after the PSN"));
    assert!(bad(&|m| m[0] = b'g').0.contains("the LID"));
    assert!(bad(&|m| m[7] = b' ').0.contains("the QPN"));
    assert!(bad(&|m| m[12] = b'+').0.contains("the PSN"));
    assert!(bad(&|m| m[12] = b'-').0.contains("the PSN"));
    assert!(bad(&|m| m[30] = b'z').0.contains("the GID"));
    assert!(bad(&|m| m[50] = 0).0.contains("the GID"));
    assert!(bad(&|m| m[40] = 0xc3).0.contains("the GID"));
    // A message shifted by one (a short field) is caught by the separators.
    let shifted = c_message("000:0000011:abcdef:00000000000000000000ffffc0000201");
    assert!(parse(&shifted).is_err());
    // The error says what is wrong in words.
    let msg = bad(&|m| m[4] = b'-').to_string();
    assert!(msg.starts_with("malformed pingpong address message"), "{msg}");
}

fn args(s: &str) -> Result<Options, clap::Error> {
    parse_args(s.split_whitespace().map(String::from))
}

fn run_opts(s: &str) -> Options {
    args(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

#[test]
fn command_line_defaults_are_the_c_tools() {
    let o = run_opts("");
    assert_eq!(o.port, 18515);
    assert_eq!(o.ib_dev, None);
    assert_eq!(o.ib_port, 1);
    assert_eq!(o.size, 4096);
    assert_eq!(o.mtu, Mtu::Mtu1024);
    assert_eq!(o.rx_depth, 500);
    assert_eq!(o.iters, 1000);
    assert_eq!(o.sl, 0);
    assert_eq!(o.gid_index, None);
    assert_eq!(o.server, None);
    assert!(!o.chk);
}

#[test]
fn command_line_getopt_forms() {
    let o = run_opts("-d rxe0 -g1 -p 18600 -n 0x64 -s 64 -r 10 -m 2048 -i 1 -l 3 10.0.0.1");
    assert_eq!(o.ib_dev.as_deref(), Some("rxe0"));
    assert_eq!(o.gid_index, Some(1));
    assert_eq!(o.port, 18600);
    assert_eq!(o.iters, 100);
    assert_eq!(o.size, 64);
    assert_eq!(o.rx_depth, 10);
    assert_eq!(o.mtu, Mtu::Mtu2048);
    assert_eq!(o.sl, 3);
    assert_eq!(o.server.as_deref(), Some("10.0.0.1"));
    let o = run_opts("--ib-dev=mlx5_0 --gid-idx 3 --iters=5 --timeout=7 --accept-timeout 9 host");
    assert_eq!(o.ib_dev.as_deref(), Some("mlx5_0"));
    assert_eq!(o.gid_index, Some(3));
    assert_eq!(o.iters, 5);
    assert_eq!(o.timeout, Duration::from_secs(7));
    assert_eq!(o.accept_timeout, Duration::from_secs(9));
    assert_eq!(o.server.as_deref(), Some("host"));
    // Attached long values, numbers as strtoul reads them, a repeated option (the last counts,
    // as with getopt).
    let o = run_opts("--port=0x4857 --size=0100 -s64 -n5");
    assert_eq!((o.port, o.size, o.iters), (0x4857, 64, 5));
    assert!(run_opts("-c").chk && run_opts("--chk -n 5").chk);
    assert_eq!(args("-h").unwrap_err().kind(), ErrorKind::DisplayHelp);
    assert_eq!(args("--help").unwrap_err().kind(), ErrorKind::DisplayHelp);
}

#[test]
fn command_line_errors() {
    for (line, expect) in [
        ("-m 1000", "not 256, 512, 1024, 2048 or 4096"),
        ("-p 70000", "out of range"),
        ("-n 0", "out of range"),
        ("-s abc", "not a number"),
        ("-g", "a value is required"),
        ("-x", "unexpected argument '-x'"),
        ("-e", "unexpected argument '-e'"),
        ("a b", "unexpected argument 'b'"),
    ] {
        let e = args(line).unwrap_err().to_string();
        assert!(e.contains(expect), "{line:?}: {e}");
    }
}

#[test]
fn exchange_over_tcp() {
    let listener = Listener::bind(0).unwrap();
    let port = listener.port();
    let server_ep = ep(0, 0x22, 0x222222, rxe_gid());
    let client_ep = ep(0, 0x11, 0x111111, rxe_gid());
    let t = Duration::from_secs(10);
    let server = std::thread::spawn(move || {
        let (conn, peer) = listener.accept(t, t).unwrap();
        // Here the real server moves its QP to RTS and posts its receives.
        conn.finish(&server_ep).unwrap();
        peer
    });
    let got = client_exchange("127.0.0.1", port, &client_ep, t, t).unwrap();
    assert_eq!(got, server_ep);
    assert_eq!(server.join().unwrap(), client_ep);
}

/// The exchange with bytes of the caller's after the address, each way (`perf`'s two-process
/// tests send where their writes go): the bytes arrive intact and the addresses too.
#[test]
fn exchange_with_extra_bytes_each_way() {
    let listener = Listener::bind(0).unwrap();
    let port = listener.port();
    let server_ep = ep(0, 0x22, 0x222222, rxe_gid());
    let client_ep = ep(0, 0x11, 0x111111, rxe_gid());
    let t = Duration::from_secs(10);
    let server = std::thread::spawn(move || {
        let (conn, peers, theirs) = listener.accept_with(1, 3, t, t).unwrap();
        conn.finish_with(&[server_ep], b"server extra").unwrap();
        (peers, theirs)
    });
    let (got, theirs) = client_exchange_with("127.0.0.1", port, &[client_ep], b"abc", 12, t, t).unwrap();
    assert_eq!((got, theirs), (vec![server_ep], b"server extra".to_vec()));
    assert_eq!(server.join().unwrap(), (vec![client_ep], b"abc".to_vec()));
}

/// By name, as users type it: `localhost` may resolve to `::1` and `127.0.0.1`; the server
/// listens on both families.
#[test]
fn exchange_via_localhost() {
    let listener = Listener::bind(0).unwrap();
    let port = listener.port();
    let t = Duration::from_secs(10);
    let server = std::thread::spawn(move || {
        let (conn, peer) = listener.accept(t, t).unwrap();
        conn.finish(&ep(0, 2, 2, Gid::default())).unwrap();
        peer
    });
    let got = client_exchange("localhost", port, &ep(0, 1, 1, Gid::default()), t, t).unwrap();
    assert_eq!(got, ep(0, 2, 2, Gid::default()));
    assert_eq!(server.join().unwrap(), ep(0, 1, 1, Gid::default()));
}

/// A peer speaking the protocol byte by byte as the C client does: one write of 52 bytes, one
/// read of 52, one write of "done\0".
#[test]
fn server_side_against_a_raw_c_style_client() {
    let listener = Listener::bind(0).unwrap();
    let port = listener.port();
    let t = Duration::from_secs(10);
    let server = std::thread::spawn(move || {
        let (conn, peer) = listener.accept(t, t).unwrap();
        conn.finish(&ep(0, 0x22, 0x222222, Gid::default())).unwrap();
        peer
    });
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&c_message("0000:000011:111111:00000000000000000000ffffc0000201")).unwrap();
    let mut reply = [0u8; WIRE_LEN];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply.to_vec(), c_message("0000:000022:222222:00000000000000000000000000000000"));
    s.write_all(DONE).unwrap();
    assert_eq!(server.join().unwrap(), ep(0, 0x11, 0x111111, rxe_gid()));
}

#[test]
fn server_rejects_a_malformed_client_message() {
    let listener = Listener::bind(0).unwrap();
    let port = listener.port();
    let t = Duration::from_secs(10);
    let server = std::thread::spawn(move || listener.accept(t, t).map(|_| ()).map_err(|e| e.to_string()));
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&[b'x'; WIRE_LEN]).unwrap();
    let e = server.join().unwrap().unwrap_err();
    assert!(e.contains("malformed"), "{e}");
}

#[test]
fn waits_are_bounded() {
    // No client: the server gives up.
    let listener = Listener::bind(0).unwrap();
    let e = listener.accept(Duration::from_millis(200), Duration::from_secs(1)).map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("waiting for a client"), "{e}");

    // A client that connects and never writes: the read times out.
    let listener = Listener::bind(0).unwrap();
    let port = listener.port();
    let server = std::thread::spawn(move || {
        listener.accept(Duration::from_secs(10), Duration::from_millis(300)).map(|_| ()).map_err(|e| e.to_string())
    });
    let _silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let e = server.join().unwrap().unwrap_err();
    assert!(e.contains("reading the client's address"), "{e}");

    // No server: the client retries, then gives up.
    let unused = Listener::bind(0).unwrap();
    let port = unused.port();
    drop(unused);
    let start = std::time::Instant::now();
    let e = client_exchange(
        "127.0.0.1",
        port,
        &ep(0, 1, 1, Gid::default()),
        Duration::from_millis(500),
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(e.to_string().contains("couldn't connect"), "{e}");
    assert!(start.elapsed() >= Duration::from_millis(500));
    assert!(start.elapsed() < Duration::from_secs(10));
}

// --- ud and srq command lines ---------------------------------------------------------------

fn run_opts_for(tool: Tool, s: &str) -> Options {
    parse_args_for(tool, s.split_whitespace().map(String::from)).unwrap_or_else(|e| panic!("{tool:?} {s:?}: {e}"))
}

fn error_for(tool: Tool, s: &str) -> String {
    parse_args_for(tool, s.split_whitespace().map(String::from)).unwrap_err().to_string()
}

#[test]
fn ud_command_line_is_ibv_ud_pingpongs() {
    // ibv_ud_pingpong's code uses 1024 (its usage text says 2048).
    let o = run_opts_for(Tool::Ud, "");
    assert_eq!((o.size, o.rx_depth, o.iters, o.port), (1024, 500, 1000, 18515));
    let o = run_opts_for(Tool::Ud, "-d rxe0 -g 1 -s 512 -n 10 host");
    assert_eq!((o.size, o.iters, o.gid_index, o.server.as_deref()), (512, 10, Some(1), Some("host")));
    // No path MTU on UD, no QP count: the C tool rejects them too.
    for line in ["-m 1024", "--mtu=1024", "-q 2"] {
        let e = error_for(Tool::Ud, line);
        assert!(e.contains("unexpected argument"), "{line:?}: {e}");
    }
}

#[test]
fn srq_command_line_is_ibv_srq_pingpongs() {
    let o = run_opts_for(Tool::Srq, "");
    assert_eq!((o.num_qp, o.size, o.rx_depth, o.mtu), (16, 4096, 500, Mtu::Mtu1024));
    assert_eq!(run_opts_for(Tool::Srq, "-q 4 -m 2048").num_qp, 4);
    assert_eq!(run_opts_for(Tool::Srq, "--num-qp=255").num_qp, 255);
    for (line, expect) in
        [("-q 0", "out of range"), ("-q 256", "out of range"), ("-q 20 -r 10", "rx_depth 10 is too small for 20 QPs")]
    {
        let e = error_for(Tool::Srq, line);
        assert!(e.contains(expect), "{line:?}: {e}");
    }
    // `-q` belongs to srq_pingpong only.
    assert!(args("-q 4").unwrap_err().to_string().contains("unexpected argument '-q'"));
}

// --- many addresses (ibv_srq_pingpong) ------------------------------------------------------

/// `count` endpoints as `ibv_srq_pingpong` fills its table: `qps` real ones, zeros after.
fn srq_table(qps: u32, base: u32, count: usize) -> Vec<Endpoint> {
    let mut v: Vec<Endpoint> = (0..qps).map(|i| ep(0, base + i, 0x100 * (i + 1), rxe_gid())).collect();
    v.resize(count, ep(0, 0, 0, Gid::default()));
    v
}

#[test]
fn many_messages_round_trip_and_errors_name_the_message() {
    let table = srq_table(3, 0x40, 256);
    let bytes = encode_all(&table);
    assert_eq!(bytes.len(), 256 * WIRE_LEN);
    // The unused entries are what the C tool's zeroed table prints.
    assert_eq!(
        bytes[3 * WIRE_LEN..4 * WIRE_LEN].to_vec(),
        c_message("0000:000000:000000:00000000000000000000000000000000")
    );
    assert_eq!(parse_all(&bytes).unwrap(), table);
    let mut bad = bytes.clone();
    bad[7 * WIRE_LEN + 4] = b'-';
    let e = parse_all(&bad).unwrap_err().0;
    assert!(e.contains("message 7 of 256") && e.contains("':' after the LID"), "{e}");
    assert!(parse_all(&bytes[..100]).unwrap_err().0.contains("not a whole number"));
}

#[test]
fn srq_exchange_over_tcp() {
    let listener = Listener::bind(0).unwrap();
    let port = listener.port();
    let t = Duration::from_secs(10);
    let server_table = srq_table(4, 0x200, 256);
    let client_table = srq_table(4, 0x100, 256);
    let st = server_table.clone();
    let server = std::thread::spawn(move || {
        let (conn, peers) = listener.accept_all(256, t, t).unwrap();
        conn.finish_all(&st).unwrap();
        peers
    });
    let got = client_exchange_all("127.0.0.1", port, &client_table, t, t).unwrap();
    assert_eq!(got, server_table);
    assert_eq!(server.join().unwrap(), client_table);
}

/// The server side against a client speaking as `ibv_srq_pingpong` does: 256 writes of 52
/// bytes, then 256 reads, then "done\0".
#[test]
fn srq_server_side_against_a_raw_c_style_client() {
    let listener = Listener::bind(0).unwrap();
    let port = listener.port();
    let t = Duration::from_secs(10);
    let server_table = srq_table(2, 0x20, 256);
    let st = server_table.clone();
    let server = std::thread::spawn(move || {
        let (conn, peers) = listener.accept_all(256, t, t).unwrap();
        conn.finish_all(&st).unwrap();
        peers
    });
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let client_table = srq_table(2, 0x10, 256);
    for e in &client_table {
        s.write_all(&encode(e)).unwrap();
    }
    for e in &server_table {
        let mut m = [0u8; WIRE_LEN];
        s.read_exact(&mut m).unwrap();
        assert_eq!(parse(&m).unwrap(), *e);
    }
    s.write_all(DONE).unwrap();
    assert_eq!(server.join().unwrap(), client_table);
}

/// Fuzz: arbitrary bytes (and mutations of valid messages) are parsed or rejected, never a
/// panic; whatever parses re-encodes to the same message (compared with the input itself).
#[test]
fn the_wire_parser_is_total_on_arbitrary_input() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0123_4567_89ab_cdef);
    let mut next = move || rng.random::<u64>();
    let valid = pingpong::encode(&Endpoint { lid: 0, qp_num: 0x11, psn: 0x2222, gid: Gid([7; 16]) });
    let mut parsed = 0;
    for _ in 0..30_000 {
        let mut msg: Vec<u8> = if next() % 2 == 0 {
            (0..(next() % 70) as usize).map(|_| next() as u8).collect()
        } else {
            let mut m = valid.to_vec();
            for _ in 0..(next() % 4) {
                let i = (next() as usize) % m.len();
                m[i] = next() as u8;
            }
            m
        };
        if next() % 7 == 0 {
            msg.truncate((next() as usize) % (msg.len() + 1));
        }
        if let Ok(ep) = pingpong::parse(&msg) {
            parsed += 1;
            // Re-encoding gives back the original message (hex digits may come back in lower
            // case), and the values survive a second round trip.
            let again = pingpong::encode(&ep);
            assert_eq!(again.to_vec(), msg.to_ascii_lowercase(), "{:?}", String::from_utf8_lossy(&msg));
            assert_eq!(pingpong::parse(&again).unwrap(), ep);
        }
    }
    // The mutations that leave a message valid (a hex digit for a hex digit) happen often
    // enough for the comparison above to have run.
    assert!(parsed > 1000, "only {parsed} of 30000 inputs parsed");
}

/// `-c`: the message is the C tools' (their fill byte, 0 at each 4096-byte page start), and
/// every byte of a received message is checked, as is its length.
#[test]
fn chk_writes_the_c_tools_marks_and_catches_any_other_byte() {
    let opts = run_opts("-c -s 10000");
    let mut check = Check::new(&opts, FILL);
    let mut msg = vec![0u8; 10000];
    check.fill_send(&mut msg);
    let marks: Vec<usize> = msg.iter().enumerate().filter(|&(_, &b)| b == 0).map(|(at, _)| at).collect();
    assert_eq!(marks, [0, 4096, 8192]);
    assert!(msg.iter().filter(|&&b| b != 0).all(|&b| b == 0x7b));
    check.received(1, 10000, &msg).expect("the C tools' message");

    let mut wrong = msg.clone();
    wrong[4097] = 0;
    let e = check.received(2, 10000, &wrong).unwrap_err();
    assert!(e.starts_with("invalid data in page 1 (message 2: byte 4097 is 0x00, 0x7b expected)"), "{e}");
    let e = check.received(3, 9999, &msg).unwrap_err();
    assert_eq!(e, "message 3: 9999 bytes received, 10000 expected");
    let e = check.received(4, 10000, &msg[..100]).unwrap_err();
    assert_eq!(e, "message 4: buffer shorter than the message");
    // A receive buffer whose message never landed.
    let mut unwritten = vec![0u8; 10000];
    check.fill_recv(&mut unwritten);
    assert!(unwritten.iter().all(|&b| b == UNWRITTEN));
    let e = check.received(5, 10000, &unwritten).unwrap_err();
    assert!(e.starts_with("invalid data in page 0"), "{e}");
    // A peer without -c: no marks.
    let mut unmarked = vec![0x7b; 10000];
    let e = check.received(6, 10000, &unmarked).unwrap_err();
    assert!(e.starts_with("invalid data in page 0 (message 6: byte 0 is 0x7b, 0x00 expected)"), "{e}");

    // Without -c nothing is marked, checked or overwritten.
    let mut off = Check::new(&run_opts("-s 10000"), FILL);
    off.fill_send(&mut unmarked);
    assert!(unmarked.iter().all(|&b| b == 0x7b));
    off.fill_recv(&mut unmarked);
    assert!(unmarked.iter().all(|&b| b == 0x7b));
    off.received(1, 3, &[]).expect("no check without -c");
}

/// `-c` with more messages than receive buffers (`-n` above `-r`): a buffer is posted again
/// after its message was checked. A receive that completes with the right length but whose
/// bytes never landed in the reused buffer (it still holds the previous, valid message) must
/// fail the check as it does in a fresh buffer: the buffer is rearmed with [`UNWRITTEN`]
/// once checked (`Check::take`, what the rc/uc loop does with its receive views).
#[test]
fn chk_catches_a_message_that_never_landed_in_a_reused_receive_buffer() {
    let opts = run_opts("-c -s 5000 -r 1 -n 3");
    let mut check = Check::new(&opts, FILL);
    let mut msg = vec![0u8; 5000];
    check.fill_send(&mut msg);
    // One receive buffer, prepared as the loop prepares it.
    let mut buf = vec![0u8; 5000];
    check.fill_recv(&mut buf);
    // Message 1 lands and is checked; the buffer goes back to the device.
    buf.copy_from_slice(&msg);
    check.take(1, 5000, &mut buf[..]).expect("message 1 landed");
    assert!(buf.iter().all(|&b| b == UNWRITTEN), "rearmed before it is posted again");
    // Message 2's completion says 5000 bytes, but none of them was written.
    let e = check.take(2, 5000, &mut buf[..]).unwrap_err();
    assert!(e.starts_with("invalid data in page 0 (message 2: byte 0 is 0xa5"), "{e}");
    // Message 3 lands in part only (its first page).
    buf[..4096].copy_from_slice(&msg[..4096]);
    let e = check.take(3, 5000, &mut buf[..]).unwrap_err();
    assert!(e.starts_with("invalid data in page 1 (message 3: byte 4096 is 0xa5"), "{e}");
    // A completion longer than the buffer (a peer's byte_len) is an error, not a panic.
    let e = check.take(4, 1 << 20, &mut buf[..]).unwrap_err();
    assert_eq!(e, "message 4: 1048576 bytes received, 5000 expected");
    // Without -c the buffer is neither read nor rearmed.
    let mut off = Check::new(&run_opts("-s 5000"), FILL);
    buf.copy_from_slice(&msg);
    off.take(1, 7, &mut buf[..]).expect("no check without -c");
    assert_eq!(buf, msg);
}
