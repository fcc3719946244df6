#!/usr/bin/python3
"""How long an erased coordinate stays readable in the files of the embedded PostgreSQL cluster and
of the event log. Not a timed test: it counts bytes on disk after each step and prints one table.

Usage: ops/bench/erasure-residue.py FINDMY_BINARY [--steps manual|compactor] [--more-fixes N]
                                    [--wal-recycle on] [--history-fixes N]

A fresh data directory and `findmy serve --projector on`; one device ("secret") reports 200 fixes
whose latitude is one unique value, interleaved with another device's fixes so they share pages;
then the secret device's whole history is erased. After each step the script counts, in
DATA_DIR/postgres/data/base (table and index files) and .../pg_wal (the write-ahead log), the files
holding the value's 8 bytes (IEEE 754 double, little endian, as PostgreSQL stores a float8) or its
decimal text; and in the event log, the records holding it (`findmy log dump --json`: the log's
fix codec stores coordinates XORed and in byte planes, LZ4-compressed, so its files are decoded
rather than searched).

  --steps manual     erase; plain VACUUM; CHECKPOINT; VACUUM FULL; ANALYZE + VACUUM FULL
                     pg_statistic (the planner's sampled values); CHECKPOINT; pg_switch_wal() + CHECKPOINT;
                     N more fixes + CHECKPOINT (each through psql as the cluster's role)
  --steps compactor  erase; `findmy compact` (the compactor's run after an erasure);
                     N more fixes + CHECKPOINT
  --history-fixes N  the other device's fixes reported first (default 0): the size of the tables the
                     compactor rewrites, for its run time (VACUUM FULL holds each table's lock)
  --wal-recycle on   ALTER SYSTEM SET wal_recycle = on first (PostgreSQL's default; findmy's
                     embedded cluster runs with it off)
Run as root (it reads the cluster's files). See docs/benchmarks.md, "Erased coordinates on disk".
"""
import glob, json, os, random, shutil, signal, struct, subprocess, sys, tempfile, time, urllib.request, uuid
from datetime import datetime, timedelta, timezone

B = sys.argv[1]
STEPS = sys.argv[sys.argv.index("--steps") + 1] if "--steps" in sys.argv else "compactor"
RECYCLE = "--wal-recycle" in sys.argv and sys.argv[sys.argv.index("--wal-recycle") + 1] == "on"
HISTORY = int(sys.argv[sys.argv.index("--history-fixes") + 1]) if "--history-fixes" in sys.argv else 0
MORE = int(sys.argv[sys.argv.index("--more-fixes") + 1]) if "--more-fixes" in sys.argv else 50000
PSQL = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))[-1]

d = tempfile.mkdtemp(prefix="findmy-residue-")
os.chmod(d, 0o755)
value = 37.0 + random.randint(1, 10**9) / 10**10  # unique per run, e.g. 37.0123456789
needles = {"binary": struct.pack("<d", value), "text": repr(value).encode()}
token = json.loads(subprocess.run([B, "user", "add", "alice", "--json", "--data-dir", d],
                                  capture_output=True, text=True, check=True).stdout)["token"]
