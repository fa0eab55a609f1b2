//! The command line of the `rdma_server` / `rdma_client` examples, as the C tools take it:
//! `-s ADDRESS`, `-p PORT`, and `-t SECONDS` (ours: the bound of every wait).

use std::net::IpAddr;
use std::time::Duration;

/// What the command line asked for.
pub struct Options {
    /// `-s`: the address to listen on (server) or connect to (client).
    pub addr: IpAddr,
    /// `-p`: the port (the C tools' default, 7471).
    pub port: u16,
    /// `-t`: the bound of every wait.
    pub timeout: Duration,
}

/// Parses the arguments of `prog`, exiting with status 2 and the usage on a bad one.
pub fn parse(prog: &str, default_addr: IpAddr) -> Options {
    let mut o = Options { addr: default_addr, port: 7471, timeout: Duration::from_secs(60) };
    let usage = |why: &str| -> ! {
        eprintln!("{prog}: {why}\nusage: {prog}\n\t[-s server_address]\n\t[-p port_number]\n\t[-t timeout_secs]");
        std::process::exit(2)
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "-s" => o.addr = value.parse().unwrap_or_else(|_| usage(&format!("bad address {value}"))),
            "-p" => o.port = value.parse().unwrap_or_else(|_| usage(&format!("bad port {value}"))),
            "-t" => {
                let secs: u64 = value.parse().unwrap_or_else(|_| usage(&format!("bad timeout {value}")));
                o.timeout = Duration::from_secs(secs);
            }
            other => usage(&format!("unknown option {other}")),
        }
    }
    o
}
