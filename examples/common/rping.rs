//! What the `rping` example's two roles share, as rdma-core's `librdmacm/examples/rping.c`
//! defines it: the command line, the buffer advertisement a SEND carries, and the ping data.
//!
//! - The advertisement (`struct rping_rdma_info`) is 16 bytes, every field big endian: the
//!   buffer's address (`u64`), its rkey (`u32`) and its size (`u32`).
//! - Ping `n`'s data is `"rdma-ping-n: "` followed by letters cycling through `'A'..='z'`
//!   (ASCII 65 to 122), starting one letter further at each ping, and a NUL as the last byte
//!   of the buffer.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// The length of an advertisement on the wire (`sizeof(struct rping_rdma_info)`).
pub const INFO_LEN: usize = 16;

/// The C tool's default port.
pub const DEFAULT_PORT: u16 = 7174;

/// The C tool's default ping data size.
pub const DEFAULT_SIZE: usize = 64;

/// The smallest size the C tool accepts (`RPING_MIN_BUFSIZE`: room for the longest
/// `"rdma-ping-%d: "` and its NUL).
pub const MIN_SIZE: usize = 23;

/// The largest size the C tool accepts (`RPING_BUFSIZE - 1`).
pub const MAX_SIZE: usize = 65535;

/// A buffer advertisement (`struct rping_rdma_info`): where the peer may read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// The buffer's address.
    pub addr: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its size in bytes.
    pub size: u32,
}

impl Info {
    /// The 16 bytes on the wire.
    pub fn encode(&self) -> [u8; INFO_LEN] {
        let mut b = [0u8; INFO_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// Decodes a received advertisement.
    ///
    /// # Errors
    /// A message of another length than 16 bytes (the C tool's "Received bogus data").
    pub fn decode(b: &[u8]) -> Result<Info, String> {
        let b: &[u8; INFO_LEN] =
            b.try_into().map_err(|_| format!("received bogus data, size {} (expected {INFO_LEN})", b.len()))?;
        Ok(Info {
            addr: u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
            rkey: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            size: u32::from_be_bytes(b[12..].try_into().expect("4 bytes")),
        })
    }
}

/// The first letter of the ping data of ping `ping`: `'A'` for ping 0, one further at each
/// ping, back to `'A'` after `'z'`.
pub fn first_letter(ping: u64) -> u8 {
    b'A' + (ping % u64::from(b'z' - b'A' + 1)) as u8
}

/// Fills `buf` with the data of ping `ping`, as the C client does: `"rdma-ping-<ping>: "`
/// (cut to the buffer), letters from [`first_letter`] on, and a NUL in the last byte.
pub fn fill_ping(buf: &mut [u8], ping: u64) {
    let Some(last) = buf.len().checked_sub(1) else { return };
    let prefix = format!("rdma-ping-{ping}: ");
    let n = prefix.len().min(last);
    buf[..n].copy_from_slice(&prefix.as_bytes()[..n]);
    let mut c = first_letter(ping);
    let from = prefix.len().min(buf.len());
    for b in &mut buf[from..] {
        *b = c;
        c = if c == b'z' { b'A' } else { c + 1 };
    }
    buf[last] = 0;
}

/// The C string at the start of `buf`: the bytes before its first NUL (all of them if it has
/// none). What the C tool prints with `%s` and echoes with `strlen(buf) + 1`.
pub fn c_str(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..end]
}

/// Which side this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `-s`: listens, RDMA READs the client's ping data and RDMA WRITEs it back.
    Server,
    /// `-c`: connects and pings.
    Client,
}

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `-s` or `-c`.
    pub role: Role,
    /// `-a`: the address to listen on (server; default every IPv4 address) or to connect to
    /// (client; required).
    pub addr: Option<IpAddr>,
    /// `-I`: the client's source address.
    pub source: Option<IpAddr>,
    /// `-p`: the port.
    pub port: u16,
    /// `-C`: pings (client; 0, the default, pings until stopped). The server, as the C one,
    /// serves until the client disconnects.
    pub count: u64,
    /// `-S`: the ping data size, in bytes.
    pub size: usize,
    /// `-v`: print each ping's data.
    pub verbose: bool,
    /// `-V`: check that the data written back equals the data read (client).
    pub validate: bool,
    /// `-d`: print each step.
    pub debug: bool,
    /// `--timeout`: bound on each wait (a completion, the peer's next message, address and
    /// route resolution, the connection, the client's retries of a refused connection).
    pub timeout: Duration,
    /// `--accept-timeout`: how long the server waits for a client.
    pub accept_timeout: Duration,
}