server = subprocess.Popen([B, "serve", "--data-dir", d, "--listen", "127.0.0.1:0", "--projector", "on",
                           "--compact-interval-seconds", "86400", "--compact-first-run-seconds", "86400"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
url = server.stdout.readline().strip()
conninfo = None


def call(method, path, token, body):
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method=method,
                                     headers={"Authorization": "Bearer " + token,
                                              "Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request).read())


def sql(statement):
    return subprocess.run([PSQL, conninfo, "-Atc", statement], capture_output=True, text=True,
                          check=True).stdout.strip()


def rfc(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def report(device, latitudes, start):
    fixes = [{"latitude": lat, "longitude": 13.4, "accuracy_m": 10, "source": "significant",
              "recorded_at": rfc(start + timedelta(seconds=k))} for k, lat in enumerate(latitudes)]
    return call("POST", "/api/find-my/report", device["device_token"],
                {"batch_id": str(uuid.uuid4()), "fixes": fixes})["offset"]


def wait_projected(offset):
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if int(sql("SELECT next_offset FROM findmy.projector_checkpoints") or 0) > offset:
                return
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.1)
    raise SystemExit("the projector did not reach offset %d" % offset)


def count():
    cluster = os.path.realpath(d + "/postgres") + "/data"
    places = {"base": cluster + "/base", "pg_wal": cluster + "/pg_wal"}
    found = {}
    for place, root in places.items():
        files = 0
        for directory, _, names in os.walk(root):
            for name in names:
                try:
                    content = open(os.path.join(directory, name), "rb").read()
                except OSError:
                    continue
                if any(needle in content for needle in needles.values()):
                    files += 1
        found[place] = files
    dump = subprocess.run([B, "log", "dump", "--json", "--data-dir", d], capture_output=True, text=True).stdout
    found["log"] = sum(1 for line in dump.splitlines() if needles["text"].decode() in line)
    return found


rows = []


def step(name):
    found = count()
    rows.append((name, found))
    print("%-56s base: %3d files  pg_wal: %3d files  log: %3d records"
          % (name, found["base"], found["pg_wal"], found["log"]), flush=True)


try:
    secret = call("POST", "/api/find-my/devices", token,
                  {"device_uuid": str(uuid.uuid4()), "name": "secret", "platform": "ios"})
    other = call("POST", "/api/find-my/devices", token,
                 {"device_uuid": str(uuid.uuid4()), "name": "other", "platform": "ios"})
    conninfo = "host=%s port=5432 dbname=findmy user=findmy passfile=%s" % (
        os.path.realpath(d + "/postgres") + "/socket", d + "/postgres.pgpass")
    if RECYCLE:
        sql("ALTER SYSTEM SET wal_recycle = on")
        sql("SELECT pg_reload_conf()")
    start = datetime.now(timezone.utc) - timedelta(days=2)
    last = 0
    for first in range(0, HISTORY, 5000):
        last = report(other, [50.0 + 0.000001 * (first + k) for k in range(min(5000, HISTORY - first))],
                      start - timedelta(days=1, seconds=HISTORY - first))
    for batch in range(20):
        last = report(other, [52.5 + 0.00001 * (batch * 100 + k) for k in range(100)],
                      start + timedelta(minutes=batch))
        last = report(secret, [value] * 10, start + timedelta(minutes=batch, seconds=30))
    wait_projected(last)
    print("value %r, %d rows of it in device_locations" % (value, int(sql(
        "SELECT count(*) FROM findmy.device_locations WHERE latitude = %r" % value))), flush=True)
    step("reported and projected")
    sql("CHECKPOINT")
    step("CHECKPOINT (pages written to the table files)")
    erased_lsn = sql("SELECT pg_current_wal_lsn()")
    erased = call("POST", "/api/find-my/devices/%d/erase" % secret["device_id"], token, {})
    wait_projected(erased["offset"])
    assert sql("SELECT count(*) FROM findmy.device_locations WHERE latitude = %r" % value) == "0"
    step("erased: rows deleted by the projector")
    if STEPS == "manual":
        sql("VACUUM findmy.device_locations, findmy.device_latest")
        step("plain VACUUM")
        sql("CHECKPOINT")
        step("CHECKPOINT")
        sql("VACUUM FULL findmy.device_locations, findmy.device_latest")
        step("VACUUM FULL")
        sql("ANALYZE findmy.device_locations")
        sql("ANALYZE findmy.device_latest")
        sql("VACUUM FULL pg_catalog.pg_statistic")
        step("ANALYZE + VACUUM FULL pg_statistic")
        sql("CHECKPOINT")
        step("CHECKPOINT")
        sql("SELECT pg_switch_wal()")
        sql("CHECKPOINT")
        step("pg_switch_wal() + CHECKPOINT")
    else:
        compacted = subprocess.run([B, "compact", "--data-dir", d, "--json"], capture_output=True,
                                   text=True, check=True).stdout
        compacted = json.loads(compacted)
        print("compactor: %d ms; %s" % (compacted["elapsed_ms"], json.dumps(compacted.get("database"))), flush=True)
        step("findmy compact (the run after an erasure)")
    done = 0
    while done < MORE:
        n = min(25000, MORE - done)
        for first in range(done, done + n, 5000):
            last = report(other, [10.0 + 0.000001 * (first + k) for k in range(min(5000, done + n - first))],
                          start + timedelta(hours=1, seconds=first))
        done += n
        wait_projected(last)
        sql("CHECKPOINT")
        wal = int(sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '%s')" % erased_lsn))
        step("+%d fixes (%.0f MB of WAL since the erase) + CHECKPOINT" % (done, wal / 1e6))
finally:
    server.send_signal(signal.SIGTERM)
    server.wait(60)
    print(json.dumps({"value": value, "steps": STEPS, "more_fixes": MORE, "wal_recycle": RECYCLE,
                      "history_fixes": HISTORY,
                      "files_holding_the_value": [{"after": name, **found} for name, found in rows]}))
    # The server stopped the cluster; its files, the data directory and the OS user made for it go.
    try:
        import pwd
        owner = pwd.getpwuid(os.stat(os.path.realpath(d + "/postgres") + "/data/PG_VERSION").st_uid).pw_name
        if owner.startswith("findmy-"):
            subprocess.run(["/usr/sbin/userdel", owner], capture_output=True)
    except (OSError, KeyError):
        pass
    shutil.rmtree(os.path.realpath(d + "/postgres"), ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)
