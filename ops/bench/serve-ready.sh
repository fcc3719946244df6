# Sourced by the read benchmarks (read-answers.sh, read-backend-cpu.sh, read-cpu.sh,
# read-instructions.sh): waiting for a started `findmy serve` and logging in as the seeded user.

# wait_projected PORT PID LOG: polls PORT's /healthz every half second until the projector's
# checkpoint reaches the log's durable end (the seeded history is in PostgreSQL), for at most 10
# minutes (a server under valgrind starts slowly); prints LOG and exits 2 if PID stops first.
wait_projected() {
  local port=$1 pid=$2 log=$3 health
  for _ in $(seq 1 1200); do
    kill -0 "$pid" 2>/dev/null || { echo "findmy serve stopped:" >&2; cat "$log" >&2; exit 2; }
    health=$(curl -s "http://127.0.0.1:$port/healthz" || true)
    python3 -c 'import json,sys; h=json.loads(sys.argv[1]); sys.exit(0 if h["projector"]["checkpoint"] >= h["durable_end"] > 0 else 1)' "$health" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "findmy serve on port $port: the projector did not reach the log's end in 10 minutes" >&2
  exit 2
}

# login_bench PORT COOKIES: logs in as "bench" (password bench-password-1, as the scripts set it),
# the session cookie into the file COOKIES.
login_bench() {
  curl -s -c "$2" -H 'Content-Type: application/json' \
    -d '{"name":"bench","password":"bench-password-1"}' "http://127.0.0.1:$1/login" >/dev/null
}
