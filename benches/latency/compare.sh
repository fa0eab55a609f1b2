#!/usr/bin/env bash
# compare.sh: the latency control of BENCHMARKS.md ("What is compared", "How to run").
#
# Four programs, same parameters (2 bytes, 1000 round trips, every request signaled, no inline,
# busy-polling unless said), ROUNDS rounds whose order rotates, for RDMA WRITE and SEND:
#   pt     perftest's ib_write_lat / ib_send_lat (two processes over 127.0.0.1)
#   c      benches/latency/threads.c: perftest's loops in plain libibverbs, arranged as `perf`
#          is (one process, a thread per side, a context each)
#   spin   `perf --spin` (this library, busy-polling waits)
#   yield  `perf` (this library, the default waits, which yield when the CQ is empty)
#   proc   `perf --spin` as perftest runs, one side per process (--listen/--connect)
# Prints every round's t_typical/t_min (usec) and the medians of each, with each program's ratio
# to perftest two ways (ratio of medians; median of the per-round ratios), each with a 95 %
# bootstrap interval. t_min is the fastest round trip of a run: the path's own cost, with the
# least of the emulator's mix of fast and slow iterations (BENCHMARKS.md, "Caveats of emulation").
# Every program also lists its iterations (-H; kept in target/latency-compare/<stamp>/runs/),
# from which the summary adds each one's 10th percentile paired with perftest's and its share of
# iterations below perftest's 25th percentile (the fast mode). Printed, never asserted.
#
# Usage: benches/latency/compare.sh [ROUNDS]   (default 8; on the host: builds, then boots the
# Soft-RoCE VM once with scripts/softroce-run; about 1 minute of VM per round). The summary is
# also kept in target/latency-compare/<stamp>/summary.txt.
#        benches/latency/compare.sh --summarize target/latency-compare/<stamp>...   (prints
# earlier runs' summary again, from their rounds.txt and runs/, pooled when several; no VM)
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)"

