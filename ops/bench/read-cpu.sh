#!/bin/bash
# CPU per 30-day history page, findmy serve's (all threads) and PostgreSQL's (all backends), from
# /proc over REQUESTS GETs with curl: less blurred by a loaded machine than latency.
#
#   ops/bench/read-cpu.sh BINARY DATA_DIR [REQUESTS] [PORT]
#
# DATA_DIR is a server directory seeded by ops/bench/read-instructions.sh (SCRATCH_DIR/server: user
# "bench" with password bench-password-1, device 1 with 30 days of fixes). Run two binaries on the
# same directory one after the other (the same projection version) to compare them.
set -euo pipefail
bin=$(readlink -f "$1"); data=$2; requests=${3:-100}; port=${4:-18395}
cookies=$(mktemp); log=$(mktemp)
trap 'rm -f "$cookies" "$log"' EXIT
"$bin" serve --data-dir "$data" --listen 127.0.0.1:$port >"$log" 2>&1 &
server=$!
for _ in $(seq 1 600); do
  health=$(curl -s http://127.0.0.1:$port/healthz || true)
  python3 -c 'import json,sys; h=json.loads(sys.argv[1]); sys.exit(0 if h["projector"]["checkpoint"] >= h["durable_end"] > 0 else 1)' "$health" 2>/dev/null && break
  sleep 0.5
done
curl -s -c "$cookies" -H 'Content-Type: application/json' \
  -d '{"name":"bench","password":"bench-password-1"}' http://127.0.0.1:$port/login >/dev/null
path="/api/find-my/devices/1/locations?limit=10000"
for _ in 1 2 3 4 5; do curl -s -b "$cookies" "http://127.0.0.1:$port$path" -o /dev/null; done
postmaster=$(head -1 "$data/postgres/data/postmaster.pid")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
backends() { local sum=0; for pid in $(pgrep -P "$postmaster"); do sum=$((sum + $(ticks "$pid"))); done; echo $sum; }
findmy0=$(ticks $server); postgres0=$(backends); start=$(date +%s%N)
for _ in $(seq 1 "$requests"); do curl -s -b "$cookies" "http://127.0.0.1:$port$path" -o /dev/null; done
findmy1=$(ticks $server); postgres1=$(backends); end=$(date +%s%N)
kill -TERM $server; wait $server || true
# Ticks are 10 ms.
echo "$bin: findmy $(( (findmy1 - findmy0) * 10000 / requests )) us, PostgreSQL $(( (postgres1 - postgres0) * 10000 / requests )) us of CPU per page; $(( (end - start) / 1000 / requests )) us per GET; load $(cut -d' ' -f1-3 /proc/loadavg)"
