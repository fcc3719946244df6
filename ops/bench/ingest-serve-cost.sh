#!/bin/bash
# What one single-fix report costs `findmy serve`, for any build (one before findmy-bench existed
# too: it needs only `findmy user add`, `findmy serve`, curl and wrk).
#
#   ops/bench/ingest-serve-cost.sh BINARY SCRATCH_DIR [SECONDS] [callgrind|memory]
#
# Starts BINARY serve (projector off) on SCRATCH_DIR (emptied first), enrols 64 devices, warms up,
# then drives 1-fix reports with wrk and ops/bench/report.lua (64 connections, 2 threads) for
# SECONDS (default 3) and prints one JSON line: reports/s, wrk's p99, fdatasyncs per report, and
#   - by default: the server's user+system CPU microseconds per report (/proc/PID/stat around the
#     wrk run only, so start-up and enrolment are not in it);
#   - with `callgrind`: the server runs under valgrind's callgrind, its counters zeroed after the
#     warm-up and dumped after the run: instructions per report (repeatable whatever else the
#     machine runs), and the dump's path for callgrind_annotate. Throughput under valgrind is a
#     few hundred reports/s, so work done per second rather than per report (the registry
#     snapshotter's rounds) weighs more per report than at full speed;
#   - with `memory`: the CPU figure, and the server's resident memory: its largest VmRSS sampled
#     every 0.2 s during the wrk run (rss_max_kb), and at the end of the run what it is made of
#     (ops/bench/memory-parts.py: VmRSS, VmHWM, threads, kB per part).
# On a shared machine throughput and even CPU per report move with the load: alternate builds.
set -euo pipefail
bin=$(readlink -f "$1"); dir=$2; seconds=${3:-3}; mode=${4:-cpu}; connections=64
rss_max=0; memory='{}'
script=$(readlink -f "$(dirname "$0")/report.lua")
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 2; }
if [ "$mode" = callgrind ]; then
    command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
fi
rm -rf "$dir"; mkdir -p "$dir"
token=$("$bin" user add bench --json --data-dir "$dir/server" 2>/dev/null | grep '^{' | tail -1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
serve=("$bin" serve --data-dir "$dir/server" --listen 127.0.0.1:0 --projector off)
if [ "$mode" = callgrind ]; then
    serve=(valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.%p" "${serve[@]}")
fi
"${serve[@]}" >"$dir/serve.out" 2>"$dir/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 1200); do grep -q '^http://' "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
url=$(head -1 "$dir/serve.out")
: >"$dir/tokens"
for i in $(seq 1 $connections); do
    curl -s -X POST "$url/api/find-my/devices" -H "Authorization: Bearer $token" \
        -d "{\"device_uuid\": \"$(printf '00000000-0000-4000-8000-%012d' "$i")\", \"name\": \"bench $i\", \"platform\": \"linux\"}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["device_token"])' >>"$dir/tokens"
done
printf '{"latitude": 52.52, "longitude": 13.405, "accuracy_m": 10, "altitude_m": 34, "speed_mps": 1.5, "heading_deg": 90, "battery_pct": 80, "is_charging": false, "source": "significant", "recorded_at": "%s"}' \
    "$(date -u -d '-10 min' +%Y-%m-%dT%H:%M:%S.000Z)" >"$dir/fixes"
export FINDMY_BENCH_TOKENS=$dir/tokens FINDMY_BENCH_FIXES=$dir/fixes FINDMY_BENCH_THREADS=2
drive() { wrk -c $connections -t 2 -d "$1" --timeout 30s -s "$script" "$url/api/find-my/report"; }
drive 2s >/dev/null
fsyncs() { curl -s "$url/metrics" | awk '$1 == "findmy_log_fsyncs_total" {print $2}'; }
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
f0=$(fsyncs)
if [ "$mode" = callgrind ]; then callgrind_control -z $pid >/dev/null 2>&1; else c0=$(cpu); fi
if [ "$mode" = memory ]; then
    drive "${seconds}s" >"$dir/wrk.out" &
    wrk_pid=$!
    while kill -0 $wrk_pid 2>/dev/null; do
        rss=$(awk '$1 == "VmRSS:" {print $2}' "/proc/$pid/status")
        [ "$rss" -gt "$rss_max" ] && rss_max=$rss
        sleep 0.2
    done
    wait $wrk_pid
    summary=$(grep '^{' "$dir/wrk.out")
    memory=$(python3 "$(dirname "$0")/memory-parts.py" $pid)
else
    summary=$(drive "${seconds}s" | grep '^{')
fi
if [ "$mode" = callgrind ]; then callgrind_control -d $pid >/dev/null 2>&1; c1=0; c0=0; else c1=$(cpu); fi
f1=$(fsyncs)
dump=$(ls -t "$dir"/callgrind.* 2>/dev/null | head -1 || true)
instructions=0
if [ -n "$dump" ]; then
    instructions=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
fi
python3 - "$summary" "$c0" "$c1" "$f0" "$f1" "$(getconf CLK_TCK)" "$mode" "$instructions" "$dump" \
    "$rss_max" "$memory" <<'PY'
import json, sys
summary, c0, c1, f0, f1, tick, mode, instructions, dump, rss_max, memory = sys.argv[1:]
run = json.loads(summary)
reports = run["requests"] - run["non_2xx"] - run["socket_errors"]
out = {"reports": reports, "reports_per_s": round(reports / (run["duration_us"] / 1e6)),
       "p99_ms": run["p99_us"] / 1000, "failed": run["non_2xx"] + run["socket_errors"],
       "fsyncs_per_report": round((float(f1) - float(f0)) / reports, 4)}
if mode == "callgrind":
    out["instructions_per_report"] = int(instructions) // reports
    out["callgrind_dump"] = dump
else:
    out["server_cpu_us_per_report"] = round((float(c1) - float(c0)) / int(tick) * 1e6 / reports, 2)
if mode == "memory":
    out["rss_max_kb"] = int(rss_max)
    out.update(json.loads(memory))
print(json.dumps(out))
PY
