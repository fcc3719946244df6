#!/bin/bash
# The agent's resident memory, for one or more builds, alternating (docs/benchmarks.md, "The agent"):
#
#   ops/bench/agent-memory.sh FINDMY SCRATCH_DIR [--tls] [--parts] AGENT...
#
# Starts FINDMY serve (projector off) on SCRATCH_DIR (emptied first), then, twice, for each AGENT
# in turn: enrols it, runs it with a fixed position (a fix a second, batches cut after a second)
# until it has logged three stored batches and its command stream is connected, and prints its
# VmRSS and VmHWM (kB). --tls puts ops/bench/tls_proxy.py (a certificate for localhost made with
# openssl) in front of the server and gives the agent its https:// URL, the certificate trusted
# through SSL_CERT_FILE. --parts adds the Rss of each mapping summed per file.
set -euo pipefail
findmy=$(readlink -f "$1"); dir=$2; shift 2
tls=""; parts=""
while [ $# -gt 0 ]; do
    case $1 in
    --tls) tls=1; shift ;;
    --parts) parts=1; shift ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 FINDMY SCRATCH_DIR [--tls] [--parts] AGENT..." >&2; exit 2; }
here=$(dirname "$(readlink -f "$0")")
rm -rf "$dir"; mkdir -p "$dir"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
token=$("$findmy" user add bench --json --data-dir "$dir/server" 2>/dev/null | grep '^{' | tail -1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
"$findmy" serve --data-dir "$dir/server" --listen 127.0.0.1:0 --projector off >"$dir/serve.out" 2>"$dir/serve.log" &
pids+=($!)
for _ in $(seq 1 600); do grep -q '^http://' "$dir/serve.out" && break; sleep 0.1; done
url=$(head -1 "$dir/serve.out")
if [ -n "$tls" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 2 \
        -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
    port=${url##*:}; port=${port%%/*}
    python3 "$here/tls_proxy.py" "$dir/cert.pem" "$dir/key.pem" "$dir/tls.port" "$port" &
    pids+=($!)
    for _ in $(seq 1 100); do [ -s "$dir/tls.port" ] && break; sleep 0.1; done
    url="https://localhost:$(cat "$dir/tls.port")"
    export SSL_CERT_FILE=$dir/cert.pem
fi
for round in 1 2; do
    for agent in "$@"; do
        state=$(mktemp -d "$dir/state-XXXX")
        "$agent" enrol --server "$url" --user-token "$token" --name pi --state-dir "$state" >/dev/null 2>&1
        "$agent" run --state-dir "$state" --fixed 52.5,13.4,30 --interval-seconds 1 --batch-age-seconds 1 \
            2>"$state/log" &
        apid=$!
        for _ in $(seq 1 600); do
            [ "$(grep -c ' stored' "$state/log")" -ge 3 ] && grep -q 'stream connected' "$state/log" && break
            sleep 0.1
        done
        echo "{\"round\": $round, \"agent\": \"$agent\", \"tls\": ${tls:-0}," \
            "\"rss_kb\": $(awk '/VmRSS/{print $2}' /proc/$apid/status)," \
            "\"hwm_kb\": $(awk '/VmHWM/{print $2}' /proc/$apid/status)," \
            "\"stored\": $(grep -c ' stored' "$state/log"), \"load\": $(cut -d' ' -f1 /proc/loadavg)}"
        if [ -n "$parts" ]; then
            awk '/^[0-9a-f]+-/{f=$6} /^Rss:/{r[f]+=$2} END{for(f in r) if(r[f]) print "  ", r[f], (f==""?"(anonymous)":f)}' \
                /proc/$apid/smaps | sort -rn
        fi
        kill $apid; wait $apid 2>/dev/null || true
    done
done
