//! Host B, as the tests on host A see it: the agent and the power switch of
//! `scripts/softroce-run --hosts 2` (the protocol is in that script's header), through the peer
//! directory both guests share.
//!
//! Nothing here skips: without a second host every test fails, naming what is missing.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long host B may take to boot (QEMU/TCG, measured ~30 s on a 2-core host).
pub const BOOT_BOUND: Duration = Duration::from_secs(240);
/// How long the agent may take to pick up a request (it polls every 0.1 s).
const PICKUP_BOUND: Duration = Duration::from_secs(30);

/// A variable the two-host runner exports, or a loud failure naming it.
fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: the two-host tests need a second host. Run them with \
             `scripts/softroce-run --hosts 2 -- <test binary>` (scripts/test does), which boots host B \
             on a virtual wire and exports TYPED_VERBS_PEER_DIR, TYPED_VERBS_PEER_ADDR, \
             TYPED_VERBS_LOCAL_ADDR and TYPED_VERBS_NETDEV"
        )
    })
}

/// This host's (A's) IPv4 address on the wire.
pub fn local_addr() -> String {
    var("TYPED_VERBS_LOCAL_ADDR")
}

/// Host B's IPv4 address on the wire.
pub fn peer_addr() -> String {
    var("TYPED_VERBS_PEER_ADDR")
}

/// This host's (A's) network interface on the wire (rxe0 sits on it).
pub fn local_netdev() -> String {
    var("TYPED_VERBS_NETDEV")
}

/// What host B's agent says about its boot (its `ready` file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The boot generation (1 for the first boot; +1 per power cycle).
    pub gen: u32,
    /// Host B's network interface on the wire.
    pub netdev: String,
    /// Host B's kernel release.
    pub kernel: String,
}

/// Host B.
pub struct Peer {
    dir: PathBuf,
}

static NEXT_REQUEST: AtomicU32 = AtomicU32::new(0);

fn read(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// Writes `contents` to `path` by rename (complete when it appears).
fn write_atomic(path: &Path, contents: &[u8]) {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, contents).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    fs::rename(&tmp, path).unwrap_or_else(|e| panic!("rename {}: {e}", path.display()));
}

impl Peer {
    /// Host B, once its agent is ready (bounded wait), or a failure naming what is missing.
    pub fn get() -> Peer {
        let dir = PathBuf::from(var("TYPED_VERBS_PEER_DIR"));
        assert!(dir.is_dir(), "TYPED_VERBS_PEER_DIR={} is not a directory", dir.display());
        let peer = Peer { dir };
        peer.wait_ready(0, BOOT_BOUND);
        peer
    }

