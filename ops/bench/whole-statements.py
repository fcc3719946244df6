#!/usr/bin/env python3
"""Where PostgreSQL's time goes while the whole service takes single-fix reports.

usage: ops/bench/whole-statements.py FINDMY DIR SECONDS [SETTINGS]

Makes a data directory DIR (emptied first) with one user and 64 devices, restarts `findmy serve`
(projectors on, embedded PostgreSQL) with pg_stat_statements loaded (SETTINGS: more
postgresql.conf lines, `;`-separated, e.g. "synchronous_commit=off"), drives single-fix reports
at 64 connections for SECONDS with wrk and ops/bench/report.lua (every request a fix of its own),
waits for the projectors, and prints the statements by time with their calls, rows and WAL
bytes, then one RESULT line: reports/s, CPU µs per fix of findmy and of PostgreSQL (the
postmaster and its children), the load. docs/benchmarks.md, "Whole service against ingest alone".
"""
import json, os, subprocess, sys, time, urllib.request

findmy, d, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
extra = sys.argv[4] if len(sys.argv) > 4 else ""
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.lua")
subprocess.run(["rm", "-rf", "--", d], check=True)
os.makedirs(d)
os.chmod(d, 0o755)  # a root run's cluster user must pass through
out = subprocess.run([findmy, "user", "add", "bench", "--json", "--data-dir", d], capture_output=True, text=True).stdout
token = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])["token"]


def serve():
    process = subprocess.Popen(
        [findmy, "serve", "--data-dir", d, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
        stderr=open(d + "/serve.log", "a"))
    return process, process.stdout.readline().decode().strip()


def request(url, path, body=None, token=None):
    r = urllib.request.Request(url + path, data=body, method="POST" if body else "GET")
    if token:
        r.add_header("Authorization", "Bearer " + token)
    r.add_header("Content-Type", "application/json")
    return urllib.request.urlopen(r).read()


def psql(sql):
    env = dict(os.environ, PGPASSFILE=d + "/postgres.pgpass")
    return subprocess.run(
        ["psql", "-h", d + "/postgres/socket", "-U", "findmy", "-d", "findmy", "-X", "-A", "-F", "\t", "-c", sql],
        capture_output=True, text=True, env=env).stdout


def ticks(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def tree_ticks(postmaster):
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = open("/proc/%s/stat" % entry).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == postmaster or int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total


server, url = serve()
tokens = []
for i in range(64):
    body = json.dumps({"device_uuid": "00000000-0000-4000-8000-%012d" % (i + 1), "name": "b%d" % i, "platform": "linux"})
    tokens.append(json.loads(request(url, "/api/find-my/devices", body.encode(), token))["device_token"])
server.terminate()
server.wait()
with open(d + "/postgres/data/postgresql.auto.conf", "a") as conf:
    conf.write("shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track_utility = on\n")
    conf.write(extra.replace(";", "\n") + "\n")
server, url = serve()
psql("CREATE EXTENSION pg_stat_statements")
fix = ('{"latitude":52.52,"longitude":13.405,"accuracy_m":10,"altitude_m":34,"speed_mps":1.0,"heading_deg":90,'
       '"battery_pct":80,"is_charging":false,"source":"significant","recorded_at":"@RECORDED_AT@"}')
files = {"authorizations": "".join("Bearer %s\n" % t for t in tokens), "headers": "Content-Type: application/json\n",
         "body_prefix": '{"batch_id": "', "body_suffix": '", "fixes": [' + fix + "]}"}
for name, text in files.items():
    open(d + "/wrk-" + name, "w").write(text)
env = dict(os.environ, FINDMY_BENCH_PATH="/api/find-my/report", FINDMY_BENCH_THREADS="2",
           FINDMY_BENCH_RECORDED_FROM_MS=str(int(time.time() * 1000) - 86_400_000),
           **{"FINDMY_BENCH_" + name.upper(): d + "/wrk-" + name for name in files})
postmaster = int(open(d + "/postgres/data/postmaster.pid").readline())
psql("SELECT pg_stat_statements_reset()")
before = (ticks(server.pid), tree_ticks(postmaster), json.loads(request(url, "/healthz"))["durable_end"])
wrk = subprocess.run(["wrk", "-c", "64", "-t", "2", "-d", "%ds" % seconds, "-s", script, url + "/api/find-my/report"],
                     capture_output=True, text=True, env=env)
print(wrk.stdout.splitlines()[-1])
while True:
    health = json.loads(request(url, "/healthz"))
    if health["projector"]["checkpoint"] >= health["durable_end"] and health["geofences"]["checkpoint"] >= health["durable_end"]:
        break
    time.sleep(0.01)
fixes = health["durable_end"] - before[2]
after = (ticks(server.pid), tree_ticks(postmaster))
print(psql(
    "SELECT calls, round(total_exec_time::numeric, 1) exec_ms, round(total_plan_time::numeric, 1) plan_ms, rows, "
    "wal_bytes, left(regexp_replace(query, '\\s+', ' ', 'g'), 100) query FROM pg_stat_statements "
    "ORDER BY total_exec_time + total_plan_time DESC LIMIT 25"))
tick = 1e6 / os.sysconf("SC_CLK_TCK")
print("RESULT settings=%r reports/s=%.0f findmy_us_per_fix=%.1f postgres_us_per_fix=%.1f load=%s" % (
    extra, fixes / seconds, (after[0] - before[0]) * tick / fixes, (after[1] - before[1]) * tick / fixes,
    open("/proc/loadavg").read().split()[0]))
server.terminate()
server.wait()