/// The usage text (the C tool's, and the options of this example).
pub fn usage() -> String {
    format!(
        "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]
rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
\t-c\t\tclient side
\t-I\t\tSource address to bind to for client.
\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0
\t-v\t\tdisplay ping data to stdout
\t-V\t\tvalidate ping data
\t-d\t\tdebug printfs
\t-S size \tping data size ({MIN_SIZE} to {MAX_SIZE}, default {DEFAULT_SIZE})
\t-C count\tping count times (default 0: until stopped)
\t-a addr\t\taddress
\t-p port\t\tport (default {DEFAULT_PORT})
\t--timeout secs\tbound on each wait, and on the client's retries of a refused
\t\t\tconnection (default 30)
\t--accept-timeout secs\thow long the server waits for a client (default 300)
"
    )
}

/// What the command line asked for: run, or print the usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run with these options.
    Run(Options),
    /// `-h` / `--help`.
    Help,
}

/// `addr` (an IP address or a host name) resolved to an IP address.
fn resolve(opt: char, addr: &str) -> Result<IpAddr, String> {
    if let Ok(ip) = addr.parse() {
        return Ok(ip);
    }
    (addr, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a: SocketAddr| a.ip())
        .ok_or_else(|| format!("-{opt} {addr}: invalid hostname or IP address"))
}

fn number<T: std::str::FromStr>(what: &str, s: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| format!("{what} {s:?} is not a valid number"))
}

fn seconds(opt: &str, s: &str) -> Result<Duration, String> {
    let secs: u64 = number(opt, s)?;
    if secs == 0 {
        return Err(format!("{opt} must be at least 1 second"));
    }
    Ok(Duration::from_secs(secs))
}

