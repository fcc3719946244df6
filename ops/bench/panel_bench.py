#!/usr/bin/python3
"""The web panel's page times over HTTP (server work + transfer, not browser rendering): /find-my for a
user with 100 devices, one device selected, and a 30-day history at a 5-minute cadence (8,600 fixes).
Usage: ops/bench/panel_bench.py "$(swift build -c release --show-bin-path)/findmy" [--browser LOADS]
[--baseline OTHER_FINDMY]. With --browser, also opens the 30-day history and a user's 1,000 devices in
headless Chromium LOADS times after a warm-up (ops/bench/panel_browser.py) and prints one JSON object.
With --baseline, the same data is then served by OTHER_FINDMY (today's main, say) and the browser
figures are taken again in the same run, with the ratios. Run it with Debian's /usr/bin/python3
(python3-selenium). See docs/benchmarks.md.
"""
import json, os, subprocess, sys, tempfile, time, urllib.request, uuid, signal, shutil
from datetime import datetime, timedelta, timezone
B=sys.argv[1]
LOADS=int(sys.argv[sys.argv.index("--browser")+1]) if "--browser" in sys.argv else 0
BASE=sys.argv[sys.argv.index("--baseline")+1] if "--baseline" in sys.argv else None
FLEET=1000
d=tempfile.mkdtemp(prefix="findmy-perf-")
def user(name):
    t=[w for w in subprocess.run([B,"user","add",name,"--data-dir",d],capture_output=True,text=True).stdout.split() if len(w)==43][0]
    subprocess.run([B,"user","passwd",name,"--data-dir",d],input="bench-password\n",check=True,capture_output=True,text=True)
    return t
tok=user("alice")
# A tile server that refuses at once: tiles are not part of the figure, and no request leaves the machine.
def serve(binary):
    server=subprocess.Popen([binary,"serve","--data-dir",d,"--listen","127.0.0.1:0","--projector","on","--tile-url","http://127.0.0.1:9/{z}/{x}/{y}.png"],stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True)
    return server,server.stdout.readline().strip()
p,url=serve(B)
def call(path,token,body):
    r=urllib.request.Request(url+path,data=json.dumps(body).encode(),method="POST",headers={"Authorization":"Bearer "+token})
    return json.loads(urllib.request.urlopen(r).read())
def rfc(t): return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]+"Z"
now=datetime.now(timezone.utc)
last=0; first=None
for i in range(100):
    dev=call("/api/find-my/devices",tok,{"device_uuid":str(uuid.uuid4()),"name":"device %d"%i,"platform":"ios"})
    if first is None:
        first=dev
        fixes=[{"latitude":52.5+0.0001*k,"longitude":13.4+0.0002*(k%50),"accuracy_m":20,"source":"significant","recorded_at":rfc(now-timedelta(days=29.9)+timedelta(minutes=5*k))} for k in range(8600)]
    else:
        fixes=[{"latitude":52.5+i*0.001,"longitude":13.4,"accuracy_m":20,"source":"significant","recorded_at":rfc(now-timedelta(minutes=i))}]
    last=call("/api/find-my/report",dev["device_token"],{"batch_id":str(uuid.uuid4()),"fixes":fixes})["offset"]
if LOADS:
    import panel_browser
    carol=user("carol")
    cdev=call("/api/find-my/devices",carol,{"device_uuid":str(uuid.uuid4()),"name":"commuter","platform":"ios"})
    last=call("/api/find-my/report",cdev["device_token"],{"batch_id":str(uuid.uuid4()),"fixes":panel_browser.commuter_track(now,rfc)})["offset"]
    # A fleet: 1,000 devices with one fix each, spread over a city, ages from now to a week.
    dora=user("dora")
    for i in range(FLEET):
        fdev=call("/api/find-my/devices",dora,{"device_uuid":str(uuid.uuid4()),"name":"fleet %04d"%i,"platform":"android" if i%2 else "ios"})
        last=call("/api/find-my/report",fdev["device_token"],{"batch_id":str(uuid.uuid4()),"fixes":[{"latitude":52.4+0.2*((i*37)%100)/100,"longitude":13.2+0.4*((i*61)%100)/100,"accuracy_m":15+(i%7)*10,"battery_pct":(i*13)%100,"source":"significant","recorded_at":rfc(now-timedelta(minutes=(i*17)%10000))}]})["offset"]
urllib.request.urlopen(urllib.request.Request(url+"/api/find-my/devices?after_offset=%d"%last,headers={"Authorization":"Bearer "+tok})).read()
def timed(target,n):
    ts=[]
    for _ in range(n):
        t=time.perf_counter()
        body=urllib.request.urlopen(urllib.request.Request(url+target,headers={"Authorization":"Bearer "+tok})).read()
        ts.append((time.perf_counter()-t)*1000)
    ts.sort()
    return ts[len(ts)//2], ts[int(len(ts)*0.99)-1], len(body)
print("find-my 100 devices: p50 %.1f ms p99 %.1f ms, %d bytes"%timed("/find-my",300))
print("find-my selected (cadence): p50 %.1f ms p99 %.1f ms, %d bytes"%timed("/find-my?selected=%d"%first["device_id"],100))
rng="/find-my?selected=%d&from=%s&to=%s"%(first["device_id"],rfc(now-timedelta(days=30)),rfc(now+timedelta(hours=1)))
hist=timed(rng,20)
print("30-day history (8600 fixes) page: p50 %.1f ms p99 %.1f ms, %d bytes"%hist)
if LOADS:
    cfrom,cto=rfc(now-timedelta(days=30)),rfc(now+timedelta(hours=1))
    cases={"synthetic": ("alice","/find-my?selected=%d"%first["device_id"],rng,hist),
           "commuter": ("carol","/find-my?selected=%d"%cdev["device_id"],"/find-my?selected=%d&from=%s&to=%s"%(cdev["device_id"],cfrom,cto),None)}
    result={"load_average":os.getloadavg(),"this":panel_browser.run(url,LOADS,cases)}
    result["this"]["fleet"]=panel_browser.fleet(url,LOADS,"dora",FLEET)
    if BASE:
        p.send_signal(signal.SIGTERM); p.wait(30)
        p,url=serve(BASE)
        urllib.request.urlopen(urllib.request.Request(url+"/api/find-my/devices?after_offset=%d"%last,headers={"Authorization":"Bearer "+tok})).read()
        result["baseline"]=panel_browser.run(url,LOADS,cases)
        result["baseline"]["fleet"]=panel_browser.fleet(url,LOADS,"dora",FLEET)
        result["ratios_p50_this_to_baseline"]=panel_browser.ratios(result["this"],result["baseline"])
    result["load_average_after"]=os.getloadavg()
    print(json.dumps(result,indent=1))
p.send_signal(signal.SIGTERM); p.wait(30)
# As root the cluster ran as an OS user made for this data directory (docs/postgres.md): it goes too.
pg=os.path.realpath(d+"/postgres")
owner=subprocess.run(["stat","-c","%U",pg+"/data/PG_VERSION"],capture_output=True,text=True).stdout.strip()
if pg!=d+"/postgres": shutil.rmtree(pg,ignore_errors=True)
shutil.rmtree(d,ignore_errors=True)
if owner.startswith("findmy-"): subprocess.run(["userdel",owner],capture_output=True)