if [[ "${1:-}" == "--guest" ]]; then
    bin="$2" rounds="$3" runs="$(dirname "$2")/runs"
    mkdir -p "$runs"
    dev="${TYPED_VERBS_DEVICE:-rxe0}" gid="${TYPED_VERBS_GID_INDEX:-1}" port=19900
    typical() { awk '$1 == 2 && $2 == 1000 { print $5 "/" $3; exit }'; }
    pt() { # tool
        port=$((port + 1))
        timeout -k 5 90 "$1" -d "$dev" -x "$gid" -F -p "$port" -s 2 -n 1000 -I 0 --use_old_post_send >/dev/null 2>&1 &
        local sp=$! i
        for ((i = 0; i < 200; i++)); do ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.05; done
        timeout -k 5 90 "$1" -d "$dev" -x "$gid" -F -p "$port" -s 2 -n 1000 -I 0 --use_old_post_send -H 127.0.0.1 2>&1
        wait "$sp" || true
    }
    c() { timeout -k 5 90 "$bin/threads" -H "$1" 1000 "$dev" "$gid"; }
    ours() { timeout -k 5 90 "$bin/perf" "$1_lat" -d "$dev" -x "$gid" -n 1000 --quiet -H "${@:2}"; }
    proc() { # test: the server in the background, the client measures
        port=$((port + 1))
        timeout -k 5 90 "$bin/perf" "$1_lat" -d "$dev" -x "$gid" -n 1000 --quiet --spin --listen -p "$port" >/dev/null 2>&1 &
        local sp=$!
        ours "$1" --spin --connect 127.0.0.1 -p "$port"
        wait "$sp" || true
    }
    one() { # variant test: the measuring side's output (with its -H list)
        case $1 in
            pt) pt "ib_$2_lat" ;;
            c) c "$2" ;;
            spin) ours "$2" --spin ;;
            yield) ours "$2" ;;
            proc) proc "$2" ;;
        esac
    }
    clocksource() { cat /sys/devices/system/clocksource/clocksource0/current_clocksource; }
    echo "clocksource: $(clocksource)"
    for ((r = 1; r <= rounds; r++)); do
        for t in write send; do
            variants=(pt c spin yield proc)
            n=${#variants[@]}
            line="round $r $t:"
            for ((i = 0; i < n; i++)); do
                v=${variants[$(((i + r - 1) % n))]}
                one "$v" "$t" >"$runs/$v.$t.$r.txt" || true
                line+=" $v $(typical <"$runs/$v.$t.$r.txt")"
            done
            echo "$line"
        done
    done
    echo "clocksource after the rounds: $(clocksource)"
    exit 0
fi

# The summary of the rounds in DIR... (their rounds.txt and runs/, pooled).
summarize() {
    echo "medians over the rounds (usec), ratios against perftest with 95 % bootstrap intervals:"
    python3 - "$@" <<'PY'
import glob, os, random, re, statistics, sys
# Two views of the same rounds, with 95 % bootstrap intervals (4,000 resamples, fixed seed):
#   ratio of medians: the median of a program's rounds over perftest's;
#   paired: the median over rounds of (program / perftest in the same round), which cancels
#   the host's slow spells that hit a whole round but weighs the emulator's per-run
#   fast/slow mode mix more.
random.seed(7)
rows = {}
dirs = sys.argv[1:]
for line in (l for d in dirs for l in open(os.path.join(d, "rounds.txt"))):
    m = re.match(r"round \d+ (\w+):(.*)", line)
    if m:
        rows.setdefault(m[1], []).append({v: (float(a), float(b)) for v, a, b in re.findall(r"(\w+) ([\d.]+)/([\d.]+)", m[2])})
med = statistics.median
def interval(draw):
    xs = sorted(draw() for _ in range(4000))
    return f"[{xs[100]:.2f}, {xs[3899]:.2f}]"
for test, rs in rows.items():
    for k, stat in ((0, "t_typical"), (1, "t_min")):
        by = {}
        for r in rs:
            for v, x in r.items():
                by.setdefault(v, []).append(x[k])
        pt = by.get("pt", [])
        cells = []
        for v in ("pt", "c", "spin", "yield", "proc"):
            xs = by.get(v)
            if not xs:
                continue
            cell = f"{v} {med(xs):.2f} (n={len(xs)}"
            if pt and v != "pt":
                cell += f", /pt {med(xs) / med(pt):.2f} " + interval(lambda: med(random.choices(xs, k=len(xs))) / med(random.choices(pt, k=len(pt))))
                pair = [r[v][k] / r["pt"][k] for r in rs if v in r and "pt" in r]
                cell += f", paired {med(pair):.2f} " + interval(lambda: med(random.choices(pair, k=len(pair))))
            if by.get("c") and v in ("spin", "yield", "proc"):
                cell += f", /c {med(xs) / med(by['c']):.2f}"
            cells.append(cell + ")")
        print(f"  {test} {stat}: " + "; ".join(cells))
# The per-iteration latencies (every program's -H list): t_typical is the median of one run's
# iterations, which under emulation fall in a fast and a slower mode whose mix moves from run to
# run (BENCHMARKS.md, "Caveats of emulation"). Two views that separate the path's cost from that mix:
#   p10: a run's 10th percentile (the fast mode's cost, steadier than t_min, one iteration),
#        paired with perftest's in the same round;
#   fast share: the share of a program's iterations below perftest's 25th percentile (pooled
#        over every round; 0.25 for perftest itself).
lists = {}
for k, path in ((k, p) for k, d in enumerate(dirs) for p in glob.glob(os.path.join(d, "runs", "*.txt"))):
    v, test, r = os.path.basename(path)[:-4].split(".")
    text = open(path).read()
    if "#, usec" in text:
        xs = [float(x) for x in re.findall(r"^\d+, ([\d.]+)$", text.split("#, usec", 1)[1], re.M)]
        if xs:
            lists.setdefault(test, {}).setdefault(v, {})[(k, int(r))] = sorted(xs)
if lists:
    print("per-iteration latencies (-H lists, usec): p10 paired with perftest's, pooled p10 / p25 / median, fast share:")
def q(xs, f):
    return xs[int(f * (len(xs) - 1))]
for test, by in lists.items():
    pt = by.get("pt", {})
    pooled_pt = sorted(x for xs in pt.values() for x in xs)
    cells = []
    for v in ("pt", "c", "spin", "yield", "proc"):
        runs = by.get(v)
        if not runs:
            continue
        pooled = sorted(x for xs in runs.values() for x in xs)
        cell = f"{v} p10/p25/p50 {q(pooled, .1):.2f}/{q(pooled, .25):.2f}/{q(pooled, .5):.2f}"
        if pooled_pt and v != "pt":
            pair = [q(runs[r], .1) / q(pt[r], .1) for r in runs if r in pt]
            if pair:
                cell += f", p10 paired {med(pair):.2f} " + interval(lambda: med(random.choices(pair, k=len(pair))))
            cut = q(pooled_pt, .25)
            cell += f", fast share {sum(1 for x in pooled if x < cut) / len(pooled):.2f}"
        cells.append(cell + f" (runs {len(runs)})")
    print(f"  {test}: " + "; ".join(cells))
PY
}

if [[ "${1:-}" == "--summarize" ]]; then
    shift
    (($#)) || { echo "compare.sh: --summarize needs a run's folder" >&2; exit 2; }
    for d in "$@"; do
        [[ -f "$d/rounds.txt" ]] || { echo "compare.sh: no rounds.txt in $d" >&2; exit 2; }
    done
    summarize "$@"
    exit 0
fi

rounds="${1:-8}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: bad ROUNDS $rounds" >&2; exit 2; }
cd "$ROOT"
out="$ROOT/target/latency-compare/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/bin"
cargo build --release --example perf
cp target/release/examples/perf "$out/bin/"
cc -O2 -Wall -Wextra -pthread -o "$out/bin/threads" benches/latency/threads.c -libverbs
scripts/softroce-run --timeout $((120 + 90 * rounds)) --rwdir "$out" -- \
    "$ROOT/benches/latency/compare.sh" --guest "$out/bin" "$rounds" | tee "$out/rounds.txt"
summarize "$out" | tee "$out/summary.txt"
echo "results in $out"