/// Parses the arguments (without the program name), getopt style as the C tool: flags may be
/// grouped (`-vV`), a value follows its option attached or as the next argument (`-C5`,
/// `-C 5`); `--timeout` and `--accept-timeout` take `=SECS` or the next argument.
///
/// # Errors
/// A message naming the bad option or value.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Command, String> {
    let mut role = None;
    let mut o = Options {
        role: Role::Server,
        addr: None,
        source: None,
        port: DEFAULT_PORT,
        count: 0,
        size: DEFAULT_SIZE,
        verbose: false,
        validate: false,
        debug: false,
        timeout: Duration::from_secs(30),
        accept_timeout: Duration::from_secs(300),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            if name == "help" {
                return Ok(Command::Help);
            }
            if name != "timeout" && name != "accept-timeout" {
                return Err(format!("unknown option {arg}"));
            }
            let value = match inline {
                Some(v) => v,
                None => args.next().ok_or_else(|| format!("option --{name} needs a value"))?,
            };
            let d = seconds(&format!("--{name}"), &value)?;
            if name == "timeout" {
                o.timeout = d;
            } else {
                o.accept_timeout = d;
            }
            continue;
        }
        let Some(flags) = arg.strip_prefix('-').filter(|f| !f.is_empty()) else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        for (i, opt) in flags.char_indices() {
            match opt {
                's' => role = Some(Role::Server),
                'c' => role = Some(Role::Client),
                'v' => o.verbose = true,
                'V' => o.validate = true,
                'd' => o.debug = true,
                'h' => return Ok(Command::Help),
                'P' | 'q' => return Err(format!("option -{opt} is not implemented by this example")),
                'a' | 'I' | 'p' | 'C' | 'S' => {
                    let rest = &flags[i + opt.len_utf8()..];
                    let value = if rest.is_empty() {
                        args.next().ok_or_else(|| format!("option -{opt} needs a value"))?
                    } else {
                        rest.to_string()
                    };
                    match opt {
                        'a' => o.addr = Some(resolve(opt, &value)?),
                        'I' => o.source = Some(resolve(opt, &value)?),
                        'p' => o.port = number("port", &value)?,
                        'C' => o.count = number("count", &value).map_err(|_| format!("Invalid count {value}"))?,
                        _ => {
                            let size: usize = number("size", &value)?;
                            if !(MIN_SIZE..=MAX_SIZE).contains(&size) {
                                return Err(format!("Invalid size {size} (valid range is {MIN_SIZE} to {MAX_SIZE})"));
                            }
                            o.size = size;
                        }
                    }
                    break; // the rest of the argument was the value
                }
                other => return Err(format!("unknown option -{other}")),
            }
        }
    }
    o.role = role.ok_or("one of -s (server) and -c (client) is required")?;
    if o.role == Role::Client && o.addr.is_none() {
        return Err("the client needs the server's address (-a addr)".into());
    }
    Ok(Command::Run(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Command, String> {
        parse_args(s.split_whitespace().map(String::from))
    }

    fn run(s: &str) -> Options {
        match args(s) {
            Ok(Command::Run(o)) => o,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn advertisements_are_big_endian_address_rkey_size() {
        let info = Info { addr: 0x0102_0304_0506_0708, rkey: 0x1122_3344, size: 64 };
        let wire = info.encode();
        assert_eq!(wire, [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]);
        assert_eq!(Info::decode(&wire), Ok(info));
        assert!(Info::decode(&wire[..15]).is_err(), "a short message is bogus");
        assert!(Info::decode(&[0; 17]).is_err(), "so is a long one");
    }

    #[test]
    fn ping_data_follows_the_c_client() {
        let mut buf = [0xffu8; 64];
        fill_ping(&mut buf, 0);
        let text = c_str(&buf);
        assert_eq!(text.len(), 63, "the NUL is the last byte");
        assert_eq!(&text[..13], b"rdma-ping-0: ");
        assert_eq!(&text[13..], b"ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr");
        // One letter further at each ping; after 'z' comes 'A' again.
        fill_ping(&mut buf, 1);
        assert_eq!(&c_str(&buf)[..15], b"rdma-ping-1: BC");
        fill_ping(&mut buf, 57);
        assert_eq!(&c_str(&buf)[..17], b"rdma-ping-57: zAB");
        assert_eq!(first_letter(58), b'A');
        // The smallest size: the prefix of the largest ping number fills it, nothing is cut.
        let mut small = [0u8; MIN_SIZE];
        fill_ping(&mut small, u64::from(u32::MAX >> 1));
        assert_eq!(c_str(&small), b"rdma-ping-2147483647: ");
        // A prefix longer than the buffer is cut, and the buffer still ends with a NUL.
        fill_ping(&mut small, u64::MAX);
        assert_eq!(c_str(&small), b"rdma-ping-184467440737");
        assert_eq!(small[MIN_SIZE - 1], 0);
    }

    #[test]
    fn the_command_line_is_the_c_tools() {
        let o = run("-c -a 192.0.2.1 -v -V -C 5");
        assert_eq!(o.role, Role::Client);
        assert_eq!(o.addr, Some("192.0.2.1".parse().unwrap()));
        assert_eq!((o.count, o.size, o.port), (5, DEFAULT_SIZE, DEFAULT_PORT));
        assert!(o.verbose && o.validate && !o.debug);
        let o = run("-s -vVd -S100 -C 3 -p 7000 --timeout=9 --accept-timeout 11");
        assert_eq!(o.role, Role::Server);
        assert_eq!((o.addr, o.size, o.count, o.port), (None, 100, 3, 7000));
        assert!(o.verbose && o.validate && o.debug);
        assert_eq!((o.timeout, o.accept_timeout), (Duration::from_secs(9), Duration::from_secs(11)));
        assert_eq!(args("-h"), Ok(Command::Help));
    }

    #[test]
    fn bad_command_lines_are_refused() {
        for bad in [
            "-v",
            "-c -v",
            "-s -S 22",
            "-s -S 65536",
            "-s -C -1",
            "-s -p",
            "-s -x",
            "-s -P",
            "-s --timeout 0",
            "-s extra",
        ] {
            assert!(args(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
