#!/usr/bin/env bash
# compare.sh: the latency control of BENCHMARKS.md ("Latency: the arrangement and the library").
#
# Four programs, same parameters (2 bytes, 1000 round trips, every request signaled, no inline,
# busy-polling unless said), ROUNDS rounds whose order rotates, for RDMA WRITE and SEND:
#   pt     perftest's ib_write_lat / ib_send_lat (two processes over 127.0.0.1)
#   c      benches/latency/threads.c: perftest's loops in plain libibverbs, arranged as `perf`
#          is (one process, a thread per side, a context each)
#   spin   `perf --spin` (this library, busy-polling waits)
#   yield  `perf` (this library, the default waits, which yield when the CQ is empty)
#   proc   SEND only: `perf --spin` as perftest runs, one side per process (--listen/--connect)
# Prints every round's t_typical/t_min (usec) and the medians of each. t_min is the fastest
# round trip of a run: the path's own cost, with the least of the emulator's mix of fast and
# slow iterations (BENCHMARKS.md, "Receive lanes"). Printed, never asserted.
#
# Usage: benches/latency/compare.sh [ROUNDS]   (default 8; on the host: builds, then boots the
# Soft-RoCE VM once with scripts/softroce-run; about 1 minute of VM per round)
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)"

if [[ "${1:-}" == "--guest" ]]; then
    bin="$2" rounds="$3"
    dev="${TYPED_VERBS_DEVICE:-rxe0}" gid="${TYPED_VERBS_GID_INDEX:-1}" port=19900
    typical() { awk '$1 == 2 && $2 == 1000 { print $5 "/" $3; exit }'; }
    pt() { # tool
        port=$((port + 1))
        timeout -k 5 90 "$1" -d "$dev" -x "$gid" -F -p "$port" -s 2 -n 1000 -I 0 --use_old_post_send >/dev/null 2>&1 &
        local sp=$! i
        for ((i = 0; i < 200; i++)); do ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.05; done
        timeout -k 5 90 "$1" -d "$dev" -x "$gid" -F -p "$port" -s 2 -n 1000 -I 0 --use_old_post_send 127.0.0.1 2>&1 | typical
        wait "$sp" || true
    }
    c() { timeout -k 5 90 "$bin/threads" "$1" 1000 "$dev" "$gid" | typical; }
    ours() { timeout -k 5 90 "$bin/perf" "$1_lat" -d "$dev" -x "$gid" -n 1000 --quiet "${@:2}" | typical; }
    proc() { # test: the server in the background, the client measures
        port=$((port + 1))
        timeout -k 5 90 "$bin/perf" "$1_lat" -d "$dev" -x "$gid" -n 1000 --quiet --spin --listen -p "$port" >/dev/null 2>&1 &
        local sp=$!
        ours "$1" --spin --connect 127.0.0.1 -p "$port"
        wait "$sp" || true
    }
    one() { # variant test
        case $1 in
            pt) pt "ib_$2_lat" ;;
            c) c "$2" ;;
            spin) ours "$2" --spin ;;
            yield) ours "$2" ;;
            proc) proc "$2" ;;
        esac
    }
    for ((r = 1; r <= rounds; r++)); do
        for t in write send; do
            variants=(pt c spin yield)
            [[ $t == send ]] && variants+=(proc)
            n=${#variants[@]}
            line="round $r $t:"
            for ((i = 0; i < n; i++)); do
                v=${variants[$(((i + r - 1) % n))]}
                line+=" $v $(one "$v" "$t")"
            done
            echo "$line"
        done
    done
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
echo "medians over the rounds (usec):"
python3 - "$out/rounds.txt" <<'PY'
import re, statistics, sys
vals = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\w+):(.*)", line)
    if not m:
        continue
    for v, typ, tmin in re.findall(r"(\w+) ([\d.]+)/([\d.]+)", m[2]):
        for stat, x in (("t_typical", typ), ("t_min", tmin)):
            vals.setdefault((m[1], stat), {}).setdefault(v, []).append(float(x))
for (test, stat), by in vals.items():
    med = {v: statistics.median(xs) for v, xs in by.items()}
    pt, c = med.get("pt"), med.get("c")
    cells = []
    for v in ("pt", "c", "spin", "yield", "proc"):
        if v in med:
            cells.append(f"{v} {med[v]:.2f} (n={len(by[v])}"
                         + (f", /pt {med[v] / pt:.2f}" if pt and v != "pt" else "")
                         + (f", /c {med[v] / c:.2f}" if c and v in ("spin", "yield", "proc") else "") + ")")
    print(f"  {test} {stat}: " + "; ".join(cells))
PY
echo "results in $out"
