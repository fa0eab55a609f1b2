//! One host's memory used by the other across the wire: RDMA WRITE, READ, FETCH_AND_ADD and
//! COMPARE_AND_SWAP through a type 1 memory window, in both directions. The owner is
//! `examples/peer_memory` (`serve --window`); the user is this process (the library's typed
//! completions asserted step by step) or the same example on the other host.

use std::time::{Duration, Instant};

use typed_verbs::device::Mtu;
use typed_verbs::mw::WindowAdvert;
use typed_verbs::prelude::*;

use crate::common::*;
use crate::peer::{local_addr, peer_addr, Peer, RemoteProc};
use crate::{pingpong, remote};

/// Bound on one owner's whole life (start, exchange, the operations, its report).
pub const OWNER_BOUND: Duration = Duration::from_secs(90);
/// What this process writes at offset 0 of the owner's region.
const MESSAGE: &[u8; 64] = b"host A wrote this across the wire, through host B's window. 64B!";
const SWAPPED: u64 = 0x0123_4567_89ab_cdef;

/// Starts `peer_memory serve` on host B with `extra` arguments; returns once it listens.
pub fn start_owner(peer: &Peer, port: TcpPort, extra: &[&str]) -> RemoteProc {
    let mut argv: Vec<String> = vec![
        example("peer_memory").display().to_string(),
        "serve".into(),
        "-d".into(),
        device_name(),
        "-g".into(),
        gid_index().to_string(),
        "-p".into(),
        port.get().to_string(),
        "--timeout".into(),
        "60".into(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    let mut owner = peer.spawn("peer_memory serve", &argv);
    if let Err(e) = owner.wait_for_line("waiting for a client", OWNER_BOUND) {
        panic!("{e}");
    }
    owner
}

/// This side of a connection to an owner on host B, before its QP is connected.
pub struct Exchanged {
    pub me: Endpoint,
    pub peer: Endpoint,
    pub advert: WindowAdvert,
    /// The owner's port MTU.
    pub theirs: Mtu,
}

/// The pingpong exchange with the owner listening on host B at `port`, for `qp` (first PSN
/// `psn`), telling it that this port's MTU is `mine`.
pub fn exchange<S: typed_verbs::transport::QpState>(qp: &Qp<RC, S>, port: TcpPort, psn: u32, mine: Mtu) -> Exchanged {
    let me = qp.endpoint(PORT, gid_index(), psn).expect("endpoint");
    let (peers, extra) = pingpong::client_exchange_with(
        &peer_addr(),
        port.get(),
        &[me],
        &mine.bytes().to_le_bytes(),
        remote::SERVER_EXTRA,
        Duration::from_secs(60),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("the exchange with the owner on host B (port {}): {e}", port.get()));
    let (advert, theirs) = remote::decode_server(&extra).expect("the owner's advertisement");
    Exchanged { me, peer: peers[0], advert, theirs }
}

/// The owner's region as it printed it when it exited (its `region: HEX` line), after this
/// side's `done` SEND; asserts it exited 0.
pub fn owner_region(owner: &mut RemoteProc) -> Vec<u8> {
    let line = owner.wait_for_line("region: ", OWNER_BOUND).unwrap_or_else(|e| panic!("{e}"));
    let st = owner.wait_exit(OWNER_BOUND);
    assert_eq!(st, Some(0), "the owner failed:\n{}", owner.output());
    let hex = line.trim_start_matches("region: ").trim();
    (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex")).collect()
}

/// SENDs `done` to the owner (it then prints its region and exits).
pub fn send_done(qp: &Qp<RC, RTS>) {
    scope(|s| {
        let t = s.post_inline(qp, wr::InlineSend::new(b"done")).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!(c.status(), WcStatus::Success, "{c:?}");
    })
    .unwrap();
}

/// The untouched region of a `peer_memory` owner, with `changes` applied at their offsets.
fn expected_region(len: usize, changes: &[(usize, &[u8])]) -> Vec<u8> {
    let mut want: Vec<u8> = (0..len).map(remote::pattern).collect();
    for (at, bytes) in changes {
        want[*at..*at + bytes.len()].copy_from_slice(bytes);
    }
    want
}

#[test]
fn host_a_writes_reads_and_runs_atomics_through_a_window_on_host_b() {
    let peer = Peer::get();
    let start = Instant::now();
    let mut owner = start_owner(&peer, TcpPort::TwoHostWindowOnB, &["--window"]);
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = pd.create_qp::<RC>(&QpConfig::new(&cq)).unwrap();
    let mine = ctx.query_port(PORT).unwrap().active_mtu().expect("an active MTU");
    let x = exchange(&qp, TcpPort::TwoHostWindowOnB, 0x1357, mine);
    assert!(owner.wait_for_line("bound a type 1 window", OWNER_BOUND).is_ok(), "{}", owner.output());
    let qp = connect_rc_with(
        qp,
        Access::NONE,
        &x.me,
        &x.peer,
        |rtr| rtr.path_mtu = remote::negotiate(mine, x.theirs),
        |_| {},
    );
    let target = x.advert.remote::<typed_verbs::access::window::All>().expect("a window advertisement");

    let mut src = pd.alloc_mr(64, access::LOCAL_READ).unwrap();
    src.as_mut_slice().copy_from_slice(MESSAGE);
    let mut back = pd.alloc_mr(64, access::LOCAL_RW).unwrap();
    let mut word = pd.alloc_mr(8, access::LOCAL_RW).unwrap();
    let word_value = |w: &Mr<access::LocalRw>| u64::from_le_bytes(w.as_slice().try_into().unwrap());
    scope(|s| {
        let t = s.post_send(&qp, wr::Write::new(src.slice(..).unwrap(), target.slice(0, 64).unwrap())).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::RdmaWrite), "{c:?}");
        let t = s.post_send(&qp, wr::Read::new(back.slice_mut(..).unwrap(), target.slice(0, 64).unwrap())).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode(), c.byte_len()), (WcStatus::Success, WcOpcode::RdmaRead, 64), "{c:?}");
    })
    .unwrap();
    assert_eq!(back.as_slice(), MESSAGE, "READ returns what the WRITE put there");
    scope(|s| {
        let t = s.post_send(&qp, wr::Read::new(back.slice_mut(..).unwrap(), target.slice(512, 64).unwrap())).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert_eq!(back.as_slice(), &expected_region(576, &[])[512..], "READ of the untouched pattern");
    scope(|s| {
        let t =
            s.post_send(&qp, wr::FetchAdd::new(word.slice_mut(..).unwrap(), target.slice(128, 8).unwrap(), 9)).unwrap();
        let (c, _) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::FetchAdd), "{c:?}");
    })
    .unwrap();
    assert_eq!(word_value(&word), remote::pattern_word(128), "FETCH_AND_ADD returns the old word");
    let old = remote::pattern_word(136);
    scope(|s| {
        // A compare that fails first (the word is not 0), then one that succeeds.
        let t = s
            .post_send(&qp, wr::CompareSwap::new(word.slice_mut(..).unwrap(), target.slice(136, 8).unwrap(), 0, 1))
            .unwrap();
        let (c, back_word) = s.wait(t, WAIT).unwrap();
        assert_eq!((c.status(), c.opcode()), (WcStatus::Success, WcOpcode::CompSwap), "{c:?}");
        let t = s.post_send(&qp, wr::CompareSwap::new(back_word, target.slice(136, 8).unwrap(), old, SWAPPED)).unwrap();
        assert!(s.wait(t, WAIT).unwrap().0.is_success());
    })
    .unwrap();
    assert_eq!(word_value(&word), old, "COMPARE_AND_SWAP returns the old word");
    send_done(&qp);
    let region = owner_region(&mut owner);
    let added = (remote::pattern_word(128).wrapping_add(9)).to_le_bytes();
    let want = expected_region(region.len(), &[(0, MESSAGE), (128, &added), (136, &SWAPPED.to_le_bytes())]);
    assert_eq!(region, want, "host B's region after host A's operations:\n{}", owner.output());
    println!("{}\nhost A through host B's window: {:?}", owner.output(), start.elapsed());
}

