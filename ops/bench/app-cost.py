#!/usr/bin/env python3
"""What one app request costs `findmy serve`, native report against the app's, on one server.

    ops/bench/app-cost.py BINARY SCRATCH_DIR [--app overland|owntracks] [--mode callgrind|cpu]
                          [--requests N] [--rounds R] [--connections C]

Starts BINARY serve (projector off) on SCRATCH_DIR (emptied first), enrols C devices (default 4)
and posts the same fixes in both shapes, as `findmy-bench ingest --phases APP` does:
- `--app overland` (default): 1,000 fixes a request, a native report with a fresh batch_id against
  Overland's GeoJSON features as Sources/findmy-bench/AppBench.swift writes them (the last
  location's battery level holding a fresh number, so that no request is a resend);
- `--app owntracks`: one fix a request, a native report against OwnTracks' HTTP `location` message
  as the Android app posts it (Basic credentials of the user name and the device token, its
  `X-Limit-U` and `X-Limit-D` headers, a fresh `_id` in each message).
C keep-alive connections, N requests per shape (default 20), after a warm-up of both shapes. Every
answer must be 200 (Overland's `{"result":"ok"}`, OwnTracks' `[]`).

- `--mode callgrind` (default): the server runs under valgrind's callgrind with instrumentation
  off; it is turned on around each shape's N requests and the counters dumped after them:
  instructions per request, per shape, repeatable whatever else the machine runs (PostgreSQL is
  not involved). The dumps stay in SCRATCH_DIR for callgrind_annotate.
- `--mode cpu`: the server runs natively; R rounds (default 5) of native then Overland, N requests
  each; the server's user+system CPU (/proc/PID/stat) around each shape's requests: CPU
  microseconds per request per shape, medians over the rounds.

Prints one JSON line.
"""

import argparse
import base64
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone

FIXES = 1000


def track(seed=1000):
    """1,000 fixes shaped as Workload's TrackGenerator makes them (same digits per value)."""
    rng = random.Random(seed)
    lat, lon = rng.uniform(47.5, 54.5), rng.uniform(6.0, 14.5)
    alt, heading, battery = rng.uniform(20, 400), rng.uniform(0, 360), rng.uniform(40, 100)
    t = time.time() - 3600
    fixes = []
    for _ in range(FIXES):
        t += 60 * rng.uniform(0.9, 1.1)
        heading = (heading + 15 * rng.gauss(0, 1) + 360) % 360
        speed = max(0.0, 1.2 + 0.3 * rng.gauss(0, 1))
        lat += speed * 60 / 111_320 * 0.7
        lon += speed * 60 / 71_000 * 0.7
        alt += 0.5 * rng.gauss(0, 1)
        battery = max(15.0, battery - 0.05)
        fixes.append({
            "lat": round(lat + rng.gauss(0, 1) * 3 / 111_320, 7),
            "lon": round(lon + rng.gauss(0, 1) * 3 / 71_000, 7),
            "acc": float(rng.choice([5, 8, 10, 12, 16])),
            "alt": round(alt, 1), "speed": round(speed, 2),
            "heading": round(heading, 1) % 360, "battery": int(battery),
            "time": datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
            + "%03dZ" % (int(t * 1000) % 1000),
        })
    return fixes


def dumps(value):
    return json.dumps(value, separators=(",", ":"))


def native_body(fixes):
    items = [dumps({"latitude": f["lat"], "longitude": f["lon"], "accuracy_m": f["acc"],
                    "altitude_m": f["alt"], "speed_mps": f["speed"], "heading_deg": f["heading"],
                    "battery_pct": f["battery"], "is_charging": False, "source": "significant",
                    "recorded_at": f["time"]}) for f in fixes]
    return ('{"batch_id": "', '", "fixes": [' + ",".join(items) + "]}")


def overland_body(fixes):
    # The batch id of an Overland request comes from its decoded fixes (docs/clients.md), so each
    # request differs in a fix: the last location's battery_level is 0.800 then the request's unique
    # number, 11 digits (stored as 80 %, as native's last fix).
    marker = "unique-number-of-the-request"
    sentinel = "battery-level-of-the-last-location"
    features = []
    for index, f in enumerate(fixes):
        features.append(dumps({
            "type": "Feature",
            "geometry": {"type": "Point", "coordinates": [f["lon"], f["lat"]]},
            "properties": {
                "timestamp": f["time"], "altitude": f["alt"], "speed": f["speed"],
                "course": min(359.9, f["heading"]), "horizontal_accuracy": f["acc"],
                "vertical_accuracy": 4, "speed_accuracy": 0.5, "course_accuracy": 12.5,
                "motion": ["walking"], "device_id": "bench",
                "wifi": "",
                "battery_state": "unplugged",
                "battery_level": sentinel if index == len(fixes) - 1 else f["battery"] / 100,
            },
        }))
    text = ('{"locations":[' + ",".join(features) + "]}").replace('"' + sentinel + '"', "0.800" + marker)
    at = text.index(marker)
    return (text[:at], text[at + len(marker):])


