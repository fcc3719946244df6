#!/usr/bin/env bash
# End-to-end test of the README's first command: `make run` in a fresh clone builds, starts the
# server on the embedded PostgreSQL, prints how to create a user and enrol a device, and answers on
# its URL. Prints "make-run: 1 passed, 0 failed" or fails with the server's output.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
group=""
cleanup() {
    if [[ -n "$group" ]]; then
        kill -TERM -- "-$group" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 -- "-$group" 2>/dev/null || break; sleep 0.5; done
        kill -KILL -- "-$group" 2>/dev/null || true
    fi
    # The data directory `make run` chose (under /var/lib/findmy as root in a mktemp directory).
    local data="" link="" owner=""
    data=$("$repo/ops/default-data-dir.sh" "$work/findmy")
    link="$data/postgres"
    # As root the cluster ran as an OS user made for this data directory: it goes too.
    if [[ -e "$link/data/PG_VERSION" ]]; then owner=$(stat -c %U "$link/data/PG_VERSION"); fi
    if [[ -L "$link" ]]; then rm -rf "$(readlink "$link")"; fi
    rm -rf "$work" "$data"
    if [[ "$owner" == findmy-* ]]; then userdel "$owner" 2>/dev/null || true; fi
}
trap cleanup EXIT

git clone -q "$repo" "$work/findmy"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cd "$work/findmy"
setsid env FINDMY_LISTEN="127.0.0.1:$port" make run >"$work/run.log" 2>&1 &
group=$!

# The release build of a fresh clone takes minutes on two cores.
for _ in $(seq 1 1200); do
    if curl -sf "http://127.0.0.1:$port/healthz" >"$work/health.json" 2>/dev/null; then break; fi
    if ! kill -0 "$group" 2>/dev/null; then break; fi
    sleep 1
done

fail() {
    echo "make-run: FAILED: $1" >&2
    tail -n 40 "$work/run.log" >&2
    echo "make-run: 0 passed, 1 failed"
    exit 1
}
[[ -s "$work/health.json" ]] || fail "no answer on http://127.0.0.1:$port/healthz"
grep -q '"status":"ok"' "$work/health.json" || fail "healthz says $(cat "$work/health.json")"
grep -q '"projector"' "$work/health.json" || fail "the projector is not running: $(cat "$work/health.json")"
grep -q "http://127.0.0.1:$port" "$work/run.log" || fail "make run did not print its URL"
grep -q "user add" "$work/run.log" || fail "make run did not print how to create a user"
grep -q "/api/find-my/devices" "$work/run.log" || fail "make run did not print how to enrol a device"
echo "make-run: 1 passed, 0 failed"
