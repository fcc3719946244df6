#!/usr/bin/env python3
"""WAL and backend CPU per row of `device_batches` layouts: COPY of single-fix arrivals.

usage: ops/bench/arrival-layouts.py LAYOUT ROWS_PER_TRANSACTION TRANSACTIONS ROWS_BEFORE

Against the PostgreSQL that psql reaches (PGHOST, PGUSER: a superuser, for server-side COPY from
files; a scratch cluster, e.g. `initdb` and `pg_ctl start -o "-k DIR -c listen_addresses=''"`
run as the postgres user). Makes table `t` in one LAYOUT, COPYs ROWS_BEFORE rows into it, then
TRANSACTIONS transactions of ROWS_PER_TRANSACTION rows each (64 devices in turn, one row per
report, offsets and times rising as the whole service writes them), and prints the backend's CPU
µs per row (/proc, 10 ms ticks: noisy on a loaded machine), WAL bytes per row (exact) and the
table's heap and index bytes. Layouts: A projection version 7 (primary key log_offset, index
(device_id, received_at)); B version 8 (primary key (device_id, received_at, log_offset));
C the primary key of log_offset only; E primary key (device_id, log_offset); F one plain index
(device_id, received_at). docs/benchmarks.md, "Leaner rows".
"""
import datetime, os, random, subprocess, sys, uuid

layout, per_tx, txs, before = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cols = """log_offset bigint {pk}, device_id bigint NOT NULL, batch_id uuid NOT NULL,
 received_at timestamptz NOT NULL, fix_count integer NOT NULL, rejected_count integer NOT NULL,
 recorded_min timestamptz, recorded_max timestamptz, protocol text NOT NULL DEFAULT 'native', import_id uuid"""
ddl = {
    "A": "CREATE TABLE t (" + cols.format(pk="PRIMARY KEY") + "); CREATE INDEX ON t (device_id, received_at);",
    "B": "CREATE TABLE t (" + cols.format(pk="NOT NULL") + ", PRIMARY KEY (device_id, received_at, log_offset));",
    "C": "CREATE TABLE t (" + cols.format(pk="PRIMARY KEY") + ");",
    "E": "CREATE TABLE t (" + cols.format(pk="NOT NULL") + ", PRIMARY KEY (device_id, log_offset));",
    "F": "CREATE TABLE t (" + cols.format(pk="NOT NULL") + "); CREATE INDEX ON t (device_id, received_at);",
}[layout]
d = "/tmp/arrival-layouts-csv"
os.makedirs(d, exist_ok=True)
random.seed(1)


def ts(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat()


def line(offset):
    seconds = 1765000000 + offset * 80 / 1e6  # 12,500 reports a second
    return "%d,%d,%s,%s,1,0,%s,%s,native," % (
        offset, offset % 64 + 1, uuid.UUID(int=random.getrandbits(128)), ts(seconds), ts(seconds - 1), ts(seconds - 1))


with open(d + "/before.csv", "w") as f:
    f.writelines(line(o) + "\n" for o in range(before))
for i in range(txs):
    with open(d + "/%d.csv" % i, "w") as f:
        f.writelines(line(o) + "\n" for o in range(before + i * per_tx, before + (i + 1) * per_tx))
os.system("chmod -R a+rX " + d)
sql = ["DROP TABLE IF EXISTS t;", ddl, "COPY t FROM '%s/before.csv' (FORMAT csv);" % d, "CHECKPOINT;",
       "SELECT pg_backend_pid() AS pid, pg_current_wal_lsn() AS lsn0 \\gset", "\\setenv PID :pid",
       "\\! awk '{print \"ticks0\", $14+$15}' /proc/$PID/stat"]
sql += ["BEGIN; COPY t FROM '%s/%d.csv' (FORMAT csv); COMMIT;" % (d, i) for i in range(txs)]
sql += ["\\! awk '{print \"ticks1\", $14+$15}' /proc/$PID/stat",
        "SELECT 'wal', pg_current_wal_lsn() - :'lsn0'::pg_lsn;",
        "SELECT 'sizes', pg_relation_size('t'), pg_indexes_size('t');"]
out = subprocess.run(["psql", "-X", "-At", "-q", "-F", " ", "-v", "ON_ERROR_STOP=1"], input="\n".join(sql) + "\n",
                     capture_output=True, text=True)
values = {p[0]: p[1:] for p in (l.split() for l in out.stdout.splitlines()) if len(p) >= 2}
if "wal" not in values:
    sys.exit(out.stderr)
rows = per_tx * txs
print("layout %s, %d rows in transactions of %d after %d: backend CPU %.2f us/row, WAL %.1f B/row, heap %s B, indexes %s B"
      % (layout, rows, per_tx, before, (int(values["ticks1"][0]) - int(values["ticks0"][0])) * 10000 / rows,
         int(values["wal"][0]) / rows, values["sizes"][0], values["sizes"][1]))
