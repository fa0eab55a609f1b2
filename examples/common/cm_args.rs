//! The command line of the `rdma_server` / `rdma_client` examples, as the C tools take it:
//! `-s ADDRESS`, `-p PORT`, and `-t SECONDS` (ours: the bound of every wait).

use std::net::IpAddr;
use std::time::Duration;

/// librdmacm's rdma_server / rdma_client examples, written with typed-verbs.
#[derive(clap::Parser)]
#[command(args_override_self = true)]
pub struct Options {
    /// the address to listen on (server; default every address) or to connect to (client;
    /// default 127.0.0.1)
    #[arg(short = 's', value_name = "server_address")]
    pub addr: Option<IpAddr>,
    /// the port
    #[arg(short = 'p', value_name = "port_number", default_value_t = 7471)]
    pub port: u16,
    /// the bound of every wait, in seconds
    #[arg(short = 't', value_name = "timeout_secs", default_value = "60",
          value_parser = |s: &str| s.parse().map(Duration::from_secs))]
    pub timeout: Duration,
}
