#!/bin/bash
# PostgreSQL backend CPU for a 30-day history page's COPY, from /proc around REQUESTS runs of each
# statement in one psql session (the COPY's rows to /dev/null): what the database spends on a page
# whatever findmy and the client do.
#
#   ops/bench/read-backend-cpu.sh BINARY DATA_DIR [REQUESTS]
#
# DATA_DIR is a server directory seeded by `findmy-bench read` (device 1 with 30 days of fixes).
# BINARY serves it (so its embedded PostgreSQL runs and the projection is of BINARY's version)
# while psql runs the page's query as the history route sends it: the 12 shown columns
# (projection version 8 and earlier), and, where the history has it, the packed `shown` column
# alone (version 9). Prints CPU ms a page of each. SETTINGS runs first in the session (e.g.
# SETTINGS="SET enable_bitmapscan = off;": the plan in the index's order).
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/serve-ready.sh"
bin=$(readlink -f "$1"); data=$2; requests=${3:-100}; port=18397
psql=$(ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | tail -1)
log=$(mktemp); script=$(mktemp)
trap 'rm -f "$log" "$script"' EXIT
"$bin" serve --data-dir "$data" --listen 127.0.0.1:$port >"$log" 2>&1 &
server=$!
wait_projected $port $server "$log"
where="FROM findmy.device_locations l WHERE l.device_id = 1
  AND l.recorded_at >= coalesce(NULL::timestamptz, '-infinity') AND l.recorded_at < coalesce(NULL::timestamptz, 'infinity')
  ORDER BY l.recorded_at, l.latitude, l.longitude LIMIT 10001"
columns="l.latitude, l.longitude, l.accuracy_m, l.altitude_m, l.speed_mps, l.heading_deg, l.battery_pct, l.is_charging, l.source, l.recorded_at, l.received_at, l.clock_suspect"
conn="host=$data/postgres/socket dbname=findmy user=findmy"
export PGPASSFILE=$data/postgres.pgpass
statements=("$columns")
[ "$("$psql" "$conn" -Atc "SELECT count(*) FROM pg_attribute WHERE attrelid = 'findmy.device_locations'::regclass AND attname = 'shown'")" = 1 ] \
  && statements+=("l.shown")
for select in "${statements[@]}"; do
  {
    echo "SELECT pg_backend_pid() AS pid \\gset"
    echo "\\setenv BACKEND :pid"
    echo "${SETTINGS:-}"
    echo "\\o /dev/null"
    for _ in 1 2 3 4 5; do echo "COPY (SELECT $select $where) TO STDOUT (FORMAT binary);"; done
    echo "\\o"
    echo "\\! awk '{print \$14 + \$15}' /proc/\$BACKEND/stat"
    echo "\\o /dev/null"
    for _ in $(seq 1 "$requests"); do echo "COPY (SELECT $select $where) TO STDOUT (FORMAT binary);"; done
    echo "\\o"
    echo "\\! awk '{print \$14 + \$15}' /proc/\$BACKEND/stat"
  } >"$script"
  ticks=($("$psql" "$conn" -qAt -f "$script"))
  # Ticks are 10 ms.
  echo "$( [ "$select" = l.shown ] && echo "shown" || echo "12 columns"): $(( (ticks[1] - ticks[0]) * 10000 / requests )) us of backend CPU a page; load $(cut -d' ' -f1-3 /proc/loadavg)"
done
kill -TERM $server; wait $server || true
