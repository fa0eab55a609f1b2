//! `regmr`: the typed half of the registration benchmark (`scripts/bench`, test `regmr`), the
//! equivalent of `benches/regmr/raw.c` written with this library.
//!
//! For each size (4 KiB, 2 MiB, 1 GiB), the program's own buffer (an anonymous `memmap2`
//! mapping, page-aligned, every byte written, as the C program's mmap + memset) is registered with
//! [`Pd::register`] and handed back by [`Registered::deregister`](typed_verbs::caller::Registered::deregister),
//! ITERS rounds timed after one that is not, with the access set of the C program
//! (LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ). Prints one line per size, as the C program:
//!
//! `regmr rust size=BYTES iters=N median_ns=M min_ns=M`
//!
//! Page-aligned, as the C program explains: Soft-RoCE of Linux 6.12 cannot register 1 GiB that
//! does not start on a page.
//!
//! Build: `cargo build --release --example regmr --features memmap2`.
//! Usage: `regmr [DEVICE] [ITER_SCALE]` (defaults: `$TYPED_VERBS_DEVICE` or `rxe0`, 1; the
//! rounds per size are 2000, 200, 3, each multiplied by ITER_SCALE, at least 1).

use std::time::Instant;

use typed_verbs::prelude::*;

const SIZES: [usize; 3] = [4096, 2 << 20, 1 << 30];
const ITERS: [usize; 3] = [2000, 200, 3];

/// The typed half of the registration benchmark: `Pd::register` and
/// `Registered::deregister` of 4 KiB, 2 MiB and 1 GiB, timed.
#[derive(clap::Parser)]
struct Args {
    /// The device.
    #[arg(env = "TYPED_VERBS_DEVICE", default_value = "rxe0")]
    device: String,
    /// Multiplies the rounds per size (2000, 200, 3; at least 1).
    #[arg(default_value_t = 1.0)]
    iter_scale: f64,
}

fn main() {
    let Args { device: dev, iter_scale: scale } = clap::Parser::parse();
    if let Err(e) = run(&dev, scale) {
        eprintln!("regmr: {e}");
        std::process::exit(1);
    }
}

fn run(dev: &str, scale: f64) -> typed_verbs::Result<()> {
    let ctx = Context::open(dev)?;
    let pd = ctx.alloc_pd()?;
    for (size, iters) in SIZES.into_iter().zip(ITERS) {
        let n = ((iters as f64 * scale) as usize).max(1);
        let mut times = Vec::with_capacity(n);
        let mut buf = memmap2::MmapMut::map_anon(size).map_err(|e| Error::Verb {
            verb: Verb::RegMr,
            context: format!("mmap of {size} bytes"),
            source: e,
        })?;
        buf.fill(1);
        for round in 0..=n {
            let start = Instant::now();
            let region = pd.register(buf, access::REMOTE_RW)?;
            buf = region.deregister().map_err(|(e, _)| e)?;
            if round > 0 {
                times.push(start.elapsed().as_nanos());
            }
        }
        times.sort_unstable();
        println!("regmr rust size={size} iters={n} median_ns={} min_ns={}", times[n / 2], times[0]);
    }
    Ok(())
}