    /// The peer directory's `ready` file, parsed, if B is up.
    pub fn info(&self) -> Option<PeerInfo> {
        let text = read(&self.dir.join("ready"))?;
        let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).map(str::to_string);
        Some(PeerInfo { gen: field("gen=")?.parse().ok()?, netdev: field("netdev=")?, kernel: field("kernel=")? })
    }

    /// Waits (bounded) until B's agent of a generation above `after` is ready.
    pub fn wait_ready(&self, after: u32, within: Duration) -> PeerInfo {
        let start = Instant::now();
        loop {
            if let Some(info) = self.info().filter(|i| i.gen > after) {
                return info;
            }
            if let Some(why) = read(&self.dir.join("setup-failed")) {
                panic!("host B's Soft-RoCE setup failed: {why}\n{}", self.logs());
            }
            assert!(
                start.elapsed() < within,
                "host B (generation > {after}) not ready within {within:?}; state {:?}\n{}",
                read(&self.dir.join("state")),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// B's setup log and the supervisor's log, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- host B supervisor ---\n{}\n--- host B setup ---\n{}",
            read(&self.dir.join("supervisor.log")).unwrap_or_default(),
            read(&self.dir.join("setup.log")).unwrap_or_default()
        )
    }

    /// Powers B off at once (its QEMU is killed: a pulled plug); returns once the supervisor
    /// confirms (bounded).
    pub fn power_off(&self) {
        let gen = self.info().map(|i| i.gen).expect("host B is not up");
        write_atomic(&self.dir.join("power"), b"off\n");
        let want = format!("off {gen}");
        let start = Instant::now();
        while read(&self.dir.join("state")).is_none_or(|s| s.trim() != want) {
            assert!(start.elapsed() < PICKUP_BOUND, "host B not powered off within {PICKUP_BOUND:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Boots B again (rxe0 re-created) and waits (bounded) for its agent.
    pub fn power_on(&self, previous_gen: u32) -> PeerInfo {
        write_atomic(&self.dir.join("power"), b"on\n");
        self.wait_ready(previous_gen, BOOT_BOUND)
    }

    /// Starts `argv` on B (as root, in A's working directory, stdin /dev/null).
    pub fn spawn(&self, label: &str, argv: &[String]) -> RemoteProc {
        let id = format!("{}-{}", std::process::id(), NEXT_REQUEST.fetch_add(1, Ordering::Relaxed));
        let queue = self.dir.join("req");
        let tmp = queue.join(format!("{id}.tmp"));
        fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("mkdir {}: {e}", tmp.display()));
        let mut bytes = Vec::new();
        for a in argv {
            bytes.extend_from_slice(a.as_bytes());
            bytes.push(0);
        }
        fs::write(tmp.join("argv"), bytes).expect("write argv");
        let dir = queue.join(&id);
        fs::rename(&tmp, &dir).expect("rename the request");
        let mut p = RemoteProc {
            label: format!("{label} (on host B)"),
            dir,
            gen: self.info().map(|i| i.gen).unwrap_or(0),
            peer_dir: self.dir.clone(),
            argv: argv.join(" "),
            status: None,
            seen: 0,
        };
        let start = Instant::now();
        while !p.dir.join("pid").exists() {
            assert!(
                start.elapsed() < PICKUP_BOUND,
                "host B's agent did not start `{}` within {PICKUP_BOUND:?}\n{}",
                p.argv,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        p.seen = 0;
        p
    }

    /// Runs `argv` on B to its end (bounded); its exit status and output.
    pub fn run(&self, argv: &[&str], within: Duration) -> (i32, String) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let mut p = self.spawn(&argv[0], &argv);
        match p.wait_exit(within) {
            Some(st) => (st, p.output()),
            None => panic!("`{}` on host B did not finish within {within:?}:\n{}", argv.join(" "), p.output()),
        }
    }
}

/// A process on host B, started by its agent. Killed when dropped (if still running).
pub struct RemoteProc {
    /// The name used in messages.
    pub label: String,
    dir: PathBuf,
    gen: u32,
    peer_dir: PathBuf,
    argv: String,
    status: Option<i32>,
    seen: usize,
}

impl RemoteProc {
    /// Everything it printed so far (stdout and stderr together).
    pub fn output(&self) -> String {
        format!("$ {}\n{}", self.argv, read(&self.dir.join("out")).unwrap_or_default())
    }

    /// Whether the host it runs on is still the same boot.
    fn host_alive(&self) -> bool {
        read(&self.peer_dir.join("ready")).is_some_and(|t| t.lines().any(|l| l == format!("gen={}", self.gen)))
    }

    /// Its exit status, if it has exited.
    pub fn poll(&mut self) -> Option<i32> {
        if self.status.is_none() {
            self.status = read(&self.dir.join("status")).and_then(|s| s.trim().parse().ok());
        }
        self.status
    }

    /// Waits (bounded) for an output line containing `needle`, from the line after the last
    /// one this found.
    pub fn wait_for_line(&mut self, needle: &str, within: Duration) -> Result<String, String> {
        let start = Instant::now();
        loop {
            let out = read(&self.dir.join("out")).unwrap_or_default();
            let lines: Vec<&str> = out.lines().collect();
            // Only complete lines (the last one may still be written).
            let complete = if out.ends_with('\n') { lines.len() } else { lines.len().saturating_sub(1) };
            if let Some(i) = (self.seen..complete).find(|&i| lines[i].contains(needle)) {
                self.seen = i + 1;
                return Ok(lines[i].to_string());
            }
            if let Some(st) = self.poll() {
                return Err(format!("{} exited ({st}) before printing {needle:?}:\n{}", self.label, self.output()));
            }
            if !self.host_alive() {
                return Err(format!("host B went down while {} was running:\n{}", self.label, self.output()));
            }
            if start.elapsed() >= within {
                return Err(format!("{} did not print {needle:?} within {within:?}:\n{}", self.label, self.output()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits at most `within` for the exit; its status.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.poll() {
                return Some(st);
            }
            if start.elapsed() >= within || !self.host_alive() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGKILL (through the agent) if it is still running, and waits (bounded) for it.
    pub fn kill(&mut self) {
        if self.poll().is_some() || !self.host_alive() {
            return;
        }
        let _ = fs::write(self.dir.join("kill.tmp"), "KILL");
        let _ = fs::rename(self.dir.join("kill.tmp"), self.dir.join("kill"));
        let _ = self.wait_exit(PICKUP_BOUND);
    }
}

impl Drop for RemoteProc {
    fn drop(&mut self) {
        self.kill();
    }
}
