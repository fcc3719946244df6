#!/usr/bin/env python3
"""A local fake of headscale's node API (GET /api/v1/node) for Tests/PresenceTests and the
end-to-end tests: plain HTTP on 127.0.0.1, answers taken from Fixtures/headscale.

    fake_headscale.py serve --dir D [--key KEY] [--fixture NAME] [--fixtures DIR]

Listens on a free port and prints `READY <port>`. Every request is printed as `REQ <json>`
(path, whether the Authorization header carried the key). Without `Authorization: Bearer KEY`
it answers 401 like headscale. Commands on stdin, each acknowledged with `OK <command>`:
    fixture NAME          serve Fixtures/headscale/NAME.json from now on
    auth ok|401|500|500-plain
                          answer every request with the node list (ok, needs the key), or refuse it
                          as headscale versions do: 401, 500 {"message": "Unauthorized"}, 500 text
    set ID online|offline [LASTSEEN]
                          override one node's `online` (and `lastSeen`: RFC 3339, or `null`)
    flap ID               node ID alternates online/offline on every request from now on, its
                          lastSeen the time of the request when it goes offline
    down                  close connections without an answer (headscale unreachable)
"""

import datetime
import http.server
import json
import os
import sys
import threading

# --fixtures DIR replaces it (a benchmark's generated node list).
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Fixtures", "headscale")


class State:
    def __init__(self, key, fixture):
        self.lock = threading.Lock()
        self.key = key
        self.fixture = fixture
        self.auth = "ok"
        self.overrides = {}
        self.flapping = {}
        self.down = False


def now_text():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_handler(state):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, body, content_type="application/json"):
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            authorized = self.headers.get("Authorization") == "Bearer " + state.key
            print("REQ " + json.dumps({"path": self.path, "authorized": authorized}), flush=True)
            with state.lock:
                if state.down:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                auth = state.auth
                fixture = state.fixture
                overrides = dict(state.overrides)
                for node_id, online in list(state.flapping.items()):
                    online = not online
                    state.flapping[node_id] = online
                    overrides[node_id] = {"online": online}
                    if not online:
                        overrides[node_id]["lastSeen"] = now_text()
                    state.overrides[node_id] = overrides[node_id]
            if self.path != "/api/v1/node":
                return self.answer(404, '{"code": 5, "message": "Not Found", "details": []}')
            if auth == "401" or (auth == "ok" and not authorized):
                return self.answer(401, "Unauthorized", "text/plain; charset=utf-8")
            if auth == "500":
                with open(os.path.join(FIXTURES, "unauthorized-500.json"), "rb") as f:
                    return self.answer(500, f.read())
            if auth == "500-plain":
                with open(os.path.join(FIXTURES, "unauthorized-500-plain.txt"), "rb") as f:
                    return self.answer(500, f.read(), "text/plain; charset=utf-8")
            with open(os.path.join(FIXTURES, fixture + ".json")) as f:
                document = json.load(f)
            for node in document.get("nodes", []):
                for key, value in overrides.get(node["id"], {}).items():
                    node[key] = value
            self.answer(200, json.dumps(document))

    return Handler


def commands(state):
    for line in sys.stdin:
        command = line.strip()
        if not command:
            continue
        words = command.split()
        with state.lock:
            if words[0] == "fixture":
                state.fixture = words[1]
                state.overrides = {}
                state.flapping = {}
            elif words[0] == "auth":
                state.auth = words[1]
            elif words[0] == "set":
                override = {"online": words[2] == "online"}
                if len(words) > 3:
                    override["lastSeen"] = None if words[3] == "null" else words[3]
                state.overrides[words[1]] = override
                state.flapping.pop(words[1], None)
            elif words[0] == "flap":
                state.flapping[words[1]] = state.overrides.get(words[1], {}).get("online", False)
            elif words[0] == "down":
                state.down = True
            elif words[0] == "up":
                state.down = False
        print("OK " + command, flush=True)
    os._exit(0)


def main():
    args = sys.argv[1:]
    if not args or args[0] != "serve":
        sys.exit(__doc__)
    options = dict(zip(args[1::2], args[2::2]))
    global FIXTURES
    FIXTURES = options.get("--fixtures", FIXTURES)
    state = State(options.get("--key", "test-api-key"), options.get("--fixture", "v0.23"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    server.daemon_threads = True
    threading.Thread(target=commands, args=(state,), daemon=True).start()
    print("READY %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
