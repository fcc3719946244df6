#!/bin/bash
# Server CPU per acknowledged report, next to what `findmy-bench ingest` prints.
#
# usage: ops/bench/ingest-cpu.sh FINDMY_BENCH_BINARY CONNECTIONS FIXES [SECONDS]
#
# Runs `findmy-bench ingest` (which starts the findmy beside it, or $FINDMY_BIN) for one shape (CONNECTIONS connections, FIXES fixes per report) and
# samples the `findmy serve` child's user+system CPU time (/proc/PID/stat) until it exits; prints
# one line: fixes/s, p50 and p99 ms, the http/log ratio, and server CPU microseconds per request.
# On a machine shared with other work throughput moves with the load; CPU per request moves much
# less, so it is the figure to compare builds by (alternate them: old, new, old, new, ...).
# CPU per request includes the server's start and the enrolment of one device per connection.
set -euo pipefail
binary=$1 connections=$2 fixes=$3 seconds=${4:-5}
root=$(dirname "$0")/../..
dir=$(mktemp -d /tmp/findmy-ingest-cpu.XXXXXX)
out=$dir/bench.json
# The apps' phases (Overland, OwnTracks) would count in the CPU: only the native shape, where the
# binary knows --phases (older builds have no app phase but Overland's, which they always run).
phases=()
if "$binary" ingest --help 2>/dev/null | grep -q -- "--phases"; then phases=(--phases native); fi
"$binary" ingest --dir "$dir/bench" --seconds "$seconds" --wrk-script "$root/ops/bench/report.lua" \
    --connections "$connections" --fixes "$fixes" "${phases[@]}" >"$out" 2>/dev/null &
bench=$!
pid=""
while [ -z "$pid" ]; do
    sleep 0.05
    pid=$(pgrep -f "serve --data-dir $dir/bench/" | head -1 || true)
done
ticks=0
while kill -0 "$pid" 2>/dev/null; do
    if now=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) && [ -n "$now" ]; then ticks=$now; fi
    sleep 0.1
done
wait "$bench"
tail -1 "$out" | python3 -c "
import json, sys
run = json.load(sys.stdin)['runs'][0]
requests = run['requests_per_s'] * $seconds + $connections
print('fixes/batch $fixes, connections $connections: %d fixes/s, p50 %.2f ms, p99 %.2f ms, http/log %.3f, '
      'server CPU %.1f us/request' % (run['acknowledged_fixes_per_s'], run['p50_ms'], run['p99_ms'],
      run['http_over_log_ratio'], $ticks / $(getconf CLK_TCK) * 1e6 / requests))
"
rm -rf "$dir"
