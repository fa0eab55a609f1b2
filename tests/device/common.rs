//! Shared set-up for the device tests.

use std::time::Duration;

use typed_verbs::access::AccessSet;
use typed_verbs::prelude::*;

/// Generous: everything is slow under software emulation.
pub const WAIT: Duration = Duration::from_secs(30);

#[cfg(feature = "tokio")]
pub use wakers::*;

/// Futures polled by hand (the async tests, with the `tokio` feature).
#[cfg(feature = "tokio")]
mod wakers {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context as TaskContext, Poll, Wake, Waker};

    /// A waker that counts its wakes ([`count_waker`]).
    pub struct CountWake(AtomicUsize);

    impl CountWake {
        /// How many times it was woken.
        pub fn wakes(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    impl Wake for CountWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A counting waker, and its count.
    pub fn count_waker() -> (Arc<CountWake>, Waker) {
        let c = Arc::new(CountWake(AtomicUsize::new(0)));
        (Arc::clone(&c), Waker::from(c))
    }

    /// Polls `fut` once with `waker` (by hand, outside any task).
    pub fn poll_with<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> Poll<F::Output> {
        Pin::new(fut).poll(&mut TaskContext::from_waker(waker))
    }
}

/// Asserts that `e` is the refusal a test means: [`Error::InvalidArgument`] of `verb` whose
/// reason contains `reason_part` (a literal part of the check's message), not merely some
/// refusal, which another check could have made. Prints the whole error otherwise.
#[track_caller]
pub fn assert_invalid(e: &Error, verb: &str, reason_part: &str) {
    match e {
        Error::InvalidArgument { verb: v, reason } if *v == verb && reason.contains(reason_part) => {}
        other => panic!(
            "expected Error::InvalidArgument {{ verb: {verb:?}, reason containing {reason_part:?} }}, got {other:?}"
        ),
    }
}

/// As [`assert_invalid`], for a result that must be that refusal; an `Ok` is printed.
#[track_caller]
pub fn assert_refused<T: std::fmt::Debug>(r: std::result::Result<T, Error>, verb: &str, reason_part: &str) {
    match r {
        Err(e) => assert_invalid(&e, verb, reason_part),
        Ok(v) => panic!(
            "expected Error::InvalidArgument {{ verb: {verb:?}, reason containing {reason_part:?} }}, accepted: {v:?}"
        ),
    }
}

/// The device under test: `$TYPED_VERBS_DEVICE`, else the first device present. Panics (the
/// test fails) when there is none: device tests must never pass without a device.
pub fn device_name() -> String {
    if let Ok(name) = std::env::var("TYPED_VERBS_DEVICE") {
        return name;
    }
    let devs = devices().unwrap_or_else(|e| {
        panic!(
            "no RDMA device available ({e}): device tests need one. Run them with scripts/test \
             (Soft-RoCE in a VM) or set TYPED_VERBS_DEVICE on a machine with an RDMA device"
        )
    });
    match devs.first() {
        Some(d) => d.name.clone(),
        None => panic!(
            "no RDMA device present: device tests need one. Run them with scripts/test (Soft-RoCE in a VM) \
             or set TYPED_VERBS_DEVICE on a machine with an RDMA device"
        ),
    }
}

/// The GID index to use: `$TYPED_VERBS_GID_INDEX`, default 1 (the IPv4-mapped RoCEv2 GID of rxe).
pub fn gid_index() -> u8 {
    std::env::var("TYPED_VERBS_GID_INDEX").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

pub const PORT: u8 = 1;

/// Whether the device is Soft-RoCE, by the library's predicate (`DeviceAttr::is_soft_roce`),
/// cross-checked against the device's name: rxe devices are the ones named `rxe*` (the test
/// VM's is `rxe0`, scripts/softroce-run). Tests that assert rxe's behaviour only where this is
/// true would assert nothing if the predicate broke; this makes a broken predicate fail them.
pub fn is_soft_roce(ctx: &Context) -> bool {
    let by_library = ctx.query_device().expect("ibv_query_device").is_soft_roce();
    let name = ctx.device_name();
    assert_eq!(by_library, name.starts_with("rxe"), "is_soft_roce() is {by_library} for device {name}");
    by_library
}

pub fn open() -> Context {
    let name = device_name();
    Context::open(&name).unwrap_or_else(|e| panic!("cannot open RDMA device {name}: {e}"))
}

/// The device, a PD and one CQ of 256 entries: what most single-process tests start from.
pub struct Rig {
    pub _ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
}

/// Opens [`Rig`] on the test device.
pub fn rig() -> Rig {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    Rig { _ctx: ctx, pd, cq }
}

/// Two RC QPs on one device, connected to each other (loopback), in RTS.
pub struct RcPair {
    pub a: Qp<RC, RTS>,
    pub b: Qp<RC, RTS>,
}

pub fn rc_pair(pd: &Pd, cq_a: &Cq, cq_b: &Cq, access: impl AccessSet, caps: QpCaps) -> RcPair {
    let a = pd.create_qp::<RC>(&QpConfig::new(cq_a).caps(caps)).expect("create QP a");
    let b = pd.create_qp::<RC>(&QpConfig::new(cq_b).caps(caps)).expect("create QP b");
    let ea = a.endpoint(PORT, gid_index(), 0x1000).expect("endpoint a");
    let eb = b.endpoint(PORT, gid_index(), 0x2000).expect("endpoint b");
    let a = connect_rc(a, access, &ea, &eb);
    let b = connect_rc(b, access, &eb, &ea);
    RcPair { a, b }
}

pub fn connect_rc(qp: Qp<RC, RESET>, access: impl AccessSet, me: &Endpoint, peer: &Endpoint) -> Qp<RC, RTS> {
    let qp = qp.to_init(&ConnectedInit::new(PORT, access)).expect("RESET->INIT");
    let av = AddressVector::global(PORT, peer.gid, gid_index());
    let qp = qp.to_rtr(&RcRtr::new(av, peer.qp_num, peer.psn)).expect("INIT->RTR");
    qp.to_rts(&RcRts::new(me.psn)).expect("RTR->RTS")
}

/// Two UC QPs on one device, connected to each other, in RTS.
pub fn uc_pair(pd: &Pd, cq: &Cq, access: impl AccessSet, caps: QpCaps) -> (Qp<UC, RTS>, Qp<UC, RTS>) {
    let a = pd.create_qp::<UC>(&QpConfig::new(cq).caps(caps)).expect("create UC QP a");
    let b = pd.create_qp::<UC>(&QpConfig::new(cq).caps(caps)).expect("create UC QP b");
    let ea = a.endpoint(PORT, gid_index(), 0x3000).expect("endpoint a");
    let eb = b.endpoint(PORT, gid_index(), 0x4000).expect("endpoint b");
    let connect = |qp: Qp<UC, RESET>, me: &Endpoint, peer: &Endpoint| {
        let qp = qp.to_init(&ConnectedInit::new(PORT, access)).expect("UC RESET->INIT");
        let av = AddressVector::global(PORT, peer.gid, gid_index());
        let qp = qp.to_rtr(&UcRtr::new(av, peer.qp_num, peer.psn)).expect("UC INIT->RTR");
        qp.to_rts(&SqPsn { sq_psn: me.psn }).expect("UC RTR->RTS")
    };
    (connect(a, &ea, &eb), connect(b, &eb, &ea))
}

/// The Q_Key the UD tests use (the one ibv_ud_pingpong uses).
pub const QKEY: u32 = 0x1111_1111;

/// A UD QP in RTS.
pub fn ud_qp(pd: &Pd, cq: &Cq, caps: QpCaps) -> Qp<UD, RTS> {
    let qp = pd.create_qp::<UD>(&QpConfig::new(cq).caps(caps)).expect("create UD QP");
    let qp = qp.to_init(&UdInit { port: PORT, pkey_index: 0, qkey: QKEY }).expect("UD RESET->INIT");
    let qp = qp.to_rtr(&UdRtr).expect("UD INIT->RTR");
    qp.to_rts(&SqPsn { sq_psn: 0x5000 }).expect("UD RTR->RTS")
}

/// An RC pair on one CQ whose `b` binds windows to `target` (the "server" region), and a
/// source buffer for the "client" `a`: what the window tests share.
pub struct WindowRig {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub p: RcPair,
    /// The "server" region, reachable only through windows.
    pub target: Mr<access::WindowBindable>,
    /// The "client" source buffer.
    pub src: Mr<access::LocalRead>,
}

pub fn window_rig() -> WindowRig {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    // Room for the rig's pair and a second pair of default depths (the tests that need one).
    let cq = ctx.create_cq(512).unwrap();
    let caps = QpCaps { max_inline_data: 64, ..QpCaps::default() };
    let p = rc_pair(&pd, &cq, &cq, Access::NONE.remote_write().remote_read(), caps);
    let target = pd.alloc_mr(8192, access::WINDOW_BINDABLE).unwrap();
    let mut src = pd.alloc_mr(4096, access::LOCAL_READ).unwrap();
    fill(&mut src, 42);
    WindowRig { ctx, pd, cq, p, target, src }
}

/// Fills a region no peer can write with a recognisable pattern.
pub fn fill<A: typed_verbs::access::PeerCannotWrite>(mr: &mut Mr<A>, seed: u8) {
    for (i, b) in mr.as_mut_slice().iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

/// [`connect_rc`] with the RTR and RTS attributes adjusted by `rtr` and `rts` (timers, retry
/// counts, path MTU), for the tests of the failure paths.
pub fn connect_rc_with(
    qp: Qp<RC, RESET>,
    access: impl AccessSet,
    me: &Endpoint,
    peer: &Endpoint,
    rtr: impl FnOnce(&mut RcRtr),
    rts: impl FnOnce(&mut RcRts),
) -> Qp<RC, RTS> {
    let qp = qp.to_init(&ConnectedInit::new(PORT, access)).expect("RESET->INIT");
    let av = AddressVector::global(PORT, peer.gid, gid_index());
    let mut rtr_attr = RcRtr::new(av, peer.qp_num, peer.psn);
    rtr(&mut rtr_attr);
    let qp = qp.to_rtr(&rtr_attr).expect("INIT->RTR");
    let mut rts_attr = RcRts::new(me.psn);
    rts(&mut rts_attr);
    qp.to_rts(&rts_attr).expect("RTR->RTS")
}

/// The `kB` value of the line `field` (e.g. `"MemTotal:"`) of a `/proc` file such as
/// `/proc/meminfo` or `/proc/self/status`, in bytes.
pub fn proc_bytes(file: &str, field: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {file}: {e}"));
    let line = text.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in {file}"));
    let kb: usize = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number of kB");
    kb * 1024
}

/// The `KernelPageSize` of the mapping of this process that contains `addr`
/// (`/proc/self/smaps`), in bytes: the huge page size for memory in huge pages.
pub fn kernel_page_size(addr: u64) -> Option<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-') && !r.ends_with(':')) {
            let (lo, hi) = range.split_once('-').expect("a mapping's address range");
            let (lo, hi) = (u64::from_str_radix(lo, 16).unwrap_or(0), u64::from_str_radix(hi, 16).unwrap_or(0));
            inside = (lo..hi).contains(&addr);
        } else if inside && line.starts_with("KernelPageSize:") {
            return line.split_whitespace().nth(1).and_then(|v| v.parse::<usize>().ok()).map(|kb| kb * 1024);
        }
    }
    None
}

