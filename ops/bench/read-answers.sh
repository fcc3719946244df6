#!/bin/bash
# Two builds' answers to the same read requests over one data directory, byte for byte: status,
# headers (less Date) and body of each. For a change of how reads are made (a query, a projection
# column) that must not change what they answer.
#
#   ops/bench/read-answers.sh BINARY_A BINARY_B DATA_DIR [OUT_DIR]
#
# DATA_DIR is a server directory seeded by `findmy-bench read` (SCRATCH_DIR/server: user "bench",
# device 1 with 30 days of fixes, device 2 with a month, 1,000 devices). Each binary serves it in
# turn (a projection of another version is rebuilt at its start: both wait for the projector to
# reach the log's end), answers the requests below, and stops. The devices list's ages
# (`fix_age_seconds`, `since_last_report_seconds`) move with the clock: they are left out of it.
# Prints one line per request that differs and exits 1 if any does.
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/serve-ready.sh"
a=$(readlink -f "$1"); b=$(readlink -f "$2"); data=$3; out=${4:-$(mktemp -d)}; port=18396
mkdir -p "$out"
echo 'bench-password-1' | "$a" user passwd bench --data-dir "$data" >/dev/null 2>&1
d=/api/find-my/devices
paths=(
  "$d/1/locations?limit=10000"
  "$d/1/locations"
  "$d/1/locations?limit=500&from=2020-01-01T00:00:00Z"
  "$d/2/locations?limit=1000"
  "$d/3/locations"
  "$d/1/locations?limit=10&cursor=garbage"
  "$d/1/locations?from=1999-01-01T00:00:00Z&to=1999-02-01T00:00:00Z"
  "$d/1/arrivals?limit=100"
  "$d/2/arrivals"
  "$d/1/imports"
  "$d/1/export?format=geojson"
  "$d/1/export?format=gpx"
  "$d/1/export?format=csv"
  "$d/2/export?format=csv"
  "$d/1"
  "$d"
)
serve() {
  local bin=$1 tag=$2
  "$bin" serve --data-dir "$data" --listen 127.0.0.1:$port >"$out/$tag.serve.log" 2>&1 &
  local server=$! cookies="$out/$tag.cookies"
  wait_projected $port $server "$out/$tag.serve.log"
  login_bench $port "$cookies"
  local number=0 path
  for path in "${paths[@]}"; do
    number=$((number + 1))
    curl -s -b "$cookies" -D "$out/$tag.$number.head" -o "$out/$tag.$number.body" "http://127.0.0.1:$port$path"
    sed -i '/^Date:/d' "$out/$tag.$number.head"
  done
  # The first and the second page by the cursor of the first (a page of 100).
  curl -s -b "$cookies" -o "$out/$tag.page1.body" "http://127.0.0.1:$port$d/1/locations?limit=100"
  cursor=$(python3 -c 'import json,sys,urllib.parse; print(urllib.parse.quote(json.load(open(sys.argv[1]))["next_cursor"]))' "$out/$tag.page1.body")
  curl -s -b "$cookies" -D "$out/$tag.page2.head" -o "$out/$tag.page2.body" "http://127.0.0.1:$port$d/1/locations?limit=100&cursor=$cursor"
  sed -i '/^Date:/d' "$out/$tag.page2.head"
  # Stays of one day of device 1 (the history's last day).
  to=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["locations"][-1]["recorded_at"])' "$out/$tag.1.body")
  from=$(python3 -c 'import sys,datetime; t=datetime.datetime.fromisoformat(sys.argv[1].replace("Z","+00:00")); print((t-datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ"))' "$to")
  curl -s -b "$cookies" -D "$out/$tag.stays.head" -o "$out/$tag.stays.body" "http://127.0.0.1:$port$d/1/stays?from=$from&to=2100-01-01T00:00:00Z"
  sed -i '/^Date:/d' "$out/$tag.stays.head"
  for file in "$out/$tag.$number.body" "$out/$tag.$((number - 1)).body"; do
    python3 - "$file" <<'PY'
import json, sys
path = sys.argv[1]
def strip(value):
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in ("fix_age_seconds", "since_last_report_seconds")}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value
text = json.load(open(path))
json.dump(strip(text), open(path + ".json", "w"), sort_keys=True)
PY
  done
  kill -TERM $server; wait $server || true
}
serve "$a" a
serve "$b" b
status=0
for file in "$out"/a.*.head "$out"/a.*.body "$out"/a.*.json; do
  other="$out/b.${file#$out/a.}"
  case "$file" in *.$((${#paths[@]})).body|*.$((${#paths[@]} - 1)).body) continue ;; esac
  if ! cmp -s "$file" "$other"; then echo "differs: ${file#$out/a.}"; status=1; fi
done
echo "$(ls "$out"/a.*.body | wc -l) answers compared in $out; bytes: $(cat "$out"/a.*.body | wc -c)"
exit $status