#[test]
fn host_b_writes_reads_and_runs_atomics_through_a_window_on_host_a() {
    let peer = Peer::get();
    let start = Instant::now();
    let port = TcpPort::TwoHostWindowOnA.get().to_string();
    let common = ["-d".to_string(), device_name(), "-g".into(), gid_index().to_string(), "-p".into(), port];
    let mut args = vec!["serve".to_string(), "--window".into()];
    args.extend(common.iter().cloned());
    let mut owner = Proc::spawn("peer_memory serve (host A)", &example("peer_memory"), &args);
    if let Err(e) = owner.wait_for_line("waiting for a client", OWNER_BOUND) {
        panic!("{e}\n{}", owner.output());
    }
    let mut argv = vec![example("peer_memory").display().to_string(), "access".into(), local_addr()];
    argv.extend(common.iter().cloned());
    let mut user = peer.spawn("peer_memory access", &argv);
    let u = user.wait_exit(OWNER_BOUND);
    let o = owner.wait_exit(OWNER_BOUND);
    let report = format!("{}\n{}", owner.output(), user.output());
    assert_eq!(u, Some(0), "the user on host B failed:\n{report}");
    assert!(o.is_some_and(|(st, _)| st.success()), "the owner on host A failed:\n{report}");
    for step in [
        "write 64 bytes at 0: Success",
        "read 64 bytes at 0: Success",
        "fetch_and_add 5 at 128: Success",
        "compare_and_swap at 136: Success",
    ] {
        assert!(report.contains(step), "host B did not report {step:?}:\n{report}");
    }
    assert!(report.contains("bound a type 1 window"), "{report}");
    let line = owner
        .output()
        .lines()
        .find(|l| l.starts_with("region: "))
        .map(str::to_string)
        .expect("the owner's region line");
    let hex = line.trim_start_matches("region: ").trim();
    let region: Vec<u8> = (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    let message = b"written by peer_memory's client across the wire, 64 bytes long!!";
    let added = remote::pattern_word(128).wrapping_add(5).to_le_bytes();
    let want =
        expected_region(region.len(), &[(0, message), (128, &added), (136, &0x1122_3344_5566_7788u64.to_le_bytes())]);
    assert_eq!(region, want, "host A's region after host B's operations:\n{report}");
    println!("{report}\nhost B through host A's window: {:?}", start.elapsed());
}
