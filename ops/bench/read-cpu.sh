#!/bin/bash
# CPU per 30-day history page, findmy serve's (all threads; its system part too) and PostgreSQL's (all backends), from
# /proc over REQUESTS GETs with curl: less blurred by a loaded machine than latency (also printed:
# curl's time_total, p50 and p99).
#
#   ops/bench/read-cpu.sh BINARY DATA_DIR [REQUESTS] [PORT]
#
# DATA_DIR is a server directory seeded by ops/bench/read-instructions.sh (SCRATCH_DIR/server: user
# "bench" with password bench-password-1, device 1 with 30 days of fixes). Run two binaries on the
# same directory one after the other (the same projection version) to compare them.
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/serve-ready.sh"
bin=$(readlink -f "$1"); data=$2; requests=${3:-100}; port=${4:-18395}
cookies=$(mktemp); log=$(mktemp); times=$(mktemp)
trap 'rm -f "$cookies" "$log" "$times"' EXIT
"$bin" serve --data-dir "$data" --listen 127.0.0.1:$port >"$log" 2>&1 &
server=$!
wait_projected $port $server "$log"
login_bench $port "$cookies"
path="/api/find-my/devices/1/locations?limit=10000"
for _ in 1 2 3 4 5; do curl -s -b "$cookies" "http://127.0.0.1:$port$path" -o /dev/null; done
postmaster=$(head -1 "$data/postgres/data/postmaster.pid")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# findmy's system time alone (stime): the kernel's part, page faults and socket copies.
systicks() { awk '{print $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
backends() { local sum=0; for pid in $(pgrep -P "$postmaster"); do sum=$((sum + $(ticks "$pid"))); done; echo $sum; }
findmy0=$(ticks $server); findmysys0=$(systicks $server); postgres0=$(backends); start=$(date +%s%N)
for _ in $(seq 1 "$requests"); do curl -s -b "$cookies" "http://127.0.0.1:$port$path" -o /dev/null -w '%{time_total}\n' >>"$times"; done
findmy1=$(ticks $server); findmysys1=$(systicks $server); postgres1=$(backends); end=$(date +%s%N)
kill -TERM $server; wait $server || true
# Ticks are 10 ms.
percentiles=$(sort -n "$times" | awk '{t[NR] = $1 * 1000} END {i = int(NR * 0.99) + 1; if (i > NR) i = NR; printf "p50 %.1f ms, p99 %.1f ms", t[int(NR * 0.5) + 1], t[i]}')
echo "$bin: findmy $(( (findmy1 - findmy0) * 10000 / requests )) us (system $(( (findmysys1 - findmysys0) * 10000 / requests )) us), PostgreSQL $(( (postgres1 - postgres0) * 10000 / requests )) us of CPU per page; $(( (end - start) / 1000 / requests )) us per GET (curl's time_total $percentiles); load $(cut -d' ' -f1-3 /proc/loadavg)"
