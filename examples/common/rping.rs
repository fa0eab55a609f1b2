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

/// What the command line asked for: the C tool's options (getopt's forms: flags grouped as in
/// `-vVd`, values attached or not, `-C5` or `-C 5`), and this example's time bounds.
#[derive(Debug, Clone, PartialEq, Eq, clap::Parser)]
#[command(
    name = "rping",
    about = "librdmacm's rping, written with typed-verbs: RDMA READs and WRITEs over an RC \
             connection of the RDMA connection manager",
    args_override_self = true,
    override_usage = "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n       \
                      rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]",
    group = clap::ArgGroup::new("role").required(true).args(["server", "client"]),
)]
pub struct Options {
    /// server side.  To bind to any address with IPv6 use -a ::0
    #[arg(short = 's', overrides_with = "client")]
    server: bool,
    /// client side
    #[arg(short = 'c', overrides_with = "server")]
    client: bool,
    /// address: to listen on (server; default every IPv4 address) or to connect to (client)
    #[arg(short = 'a', value_name = "addr", value_parser = resolve, required_if_eq("client", "true"))]
    pub addr: Option<IpAddr>,
    /// Source address to bind to for client.
    #[arg(short = 'I', value_name = "addr", value_parser = resolve)]
    pub source: Option<IpAddr>,
    /// port
    #[arg(short = 'p', value_name = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// ping count times (0: until stopped; the server serves until the client disconnects)
    #[arg(short = 'C', value_name = "count", default_value_t = 0)]
    pub count: u64,
    /// ping data size, in bytes
    #[arg(short = 'S', value_name = "size", default_value_t = DEFAULT_SIZE, value_parser = ping_size)]
    pub size: usize,
    /// display ping data to stdout
    #[arg(short = 'v')]
    pub verbose: bool,
    /// validate ping data (client)
    #[arg(short = 'V')]
    pub validate: bool,
    /// debug printfs
    #[arg(short = 'd')]
    pub debug: bool,
    /// bound on each wait (a completion, the peer's next message, address and route
    /// resolution, the connection), and on the client's retries of a refused connection
    #[arg(long, value_name = "secs", default_value = "30", value_parser = seconds)]
    pub timeout: Duration,
    /// how long the server waits for a client
    #[arg(long = "accept-timeout", value_name = "secs", default_value = "300", value_parser = seconds)]
    pub accept_timeout: Duration,
}

impl Options {
    /// `-s` or `-c` (the last one given).
    pub fn role(&self) -> Role {
        if self.client {
            Role::Client
        } else {
            Role::Server
        }
    }
}

/// `addr` (an IP address or a host name) resolved to an IP address.
fn resolve(addr: &str) -> Result<IpAddr, String> {
    if let Ok(ip) = addr.parse() {
        return Ok(ip);
    }
    (addr, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a: SocketAddr| a.ip())
        .ok_or_else(|| "invalid hostname or IP address".into())
}

/// The C tool's sizes: from [`MIN_SIZE`] to [`MAX_SIZE`].
fn ping_size(s: &str) -> Result<usize, String> {
    let size: usize = s.trim().parse().map_err(|_| format!("{s:?} is not a valid number"))?;
    if !(MIN_SIZE..=MAX_SIZE).contains(&size) {
        return Err(format!("Invalid size {size} (valid range is {MIN_SIZE} to {MAX_SIZE})"));
    }
    Ok(size)
}

fn seconds(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1 second".into()),
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => Err(format!("{s:?} is not a valid number")),
    }
}

/// Parses the arguments (without the program name).
///
/// # Errors
/// clap's error naming the bad option or value (`-h` is an error of kind `DisplayHelp`).
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Options, clap::Error> {
    use clap::Parser;
    Options::try_parse_from(std::iter::once(String::from("rping")).chain(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Options, clap::Error> {
        parse_args(s.split_whitespace().map(String::from))
    }

    fn run(s: &str) -> Options {
        args(s).unwrap_or_else(|e| panic!("{s}: {e}"))
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
        assert_eq!(o.role(), Role::Client);
        assert_eq!(o.addr, Some("192.0.2.1".parse().unwrap()));
        assert_eq!((o.count, o.size, o.port), (5, DEFAULT_SIZE, DEFAULT_PORT));
        assert!(o.verbose && o.validate && !o.debug);
        let o = run("-s -vVd -S100 -C 3 -p 7000 --timeout=9 --accept-timeout 11");
        assert_eq!(o.role(), Role::Server);
        assert_eq!((o.addr, o.size, o.count, o.port), (None, 100, 3, 7000));
        assert!(o.verbose && o.validate && o.debug);
        assert_eq!((o.timeout, o.accept_timeout), (Duration::from_secs(9), Duration::from_secs(11)));
        assert_eq!(args("-h").unwrap_err().kind(), clap::error::ErrorKind::DisplayHelp);
        // The last of -s and -c counts, as in the C tool; so does the last of a repeated option.
        assert_eq!(run("-s -c -a 192.0.2.1 -C 1 -C 2").role(), Role::Client);
        assert_eq!(run("-c -s -C 1 -C 2").count, 2);
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
            assert!(args(bad).is_err_and(|e| e.use_stderr()), "{bad:?} was accepted");
        }
    }
}
