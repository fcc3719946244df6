#!/usr/bin/env python3
"""Where a history page's wall time goes, request by request: for N GETs of the 30-day page on one
keep-alive connection, the wall time, and from /proc (schedstat, nanoseconds) the CPU time and
run-queue wait of findmy's threads and of PostgreSQL's backends, and the machine's CPU split
(/proc/stat: user, sys, idle, steal) over the fast half and the slowest fifth of the requests.

    python3 ops/bench/read-schedstat.py BINARY DATA_DIR [N]

DATA_DIR: a server directory seeded by `findmy-bench read` with user "bench"'s password set to
bench-password-1 (`echo bench-password-1 | findmy user passwd bench --data-dir DATA_DIR`). Prints
the first 120 requests as wall ms:backend pid:backend CPU ms, then the two classes' totals and
medians. Slow requests whose own CPU time grows while the machine stays partly idle and reports no
steal are the machine's, not the program's (docs/benchmarks.md, "The page in the index's order").
"""

import glob
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time

binary, data = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 300
port = 18405
path = '/api/find-my/devices/1/locations?limit=10000'
log = tempfile.NamedTemporaryFile(prefix='read-schedstat-', suffix='.log', delete=False)
server = subprocess.Popen([binary, 'serve', '--data-dir', data, '--listen', f'127.0.0.1:{port}'],
                          stdout=log, stderr=subprocess.STDOUT)


def projected():
    """Whether the projector holds the whole log (as ops/bench/serve-ready.sh waits for)."""
    try:
        c = http.client.HTTPConnection('127.0.0.1', port)
        c.request('GET', '/healthz')
        health = json.loads(c.getresponse().read())
        return health['projector']['checkpoint'] >= health['durable_end'] > 0
    except (OSError, ValueError, KeyError):
        return False


for _ in range(1200):
    if server.poll() is not None:
        sys.exit(f'findmy serve stopped: {log.name}')
    if projected():
        break
    time.sleep(0.5)
else:
    sys.exit(f'the projector did not reach the log\'s end in 10 minutes: {log.name}')

connection = http.client.HTTPConnection('127.0.0.1', port)
connection.request('POST', '/login', body=json.dumps({'name': 'bench', 'password': 'bench-password-1'}),
                   headers={'Content-Type': 'application/json'})
answer = connection.getresponse()
answer.read()
cookie = answer.getheader('Set-Cookie').split(';')[0]
postmaster = int(open(f'{data}/postgres/data/postmaster.pid').readline())


def get():
    connection.request('GET', path, headers={'Cookie': cookie})
    connection.getresponse().read()


def schedstat_files():
    """findmy's threads ('f') and PostgreSQL's backends ('p'), listed again for each request."""
    files = [('f', f) for f in glob.glob(f'/proc/{server.pid}/task/*/schedstat')]
    backends = subprocess.check_output(['pgrep', '-P', str(postmaster)]).split()
    return files + [('p', f'/proc/{int(pid)}/schedstat') for pid in backends]


def snapshot(files):
    """Each file's (CPU ns, run-queue wait ns); a thread gone since the listing counts as zero."""
    taken = {}
    for kind, name in files:
        try:
            cpu, wait = open(name).read().split()[:2]
            taken[name] = (kind, int(cpu), int(wait))
        except OSError:
            taken[name] = (kind, 0, 0)
    return taken


def machine():
    return [int(x) for x in open('/proc/stat').readline().split()[1:9]]


for _ in range(20):
    get()
rows, sequence, stat = [], [], []
for _ in range(n):
    files = schedstat_files()
    before, machine_before, start = snapshot(files), machine(), time.perf_counter()
    get()
    wall = (time.perf_counter() - start) * 1000
    machine_after, after = machine(), snapshot(files)
    stat.append([b - a for a, b in zip(machine_before, machine_after)])
    delta = {name: (kind, (after[name][1] - cpu) / 1e6, (after[name][2] - wait) / 1e6)
             for name, (kind, cpu, wait) in before.items()}

    def total(kind, field):
        return sum(d[field] for d in delta.values() if d[0] == kind)

    busy = max((name for name in delta if delta[name][0] == 'p'), key=lambda name: delta[name][1])
    sequence.append((wall, busy.split('/')[2], delta[busy][1]))
    rows.append((wall, total('f', 1), total('f', 2), total('p', 1), total('p', 2)))
server.terminate()
server.wait()

print(' '.join('%d:%s:%.0f' % (wall, pid[-3:], cpu) for wall, pid, cpu in sequence[:120]))
walls = [row[0] for row in rows]
order = sorted(range(len(rows)), key=lambda i: walls[i])


def machine_split(indices):
    """/proc/stat's split of the machine's time over these requests (its ticks are 10 ms)."""
    tot = [sum(stat[i][j] for i in indices) for j in range(8)]
    print('n', len(indices), 'wall ms', round(sum(walls[i] for i in indices)), 'user', tot[0] * 10,
          'sys', tot[2] * 10, 'idle', tot[3] * 10, 'iowait', tot[4] * 10, 'irq+softirq', (tot[5] + tot[6]) * 10,
          'steal', tot[7] * 10, 'own cpu', round(sum(rows[i][1] + rows[i][3] for i in indices)))


machine_split(order[:len(order) // 2])
machine_split(order[-len(order) // 5:])
rows.sort()


def show(label, selected):
    if selected:
        print(label, len(selected), 'wall %.1f findmy cpu %.1f wait %.2f pg cpu %.1f wait %.2f'
              % tuple(statistics.median([row[i] for row in selected]) for i in range(5)))


show('fast half', rows[:n // 2])
show('slow 20%', rows[-n // 5:])
show('slowest 5%', rows[-n // 20:])
