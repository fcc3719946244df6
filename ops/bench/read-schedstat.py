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
import http.client, json, os, sys, time, subprocess, glob
bin, data = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 300
port = 18405
srv = subprocess.Popen([bin, 'serve', '--data-dir', data, '--listen', f'127.0.0.1:{port}'], stdout=open('/tmp/sched.log','w'), stderr=subprocess.STDOUT)
for _ in range(200):
    try:
        c = http.client.HTTPConnection('127.0.0.1', port); c.request('GET', '/healthz'); c.getresponse().read(); break
    except Exception: time.sleep(0.2)
c = http.client.HTTPConnection('127.0.0.1', port)
c.request('POST', '/login', body=json.dumps({"name":"bench","password":"bench-password-1"}), headers={'Content-Type':'application/json'})
r = c.getresponse(); r.read(); cookie = r.getheader('Set-Cookie').split(';')[0]
pm = int(open(f'{data}/postgres/data/postmaster.pid').readline())
def tids():
    out = []
    for t in glob.glob(f'/proc/{srv.pid}/task/*/schedstat'): out.append(('f', t))
    for p in subprocess.check_output(['pgrep', '-P', str(pm)]).split():
        out.append(('p', f'/proc/{int(p)}/schedstat'))
    return out
def snap(ts):
    s = {'f': [0,0], 'p': [0,0]}
    for k, path in ts:
        try:
            a = open(path).read().split(); s[k][0] += int(a[0]); s[k][1] += int(a[1])
        except Exception: pass
    return s
path = '/api/find-my/devices/1/locations?limit=10000'
for _ in range(20):
    c.request('GET', path, headers={'Cookie': cookie}); c.getresponse().read()
ts = tids()
rows = []; seq = []; stat = []
for i in range(n):
    ts = tids(); a = snap(ts); pa = {p: int(open(p).read().split()[0]) for k,p in ts if k=='p'}; st0 = open('/proc/stat').readline().split()[1:]; t0 = time.perf_counter()
    c.request('GET', path, headers={'Cookie': cookie}); r = c.getresponse(); body = r.read()
    t1 = time.perf_counter(); st1 = open('/proc/stat').readline().split()[1:]; stat.append([int(x)-int(y) for x,y in zip(st1,st0)]); b = snap(ts); pb = {p: int(open(p).read().split()[0]) for k,p in ts if k=='p'}
    busy = max(pb, key=lambda p: pb[p]-pa[p]); seq.append(((t1-t0)*1000, busy.split('/')[2], (pb[busy]-pa[busy])/1e6))
    rows.append(((t1-t0)*1000, (b['f'][0]-a['f'][0])/1e6, (b['f'][1]-a['f'][1])/1e6, (b['p'][0]-a['p'][0])/1e6, (b['p'][1]-a['p'][1])/1e6))
srv.terminate(); srv.wait()
print(' '.join('%d:%s:%.0f' % (w, p[-3:], c) for w,p,c in seq[:120]))
walls=[r[0] for r in rows]
order=sorted(range(len(rows)), key=lambda i: walls[i])
def agg(idx):
    tot=[sum(stat[i][j] for i in idx) for j in range(8)]
    w=sum(walls[i] for i in idx)
    print('n',len(idx),'wall ms',round(w),'user',tot[0]*10,'sys',tot[2]*10,'idle',tot[3]*10,'iowait',tot[4]*10,'irq+softirq',(tot[5]+tot[6])*10,'steal',tot[7]*10, 'own cpu', round(sum(rows[i][1]+rows[i][3] for i in idx)))
agg(order[:len(order)//2]); agg(order[-len(order)//5:])
rows.sort()
import statistics
def show(label, rs):
    if not rs: return
    print(label, len(rs), 'wall %.1f findmy cpu %.1f wait %.2f pg cpu %.1f wait %.2f' % tuple(statistics.median([r[i] for r in rs]) for i in range(5)))
show('fast half', rows[:n//2]); show('slow 20%', rows[-n//5:]); show('slowest 5%', rows[-n//20:])
