#!/bin/bash
# CPU per panel page with a device's 30-day track: findmy serve's (all threads) and PostgreSQL's
# (all backends), from /proc over REQUESTS GETs of /find-my?selected=1&from=...&to=... with curl,
# and curl's time_total p50. The panel's counterpart of read-cpu.sh.
#
#   ops/bench/panel-cpu.sh BINARY DATA_DIR [REQUESTS] [PORT]
#
# DATA_DIR is a server directory seeded by `findmy-bench read` (user "bench", password set to
# bench-password-1 as read-cpu.sh says; device 1 with 30 days of fixes). Run two binaries on the
# same directory one after the other (the same projection version) to compare them.
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/serve-ready.sh"
bin=$(readlink -f "$1"); data=$2; requests=${3:-100}; port=${4:-18389}
cookies=$(mktemp); log=$(mktemp); times=$(mktemp)
"$bin" serve --data-dir "$data" --listen 127.0.0.1:$port >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server || true; rm -f "$cookies" "$log" "$times"' EXIT
wait_projected $port $server "$log"
login_bench $port "$cookies"
from=$(date -u -d '31 days ago' +%Y-%m-%dT%H:%M:%SZ); to=$(date -u -d '1 hour' +%Y-%m-%dT%H:%M:%SZ)
path="/find-my?selected=1&from=$from&to=$to"
for _ in 1 2 3; do curl -s -b "$cookies" "http://127.0.0.1:$port$path" -o /dev/null; done
postmaster=$(head -1 "$data/postgres/data/postmaster.pid")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
backends() { local sum=0; for pid in $(pgrep -P "$postmaster"); do sum=$((sum + $(ticks "$pid"))); done; echo $sum; }
findmy0=$(ticks $server); postgres0=$(backends)
for _ in $(seq 1 "$requests"); do curl -s -b "$cookies" "http://127.0.0.1:$port$path" -o /dev/null -w '%{time_total}\n' >>"$times"; done
findmy1=$(ticks $server); postgres1=$(backends)
# Ticks are 10 ms.
p50=$(sort -n "$times" | awk '{t[NR] = $1 * 1000} END {printf "%.1f", t[int(NR * 0.5) + 1]}')
echo "$bin: findmy $(( (findmy1 - findmy0) * 10000 / requests )) us, PostgreSQL $(( (postgres1 - postgres0) * 10000 / requests )) us of CPU per panel page; curl's time_total p50 $p50 ms; load $(cut -d' ' -f1-3 /proc/loadavg)"
