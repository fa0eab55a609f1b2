//! Statistics and output of `perf`: perftest's tables and formulas, and the figures of the JSON
//! line (serialized with serde under the keys `scripts/bench` reads).
//!
//! The formulas are perftest 4.5's (`print_report_bw`, `print_report_lat` in
//! `src/perftest_parameters.c`), so that the numbers of the two tools mean the same thing:
//! - bandwidth in MB/sec with MB = 2^20 bytes; message rate in millions per second;
//! - BW average = size x completed / (last completion - first post);
//! - BW peak = size / the smallest (completion j - post i) / (j - i + 1) over all i <= j;
//! - latency = half the round trip (write and send ping-pong), from the intervals between
//!   consecutive posts of the measuring side; the two largest intervals are dropped
//!   (LAT_MEASURE_TAIL), then min, max (perftest prints the element after the kept ones),
//!   median (t_typical), average, standard deviation, 99% and 99.9% (perftest's indices).
//!
//! One difference, on purpose: perftest accumulates the variance through an `int` (truncating
//! each deviation to whole microseconds); this computes it in floating point.

use std::fmt::Write as _;
use std::time::Duration;

/// Per-message timestamps of a bandwidth run, in nanoseconds from the start.
pub struct BwRun {
    /// Message size in bytes.
    pub size: usize,
    /// Messages completed (all QPs).
    pub completed: u64,
    /// From the first post to the last completion.
    pub elapsed: Duration,
    /// Post time of every message, in posting order (empty in duration mode).
    pub tposted: Vec<u64>,
    /// (index of the completed message in completion order, time) of every signaled completion.
    pub comps: Vec<(u64, u64)>,
}

/// The bandwidth figures.
#[derive(serde::Serialize)]
pub struct BwResult {
    #[serde(rename = "bw_peak_mb_s")]
    pub peak_mb_s: f64,
    #[serde(rename = "bw_avg_mb_s")]
    pub avg_mb_s: f64,
    pub msg_rate_mpps: f64,
    /// Whether the peak was computed on a subsample of start points (long runs).
    pub peak_sampled: bool,
}

const MB: f64 = 1048576.0;

pub fn bw(run: &BwRun) -> BwResult {
    let secs = run.elapsed.as_secs_f64().max(1e-12);
    let avg = run.size as f64 * run.completed as f64 / secs / MB;
    let rate = run.completed as f64 / secs / 1e6;
    let (peak, sampled) = match peak_per_msg(&run.tposted, &run.comps) {
        Some((best_ns, sampled)) => (run.size as f64 / (best_ns / 1e9) / MB, sampled),
        None => (avg, false),
    };
    BwResult { peak_mb_s: peak, avg_mb_s: avg, msg_rate_mpps: rate, peak_sampled: sampled }
}

/// The smallest time per message over every window [post i, completion j], in ns. perftest
/// looks at every i (quadratic: ~2e8 windows for 20000 messages all signaled, which takes
/// seconds under emulation); above 2e7 windows this looks at every k-th i (flagged).
fn peak_per_msg(tposted: &[u64], comps: &[(u64, u64)]) -> Option<(f64, bool)> {
    if tposted.is_empty() || comps.is_empty() {
        return None;
    }
    let n = tposted.len();
    let work = n as u128 * comps.len() as u128 / 2;
    let stride = (work / 20_000_000).max(1) as usize;
    let mut best = f64::MAX;
    for i in (0..n).step_by(stride) {
        let first = comps.partition_point(|&(j, _)| (j as usize) < i);
        for &(j, t) in &comps[first..] {
            let msgs = (j as usize - i + 1) as f64;
            let d = t.saturating_sub(tposted[i]) as f64 / msgs;
            if d < best && d > 0.0 {
                best = d;
            }
        }
    }
    (best < f64::MAX).then_some((best, stride > 1))
}

