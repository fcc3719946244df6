#!/bin/bash
# The resident memory of `findmy serve`, two builds in one run, alternating (docs/benchmarks.md,
# "Memory"):
#
#   ops/bench/serve-memory.sh BASELINE_FINDMY NEW_FINDMY SCRATCH_DIR [ROUNDS]
#
# Each round, for each build in turn, one JSON line:
#   - ingest: ops/bench/ingest-serve-cost.sh BINARY DIR 5 memory: 64 connections of single-fix
#     reports, `--projector off`; the largest VmRSS sampled during the run and, at its end, kB per
#     part (ops/bench/memory-parts.py);
#   - read: `findmy-bench read --requests 300` against the build (FINDMY_BIN): its
#     server_peak_rss_bytes is the server's VmHWM over its life (start, the projection of the seeded
#     month, the devices lists and the history pages).
# Then, for each build once, on the data the read driver left: the server started again
# (projector on), its parts before and after 20 of the 30-day history pages (8,640 fixes, 2.5 MB
# each) and 100 devices lists (1,000 devices), and the largest VmRSS sampled during each.
# findmy-bench is taken from beside NEW_FINDMY, or $FINDMY_BENCH.
set -euo pipefail
baseline=$(readlink -f "$1"); new=$(readlink -f "$2"); scratch=$3; rounds=${4:-2}
here=$(dirname "$(readlink -f "$0")")
bench=${FINDMY_BENCH:-$(dirname "$new")/findmy-bench}
mkdir -p "$scratch"

load() { cut -d' ' -f1 /proc/loadavg; }

for round in $(seq 1 "$rounds"); do
    for build in baseline new; do
        binary=$baseline; [ $build = new ] && binary=$new
        line=$("$here/ingest-serve-cost.sh" "$binary" "$scratch/ingest-$build" 5 memory 2>/dev/null)
        echo "{\"round\": $round, \"build\": \"$build\", \"phase\": \"ingest\", \"load\": $(load), \"result\": $line}"
        line=$(FINDMY_BIN=$binary "$bench" read --dir "$scratch/read-$build" --requests 300 2>/dev/null | tail -1)
        echo "{\"round\": $round, \"build\": \"$build\", \"phase\": \"read\", \"load\": $(load), \"result\": $line}"
    done
done

# Requests `path` `count` times while sampling VmRSS; prints the largest sample (kB).
requests_rss_max() {
    local pid=$1 url=$2 token=$3 path=$4 count=$5
    (for _ in $(seq 1 "$count"); do
        curl -s -o /dev/null -H "Authorization: Bearer $token" "$url$path"
    done) &
    local client=$! rss_max=0 rss
    while kill -0 $client 2>/dev/null; do
        rss=$(awk '$1 == "VmRSS:" {print $2}' "/proc/$pid/status")
        [ "$rss" -gt "$rss_max" ] && rss_max=$rss
        sleep 0.05
    done
    wait $client
    echo $rss_max
}

for build in baseline new; do
    binary=$baseline; [ $build = new ] && binary=$new
    data=$scratch/read-$build/server
    token=$("$binary" user token bench --rotate --json --data-dir "$data" 2>/dev/null | grep '^{' | tail -1 |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
    "$binary" serve --data-dir "$data" --listen 127.0.0.1:0 >"$scratch/serve-$build.out" 2>"$scratch/serve-$build.log" &
    pid=$!
    for _ in $(seq 1 1200); do grep -q '^http://' "$scratch/serve-$build.out" 2>/dev/null && break; sleep 0.1; done
    url=$(head -1 "$scratch/serve-$build.out")
    history="/api/find-my/devices/1/locations?limit=10000"
    # Projected once the page holds the whole month again.
    for _ in $(seq 1 600); do
        count=$(curl -s -H "Authorization: Bearer $token" "$url$history" |
            python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("locations", [])))' 2>/dev/null || echo 0)
        [ "$count" = 8640 ] && break
        sleep 0.5
    done
    before=$(python3 "$here/memory-parts.py" $pid)
    history_max=$(requests_rss_max $pid "$url" "$token" "$history" 20)
    after_history=$(python3 "$here/memory-parts.py" $pid)
    list_max=$(requests_rss_max $pid "$url" "$token" "/api/find-my/devices" 100)
    after_list=$(python3 "$here/memory-parts.py" $pid)
    kill -INT $pid
    wait $pid || true
    echo "{\"build\": \"$build\", \"phase\": \"read parts\", \"load\": $(load), \"before\": $before," \
        "\"history_rss_max_kb\": $history_max, \"after_history\": $after_history," \
        "\"list_rss_max_kb\": $list_max, \"after_list\": $after_list}"
done