/// The C tool `name` (ibverbs-utils), from `$PATH` or `/usr/bin`.
pub fn c_tool(name: &str) -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([std::path::PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("`{name}` not found in $PATH or /usr/bin: install ibverbs-utils (scripts/install-deps)")
        })
}

/// Our example binary `name`, next to this test binary: `target/<profile>/deps/device-…` →
/// `target/<profile>/examples/<name>`.
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the path of the test binary");
    let mut candidates = Vec::new();
    if let Some(profile_dir) = exe.parent().and_then(std::path::Path::parent) {
        candidates.push(profile_dir.join("examples").join(name));
    }
    candidates.push(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/examples").join(name));
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!(
            "example binary `{name}` not found (looked at {candidates:?}): build the examples \
                 before running the device tests: `cargo build --examples`"
        )
    })
}

// --- child processes (the C tools and our examples) ------------------------------------------

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// A child process whose stdout and stderr are collected by reader threads; stdout lines are
/// also forwarded on a channel so a test can wait for one.
pub struct Proc {
    /// The name used in messages.
    pub label: String,
    child: Child,
    /// The exit status, once the process has exited and was polled.
    pub status: Option<ExitStatus>,
    output: Arc<Mutex<String>>,
    lines: Receiver<String>,
    readers: Vec<JoinHandle<()>>,
}