/// The latency figures, in microseconds.
#[derive(serde::Serialize)]
pub struct LatResult {
    #[serde(rename = "t_min_us")]
    pub t_min: f64,
    #[serde(rename = "t_max_us")]
    pub t_max: f64,
    #[serde(rename = "t_typical_us")]
    pub t_typical: f64,
    #[serde(rename = "t_avg_us")]
    pub t_avg: f64,
    #[serde(rename = "t_stdev_us")]
    pub t_stdev: f64,
    #[serde(rename = "t_p99_us")]
    pub p99: f64,
    #[serde(rename = "t_p999_us")]
    pub p999: f64,
    /// Intervals measured (iterations - 1).
    pub samples: usize,
}

/// The largest intervals a latency run leaves out (perftest's LAT_MEASURE_TAIL).
const TAIL: usize = 2;

/// The intervals between consecutive post times, sorted.
fn sorted_intervals(tposted: &[u64]) -> Vec<u64> {
    let mut delta: Vec<u64> = tposted.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    delta.sort_unstable();
    delta
}

/// Latency statistics from the post times of the measuring side (ns), as perftest computes
/// them; `rtt_factor` is 2 for ping-pong tests (half the round trip is reported).
pub fn lat(tposted: &[u64], rtt_factor: f64) -> Option<LatResult> {
    if tposted.len() < TAIL + 3 {
        return None;
    }
    let delta = sorted_intervals(tposted);
    let samples = delta.len();
    let m = samples - TAIL;
    let us = |ns: u64| ns as f64 / 1000.0 / rtt_factor;
    // perftest's get_median on the kept part.
    let median = if (m - 1) % 2 == 1 { (delta[m / 2] + delta[m / 2 - 1]) / 2 } else { delta[m / 2] };
    let avg = delta[..m].iter().map(|&d| us(d)).sum::<f64>() / m as f64;
    let var = delta[..m].iter().map(|&d| (avg - us(d)).powi(2)).sum::<f64>() / m as f64;
    let i99 = ((m as f64) * 0.99).ceil() as usize;
    let i999 = ((m as f64) * 0.999).ceil() as usize;
    Some(LatResult {
        t_min: us(delta[0]),
        t_max: us(delta[m]),
        t_typical: us(median),
        t_avg: avg,
        t_stdev: var.sqrt(),
        p99: us(delta[i99.min(samples - 1)]),
        p999: us(delta[i999.min(samples - 1)]),
        samples,
    })
}

/// perftest's `-H` (`--report-histogram`) list: every interval the statistics keep (the 2
/// largest left out), in usec, sorted, numbered from 1 (`#, usec` then `i, t`).
pub fn lat_all(tposted: &[u64], rtt_factor: f64) -> String {
    let delta = sorted_intervals(tposted);
    let kept = delta.len().saturating_sub(TAIL);
    let mut s = String::from("#, usec\n");
    for (i, &d) in delta[..kept].iter().enumerate() {
        let _ = writeln!(s, "{}, {:.3}", i + 1, d as f64 / 1000.0 / rtt_factor);
    }
    s
}

pub const LINE: &str = "---------------------------------------------------------------------------------------";

pub fn bw_table(size: usize, iterations: u64, r: &BwResult) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{LINE}");
    let _ = writeln!(s, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
    let _ = writeln!(
        s,
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        size, iterations, r.peak_mb_s, r.avg_mb_s, r.msg_rate_mpps
    );
    let _ = write!(s, "{LINE}");
    s
}