def owntracks_body(fix):
    """OwnTracks' `location` as AppBench.owntracks writes it; the fresh `_id` goes in the middle."""
    seconds = int(datetime.strptime(fix["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
                  .replace(tzinfo=timezone.utc).timestamp())
    members = (f'","topic":"owntracks/bench/phone","created_at":{seconds + 2},"batt":{fix["battery"]},'
               f'"bs":1,"acc":{int(fix["acc"])},"vac":3,"lat":{fix["lat"]},"lon":{fix["lon"]},'
               f'"alt":{int(fix["alt"])},"vel":{int(fix["speed"] * 3.6)},"cog":{int(fix["heading"])},'
               f'"tst":{seconds},"m":1,"conn":"w","tid":"ph","t":"p"}}')
    return ('{"_type":"location","_id":"', members)


# Per app: the fixes of a request, and the app's path, headers (the device token in `{token}`),
# expected answer and fresh-number maker.
APPS = {
    "overland": {"fixes": FIXES, "path": "/api/find-my/overland",
                 "headers": {"Authorization": "Bearer {token}", "Content-Type": "application/json"},
                 "answer": b'{"result":"ok"}', "unique": lambda: "%011d" % random.randrange(10**11)},
    "owntracks": {"fixes": 1, "path": "/api/find-my/owntracks",
                  "headers": {"Authorization": "Basic {basic}",
                              "Content-Type": "application/json; charset=utf-8",
                              "X-Limit-U": "bench", "X-Limit-D": "phone"},
                  "answer": b"[]", "unique": lambda: uuid.uuid4().hex[:16]},
}


def post(url, tokens, shape, requests, connections):
    host = url[len("http://"):]
    prefix, suffix = BODIES[shape]
    if shape == "native":
        path, headers, expected = "/api/find-my/report", {
            "Authorization": "Bearer {token}", "Content-Type": "application/json"}, None
        unique = lambda: str(uuid.uuid4())
    else:
        app = APPS[shape]
        path, headers, expected, unique = app["path"], app["headers"], app["answer"], app["unique"]
    counter = iter(range(requests))
    lock = threading.Lock()
    failures = []

    def worker(token):
        connection = http.client.HTTPConnection(host, timeout=600)
        basic = base64.b64encode(("bench:" + token).encode()).decode()
        sent = {name: value.format(token=token, basic=basic) for name, value in headers.items()}
        while True:
            with lock:
                if next(counter, None) is None:
                    break
            body = (prefix + unique() + suffix).encode()
            connection.request("POST", path, body, sent)
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200 or (expected is not None and answer != expected):
                failures.append((response.status, answer[:200]))
        connection.close()

    threads = [threading.Thread(target=worker, args=(token,)) for token in tokens[:connections]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit(f"{shape}: {len(failures)} requests failed, first {failures[0]}")


def server_stat(pid):
    """The server's user+system CPU ticks and minor page faults, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), int(fields[7])


def total_instructions(dump):
    with open(dump) as text:
        for line in text:
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("scratch")
    parser.add_argument("--app", choices=sorted(APPS), default="overland")
    parser.add_argument("--mode", choices=["callgrind", "cpu"], default="callgrind")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    app = args.app
    fixes = track()[:APPS[app]["fixes"]]
    fixes[-1]["battery"] = 80
    BODIES["native"] = native_body(fixes)
    BODIES[app] = overland_body(fixes) if app == "overland" else owntracks_body(fixes[0])
    binary = os.path.realpath(args.binary)
    scratch = os.path.realpath(args.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    data = scratch + "/server"
    added = subprocess.run([binary, "user", "add", "bench", "--json", "--data-dir", data],
                           capture_output=True, text=True, check=True).stdout
    user_token = json.loads([l for l in added.splitlines() if l.startswith("{")][-1])["token"]
    # The compactor's hourly run (its first 30 s after start) is no request's cost, and under
    # valgrind it would fall into one shape's window or the other's: not during the measurement.
    serve = [binary, "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--projector", "off",
             "--compact-first-run-seconds", "3600"]
    if args.mode == "callgrind":
        serve = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                 f"--callgrind-out-file={scratch}/callgrind.%p"] + serve
    out = open(scratch + "/serve.out", "w+")
    server = subprocess.Popen(serve, stdout=out, stderr=open(scratch + "/serve.log", "w"))
    try:
        url = None
        for _ in range(3000):
            out.seek(0)
            first = out.readline()
            if first.startswith("http://"):
                url = first.strip()
                break
            if server.poll() is not None:
                sys.exit("findmy serve exited; see " + scratch + "/serve.log")
            time.sleep(0.1)
        host = url[len("http://"):]
        tokens = []
        for index in range(args.connections):
            connection = http.client.HTTPConnection(host, timeout=600)
            connection.request("POST", "/api/find-my/devices", json.dumps({
                "device_uuid": "00000000-0000-4000-8000-%012d" % (index + 1),
                "name": f"bench {index}", "platform": "linux"}),
                {"Authorization": "Bearer " + user_token})
            response = connection.getresponse()
            tokens.append(json.loads(response.read())["device_token"])
        shapes = ("native", app)
        for shape in shapes:
            post(url, tokens, shape, 2 * args.connections, args.connections)
        result = {"app": app, "mode": args.mode, "requests_per_shape": args.requests,
                  "connections": args.connections, "fixes_per_request": len(fixes),
                  "body_bytes": {"native": len("".join(BODIES["native"])) + 36,
                                 app: len("".join(BODIES[app])) + len(APPS[app]["unique"]())}}
        if args.mode == "callgrind":
            control = ["callgrind_control"]
            subprocess.run(control + ["-z", str(server.pid)], capture_output=True)
            for shape in shapes:
                before = set(os.listdir(scratch))
                subprocess.run(control + ["-i", "on", str(server.pid)], capture_output=True, check=True)
                post(url, tokens, shape, args.requests, args.connections)
                subprocess.run(control + ["-i", "off", str(server.pid)], capture_output=True, check=True)
                subprocess.run(control + ["--dump=" + shape, str(server.pid)], capture_output=True, check=True)
                dump = sorted(set(os.listdir(scratch)) - before)
                dump = [name for name in dump if name.startswith("callgrind.")]
                result[shape + "_instructions_per_request"] = (
                    sum(total_instructions(scratch + "/" + name) for name in dump) // args.requests)
                result[shape + "_dump"] = [scratch + "/" + name for name in dump]
        else:
            tick = os.sysconf("SC_CLK_TCK")
            per = {shape: [] for shape in shapes}
            faults = {shape: [] for shape in shapes}
            for _ in range(args.rounds):
                for shape in shapes:
                    ticks, minflt = server_stat(server.pid)
                    post(url, tokens, shape, args.requests, args.connections)
                    ticks_after, minflt_after = server_stat(server.pid)
                    per[shape].append((ticks_after - ticks) / tick * 1e6 / args.requests)
                    faults[shape].append((minflt_after - minflt) / args.requests)
            for shape, values in per.items():
                result[shape + "_server_cpu_us_per_request"] = round(statistics.median(values))
                result[shape + "_rounds"] = [round(value) for value in values]
                result[shape + "_minor_faults_per_request"] = round(statistics.median(faults[shape]), 1)
        native = result.get("native_instructions_per_request") or result["native_server_cpu_us_per_request"]
        measured = (result.get(app + "_instructions_per_request")
                    or result[app + "_server_cpu_us_per_request"])
        result[app + "_over_native"] = round(measured / native, 3)
        # A request answered as a resend appends nothing: a figure made of such would be wrong.
        connection = http.client.HTTPConnection(host, timeout=600)
        connection.request("GET", "/metrics")
        metrics = connection.getresponse().read().decode()
        duplicates = [line for line in metrics.splitlines() if line.startswith("findmy_duplicate_batches_total ")]
        if duplicates and float(duplicates[0].split()[-1]) != 0:
            sys.exit("some requests were answered as resends: " + duplicates[0])
        result["load_average"] = os.getloadavg()[0]
        print(json.dumps(result))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# Filled in by main for the app measured: (text before the fresh number, text after it).
BODIES = {}

if __name__ == "__main__":
    main()