impl Proc {
    /// Starts `program` with `args`, its output collected.
    pub fn spawn(label: &str, program: &Path, args: &[String]) -> Proc {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let output = Arc::new(Mutex::new(format!("$ {} {}\n", program.display(), args.join(" "))));
        let (tx, lines) = mpsc::channel();
        let mut readers = Vec::new();
        let stdout = child.stdout.take().expect("piped stdout");
        let out = Arc::clone(&output);
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lock(&out).push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        }));
        let mut stderr = child.stderr.take().expect("piped stderr");
        let out = Arc::clone(&output);
        readers.push(std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            if !s.is_empty() {
                lock(&out).push_str(&format!("[stderr]\n{s}"));
            }
        }));
        Proc { label: label.to_string(), child, status: None, output, lines, readers }
    }

    /// Polls the process; records its exit status once it has exited.
    pub fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    /// Waits (bounded) for a stdout line containing `needle`.
    pub fn wait_for_line(&mut self, needle: &str, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) if line.contains(needle) => return Ok(()),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(st) = self.poll() {
                        return Err(format!("{} exited ({st}) before printing {needle:?}", self.label));
                    }
                    if Instant::now() >= deadline {
                        return Err(format!("{} did not print {needle:?} within {} s", self.label, within.as_secs()));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("{} closed its stdout before printing {needle:?}", self.label))
                }
            }
        }
    }

    /// Kills the process if it is still running and reaps it; collects its output.
    pub fn stop(&mut self) {
        if self.poll().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }

    /// Everything the process printed so far (stdout, then stderr).
    pub fn output(&self) -> String {
        lock(&self.output).clone()
    }

    /// Waits at most `within` for the exit; the status and how long it took, with all output
    /// collected.
    pub fn wait_exit(&mut self, within: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Some(st) = self.poll() {
                self.stop(); // reaps and joins the readers: the output is complete
                return Some((st, start.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Waits at most `within` for the exit and asserts it succeeded (the test fails, with
    /// everything the process printed, if it failed or is still running: it is killed then);
    /// its output.
    pub fn expect_success(&mut self, within: Duration) -> String {
        match self.wait_exit(within) {
            Some((st, _)) => assert!(st.success(), "{} failed ({st}):\n{}", self.label, self.output()),
            None => {
                self.stop();
                panic!("{} did not finish within {within:?}:\n{}", self.label, self.output());
            }
        }
        self.output()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// --- rping (rdma-core's and examples/rping.rs) ------------------------------------------------

/// The ping data of ping `ping` in a buffer of `size` bytes, as rping.c's client writes it:
/// `snprintf("rdma-ping-%d: ")`, then letters from `'A'` (one further at each ping) up to
/// `'z'` and around again, and a NUL as the last byte (not part of the printed text).
pub fn ping_data(ping: u64, size: usize) -> String {
    let mut text = format!("rdma-ping-{ping}: ");
    let letters: Vec<char> = (b'A'..=b'z').map(char::from).collect();
    let mut i = (ping % letters.len() as u64) as usize;
    while text.len() < size - 1 {
        text.push(letters[i]);
        i = (i + 1) % letters.len();
    }
    text.truncate(size - 1);
    text
}

/// The lines rping's `-v` prints for `count` pings of `size` bytes: `prefix` then the ping data.
pub fn expected_pings(prefix: &str, count: u64, size: usize) -> Vec<String> {
    (0..count).map(|n| format!("{prefix}{}", ping_data(n, size))).collect()
}

/// The lines of `output` that start with `prefix`.
pub fn lines_with(output: &str, prefix: &str) -> Vec<String> {
    output.lines().filter(|l| l.starts_with(prefix)).map(String::from).collect()
}

// --- TCP ports --------------------------------------------------------------------------------

/// Every TCP port a device test listens on or hands to a child process. The tests run on
/// several threads at once, so two tests sharing a port could take each other's connection.
/// The ports are this enum's discriminants offset by [`TcpPort::BASE`]: the compiler numbers
/// the variants consecutively, so two tests cannot get the same port (by construction), and
/// `no_test_names_a_tcp_port_literally` checks that no test bypasses the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpPort {
    RcServerWithC,
    RcClientWithC,
    UcServerWithC,
    UcClientWithC,
    UdServerWithC,
    UdClientWithC,
    SrqServerWithC,
    SrqClientWithC,
    RcClientMalformedAddress,
    UcServerNeverSends,
    KilledCServer,
    PerfSendLatTwoProcesses,
    PerfWriteLatTwoProcesses,
    // RDMA CM ports (rdma_cm's own port space, kept in the same registry).
    CmOursWithCClient,
    CmCServerWithOurs,
    CmOurServerExampleWithCClient,
    CmCServerWithOurClientExample,
    CmKilledCServer,
    CmUdaddyOurs,
    // rping (tests/device/rping.rs).
    CmRpingOurServerWithCClient,
    CmRpingCServerWithOurClient,
    CmRpingOursWithOurs,
    CmRpingSizeMismatch,
    CmRpingNobodyListens,
    // The two-host tests (tests/twohost/, which includes this file): listened on by host A or B.
    TwoHostRcOursOnA,
    TwoHostRcOursOnB,
    TwoHostUcOursOnA,
    TwoHostUcOursOnB,
    TwoHostUdOursOnA,
    TwoHostUdOursOnB,
    TwoHostSrqOursOnA,
    TwoHostSrqOursOnB,
    TwoHostWindowOnB,
    TwoHostWindowOnA,
    TwoHostPowerOff,
    TwoHostLinkDown,
    TwoHostMtu,
    TwoHostCmOursOnA,
    TwoHostCmOursOnB,
    TwoHostRpingOursOnA,
    TwoHostRpingOursOnB,
    // examples/async_echo (tests/device/async_owned.rs).
    CmAsyncEcho,
    // tests/device/interop.rs: `-c` on our server only.
    RcServerChkUnmarked,
}

impl TcpPort {
    /// The first port; the range is unused by the other tools the tests run (perftest's default
    /// 18515 is below it).
    pub const BASE: u16 = 18600;

    /// The port number.
    pub const fn get(self) -> u16 {
        Self::BASE + self as u16
    }
}

/// A ping-pong example against its C tool with `-c` on both sides: the C tool found no invalid
/// data (it checks the page marks of its buffer at the end, the server only, and prints a line
/// per bad page), and ours checked every byte of at least `iters` received messages
/// (`exactly`: of `iters`).
pub fn assert_pingpong_checked(ours: &str, theirs: &str, iters: u32, exactly: bool, report: &str) {
    assert!(!theirs.contains("invalid data"), "the C tool found invalid data:\n{report}");
    let checked: u32 = ours
        .lines()
        .find_map(|l| l.trim().strip_prefix("-c: ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("ours did not say what it checked:\n{report}"));
    if exactly {
        assert_eq!(checked, iters, "messages checked:\n{report}");
    } else {
        assert!(checked >= iters, "{checked} messages checked, fewer than {iters}:\n{report}");
    }
}

/// The registry is the only place a port number is written: no test file (of `tests/device/`
/// and `tests/twohost/`) spells one out (a literal in 18515..=18699 would bypass the registry
/// and could collide with it).
#[test]
fn no_test_names_a_tcp_port_literally() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    let mut files = 0;
    let entries = ["tests/device", "tests/twohost"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap_or_else(|e| panic!("{d}: {e}")));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|e| e != "rs") || path.ends_with("common.rs") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).expect("a test source");
        for (n, line) in text.lines().enumerate() {
            let digits: Vec<&str> = line.split(|c: char| !c.is_ascii_digit()).filter(|w| w.len() == 5).collect();
            if digits.iter().any(|w| w.parse::<u16>().is_ok_and(|p| (18515..=18699).contains(&p))) {
                offenders.push(format!("{}:{}: {line}", path.display(), n + 1));
            }
        }
    }
    assert!(files >= 14, "read only {files} test files in tests/device and tests/twohost");
    assert!(offenders.is_empty(), "TCP ports written outside common::TcpPort:\n{}", offenders.join("\n"));
    // The registry's ports are distinct and inside the checked range.
    let all = [
        TcpPort::RcServerWithC,
        TcpPort::SrqClientWithC,
        TcpPort::KilledCServer,
        TcpPort::PerfSendLatTwoProcesses,
        TcpPort::PerfWriteLatTwoProcesses,
        TcpPort::CmOursWithCClient,
        TcpPort::CmCServerWithOurs,
        TcpPort::CmOurServerExampleWithCClient,
        TcpPort::CmCServerWithOurClientExample,
        TcpPort::CmKilledCServer,
        TcpPort::CmUdaddyOurs,
        TcpPort::CmRpingOurServerWithCClient,
        TcpPort::CmRpingCServerWithOurClient,
        TcpPort::CmRpingOursWithOurs,
        TcpPort::CmRpingSizeMismatch,
        TcpPort::CmRpingNobodyListens,
        // Every two-host port (this also keeps them used in the device binary).
        TcpPort::TwoHostRcOursOnA,
        TcpPort::TwoHostRcOursOnB,
        TcpPort::TwoHostUcOursOnA,
        TcpPort::TwoHostUcOursOnB,
        TcpPort::TwoHostUdOursOnA,
        TcpPort::TwoHostUdOursOnB,
        TcpPort::TwoHostSrqOursOnA,
        TcpPort::TwoHostSrqOursOnB,
        TcpPort::TwoHostWindowOnB,
        TcpPort::TwoHostWindowOnA,
        TcpPort::TwoHostPowerOff,
        TcpPort::TwoHostLinkDown,
        TcpPort::TwoHostMtu,
        TcpPort::TwoHostCmOursOnA,
        TcpPort::TwoHostCmOursOnB,
        TcpPort::TwoHostRpingOursOnA,
        TcpPort::TwoHostRpingOursOnB,
        TcpPort::CmAsyncEcho,
    ];
    let ports: std::collections::HashSet<u16> = all.iter().map(|p| p.get()).collect();
    assert_eq!(ports.len(), all.len(), "{all:?}");
    assert!(ports.iter().all(|p| (18600..=18699).contains(p)), "{ports:?}");
}

/// The progress lines `udaddy` (rdma-core's, and `examples/udaddy.rs`) prints as a client.
pub const UDADDY_CLIENT_LINES: &[&str] =
    &["initiating data transfers", "receiving data transfers", "data transfers complete", "return status 0"];
/// The progress lines `udaddy` prints as a server.
pub const UDADDY_SERVER_LINES: &[&str] =
    &["receiving data transfers", "sending replies", "data transfers complete", "return status 0"];

/// Asserts that `lines` appear in `out` in this order (other lines between them).
pub fn assert_lines_in_order(out: &str, lines: &[&str]) {
    let mut rest = out;
    for l in lines {
        let at = rest.find(l).unwrap_or_else(|| panic!("{l:?} missing (or out of order) in:\n{out}"));
        rest = &rest[at + l.len()..];
    }
}