pub fn lat_table(size: usize, iterations: u64, r: &LatResult) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{LINE}");
    let _ = writeln!(
        s,
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   \
         99% percentile[usec]   99.9% percentile[usec] "
    );
    let _ = writeln!(
        s,
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        size, iterations, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p999
    );
    let _ = write!(s, "{LINE}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_follows_perftest() {
        // Posts every 10 us, then two outliers that the tail drops.
        let mut t: Vec<u64> = (0..102).map(|i| i * 10_000).collect();
        t.push(t[101] + 500_000);
        t.push(t[102] + 900_000);
        let r = lat(&t, 2.0).unwrap();
        assert_eq!(r.samples, 103);
        assert!((r.t_typical - 5.0).abs() < 1e-9);
        assert!((r.t_min - 5.0).abs() < 1e-9);
        assert!(r.t_stdev.abs() < 1e-9);
    }

    /// Post times whose intervals are `us_k` usec of half round trip (rtt_factor 2), posted in
    /// a scrambled order so the sort matters.
    fn posts_with_intervals(us: &[u64]) -> Vec<u64> {
        let n = us.len();
        let mut t = vec![0u64];
        for i in 0..n {
            let k = (i * 5 + 3) % n; // 5 is prime to the lengths used (7, 1002): a permutation
            t.push(t[i] + us[k] * 2000);
        }
        t
    }

    /// Distinct, skewed intervals (k^2 usec for k = 1..=1002), so that the median, the average,
    /// the two percentiles and the maximum are all different numbers and a formula that picks
    /// the wrong index or the wrong statistic is noticed. Expected values by hand from
    /// perftest 4.5's print_report_lat: 1002 intervals, the 2 largest dropped, m = 1000 kept;
    /// median (m even) = (delta[499] + delta[500]) / 2 = (500^2 + 501^2) / 2; average = the
    /// mean of k^2 for k <= 1000 = 1001 * 2001 / 6; 99 % = delta[ceil(0.99 m)] = delta[990] =
    /// 991^2; 99.9 % = delta[999] = 1000^2; t_max = delta[m] = 1001^2 (the first dropped one).
    #[test]
    fn latency_statistics_pick_perftests_indices() {
        let us: Vec<u64> = (1..=1002).map(|k| k * k).collect();
        let r = lat(&posts_with_intervals(&us), 2.0).unwrap();
        assert_eq!(r.samples, 1002);
        let close = |got: f64, want: f64, what: &str| {
            assert!((got - want).abs() < 1e-6 * want.max(1.0), "{what}: {got} != {want}")
        };
        close(r.t_min, 1.0, "t_min");
        close(r.t_typical, 250_500.5, "t_typical");
        close(r.t_avg, 333_833.5, "t_avg");
        close(r.t_stdev, 298_421.727_779_748, "t_stdev");
        close(r.p99, 982_081.0, "99%");
        close(r.p999, 1_000_000.0, "99.9%");
        close(r.t_max, 1_002_001.0, "t_max");
        // An odd number kept (7 intervals, m = 5): the median is the middle one, delta[2] = 9;
        // both percentile indices ceil(4.95) and ceil(4.995) are 5, the first dropped interval.
        let r = lat(&posts_with_intervals(&[1, 4, 9, 16, 25, 36, 49]), 2.0).unwrap();
        assert_eq!((r.t_min, r.t_typical, r.t_avg, r.p99, r.p999, r.t_max), (1.0, 9.0, 11.0, 36.0, 36.0, 36.0));
        close(r.t_stdev, 8.648_699_324_175_862, "t_stdev of 5");
    }

    #[test]
    fn histogram_lists_the_kept_intervals_sorted() {
        // Intervals (ns) 30, 10, 20, 90, 50: the two largest (90, 50) are left out, as for the
        // statistics; half of each, in usec.
        let t = [0, 30_000, 40_000, 60_000, 150_000, 200_000];
        assert_eq!(lat_all(&t, 2.0), "#, usec\n1, 5.000\n2, 10.000\n3, 15.000\n");
        let r = lat(&t, 2.0).unwrap();
        assert_eq!((r.t_min, r.t_max), (5.0, 25.0));
    }

    #[test]
    fn peak_is_the_best_window() {
        // 4 messages; completion of message 3 (index 3) at 40 ns after post 0, and of message 1
        // at 10 ns after post 0: best is 10/2 = 5 ns per message.
        let tp = vec![0, 1, 2, 3];
        let comps = vec![(1, 10), (3, 40)];
        let (best, sampled) = peak_per_msg(&tp, &comps).unwrap();
        assert!(!sampled);
        assert!((best - 5.0).abs() < 1e-9, "{best}");
    }
}
