#!/bin/bash
# Server instructions per devices-list request with presence (docs/presence.md), counted by
# valgrind's callgrind like ops/bench/read-instructions.sh: the list of `findmy-bench read`'s 1,000
# devices, first with none linked to a tailnet node, then with every one linked (the fake headscale,
# ops/tests/fake_headscale.py, serving 1,000 nodes of user "bench", half online).
#
#   ops/bench/presence-list-instructions.sh BINARY SCRATCH_DIR [REQUESTS]
#
# findmy-bench must sit beside BINARY. Needs valgrind, curl and python3.
set -euo pipefail
bin=$(readlink -f "$1"); scratch=$2; requests=${3:-5}; port=18391
here=$(cd "$(dirname "$0")/../.." && pwd)
"$(dirname "$bin")/findmy-bench" read --dir "$scratch" --requests 10 >/dev/null 2>&1
data="$scratch/server"
token=$("$bin" user token bench --rotate --json --data-dir "$data" 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
mkdir -p "$scratch/fixtures" "$scratch/fake"
python3 - "$scratch/fixtures/bench.json" <<'PY'
import json, sys
nodes = [{"id": str(i), "name": "node-%d" % i, "givenName": "node-%d" % i,
          "user": {"id": "1", "name": "bench"}, "online": i % 2 == 0,
          "lastSeen": "2026-12-01T10:%02d:%02d.123456789Z" % (i // 60 % 60, i % 60)} for i in range(1, 1001)]
json.dump({"nodes": nodes}, open(sys.argv[1], "w"))
PY
printf 'bench-key\n' > "$scratch/headscale.key"; chmod 600 "$scratch/headscale.key"
out=$(mktemp -d)
coproc FAKE { exec python3 "$here/ops/tests/fake_headscale.py" serve --dir "$scratch/fake" --key bench-key \
  --fixture bench --fixtures "$scratch/fixtures"; }
read -r ready <&"${FAKE[0]}"; fake_port=${ready#READY }
trap 'kill $FAKE_PID 2>/dev/null || true; rm -rf "$out"' EXIT
list() { curl -s -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/find-my/devices" -o "$out/body"; }
for linked in no yes; do
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/cg.%p" \
    "$bin" serve --data-dir "$data" --listen 127.0.0.1:$port --headscale-url "http://127.0.0.1:$fake_port" \
    --headscale-api-key-file "$scratch/headscale.key" --headscale-poll-seconds 3600 >"$out/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    health=$(curl -s http://127.0.0.1:$port/healthz || true)
    python3 -c 'import json,sys; h=json.loads(sys.argv[1]); sys.exit(0 if h["projector"]["checkpoint"] >= h["durable_end"] > 0 and h["presence"]["state"] == "ok" else 1)' "$health" 2>/dev/null && break
    sleep 0.5
  done
  if [ $linked = yes ]; then
    for id in $(seq 1 1000); do
      curl -s -X PUT -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
        -d "{\"headscale_node\": \"$id\"}" "http://127.0.0.1:$port/api/find-my/devices/$id/presence" -o /dev/null
    done
  fi
  for _ in 1 2 3; do list; done
  callgrind_control -i on $server >/dev/null 2>&1
  for _ in $(seq 1 "$requests"); do list; done
  callgrind_control -i off $server >/dev/null 2>&1
  kill -TERM $server; wait $server || true
  total=$(cat "$out"/cg.* | awk '/^(summary|totals):/ {s += $2} END {print s}')
  online=$(grep -o '"online":true' "$out/body" | wc -l || true)
  echo "linked=$linked: $(wc -c <"$out/body") bytes, $online online, $((total / requests)) instructions per request"
  rm -f "$out"/cg.*
done
