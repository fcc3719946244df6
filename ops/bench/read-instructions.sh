#!/bin/bash
# Server instructions per read request, counted by valgrind's callgrind: repeatable to about 0.1 %
# whatever else the machine runs, unlike latency on a shared machine.
#
#   ops/bench/read-instructions.sh BINARY SCRATCH_DIR [REQUESTS]
#
# Seeds SCRATCH_DIR with `findmy-bench read` (built beside BINARY; one user "bench" with 1,000
# devices, device 1 with 30 days of fixes), gives "bench" a password, then for the devices list and the 30-day history
# page: starts `findmy serve` under callgrind with instrumentation off, logs in, warms up, turns
# instrumentation on around REQUESTS requests (curl), and prints the total divided by REQUESTS.
# PostgreSQL runs outside valgrind and is not counted. Needs valgrind and curl. SERVE_ARGS adds
# arguments to `findmy serve` (SERVE_ARGS="--device-cache-mb 0": every list written whole).
# PATHS replaces the two paths measured; KEEP=DIR keeps each path's callgrind output there
# (DIR/cg.N.PID, N the path's number) for callgrind_annotate.
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/serve-ready.sh"
bin=$(readlink -f "$1"); scratch=$2; requests=${3:-5}; port=18390
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
bench=$(dirname "$bin")/findmy-bench
[ -x "$bench" ] || { echo "needs $bench (built beside findmy by swift build)" >&2; exit 2; }
# Without the month of device 2 (a bench that has it): it would be projected under valgrind.
seed_args=""; "$bench" read --help | grep -q month-fixes && seed_args="--month-fixes 0"
"$bench" read --dir "$scratch" --requests 10 $seed_args >/dev/null
data="$scratch/server"
echo 'bench-password-1' | "$bin" user passwd bench --data-dir "$data" >/dev/null 2>&1
cookies=$(mktemp); out=$(mktemp -d)
trap 'rm -rf "$cookies" "$out"' EXIT
paths=${PATHS:-"/api/find-my/devices /api/find-my/devices/1/locations?limit=10000"}
number=0
for path in $paths; do
  number=$((number + 1))
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/cg.%p" \
    "$bin" serve --data-dir "$data" --listen 127.0.0.1:$port ${SERVE_ARGS:-} >"$out/serve.log" 2>&1 &
  server=$!
  wait_projected $port $server "$out/serve.log"
  login_bench $port "$cookies"
  for _ in 1 2 3; do curl -s -b "$cookies" "http://127.0.0.1:$port$path" -o /dev/null; done
  callgrind_control -i on $server >/dev/null 2>&1
  for _ in $(seq 1 "$requests"); do curl -s -b "$cookies" "http://127.0.0.1:$port$path" -o "$out/body"; done
  callgrind_control -i off $server >/dev/null 2>&1
  kill -TERM $server; wait $server || true
  total=$(cat "$out"/cg.* | awk '/^(summary|totals):/ {s += $2} END {print s}')
  echo "$path: $(wc -c <"$out/body") bytes, $((total / requests)) instructions per request"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; for file in "$out"/cg.*; do mv "$file" "$KEEP/cg.$number.${file##*.}"; done; fi
  rm -f "$out"/cg.*
done
