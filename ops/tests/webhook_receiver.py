#!/usr/bin/env python3
"""A local receiver of findmy's geofence notifications and found notices (webhook and ntfy), for the
end-to-end tests (Tests/EndToEndTests/GeofenceNotifyTests, FoundNoticeTests), the browser test's
"notify when found" (Tests/Browser/panel_test.py) and for trying the feature by hand.

    webhook_receiver.py receiver --dir D

Listens on 127.0.0.1 on a free port (plain HTTP/1.1) and prints `READY <port>`. Every POST is
printed as `REQ <json>`: path, headers (names lower-cased), body (text), `signature_valid` (the
X-Findmy-Signature header checked against HMAC-SHA256 of the body with the secret given, as
docs/geofences.md tells a receiver to; null when the request has no such header or no secret is
set) and the status it was answered. It answers 200, or 500 while failures are armed.
Commands on stdin, each acknowledged with `OK <command>`:
    secret S    check webhook signatures with secret S (the fence's `webhook_secret`)
    fail N      answer the next N requests 500
    hang PATH   leave requests to PATH unanswered (printed as they arrive) until `release`, or until
                the client gives up and closes the connection (then `GONE <path>` is printed)
    release     answer the requests left hanging (200)
    status T    print `HUNG T <n>`: how many hanging requests still have their client waiting (T: any
                word, to tell this answer from earlier ones)
"""

import hashlib
import hmac
import http.server
import json
import select
import socket
import sys
import threading

state = {"secret": None, "fail": 0, "hang": None, "hung": 0}
released = threading.Event()
lock = threading.Lock()
out = threading.Lock()


def emit(line):
    with out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        with lock:
            secret = state["secret"]
            failing = state["fail"] > 0
            if failing:
                state["fail"] -= 1
        signature = self.headers.get("X-Findmy-Signature")
        valid = None
        if signature is not None and secret is not None:
            expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            valid = hmac.compare_digest(expected, signature)
        status = 500 if failing else 200
        with lock:
            hang = state["hang"] is not None and self.path == state["hang"] and not released.is_set()
        emit("REQ " + json.dumps({
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
            "signature_valid": valid,
            "status": "hung" if hang else status,
        }))
        if hang and not self.hold():
            emit("GONE " + self.path)
            self.close_connection = True
            return
        answer = b'{"ok": false}' if failing else b'{"ok": true}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def hold(self):
        """Waits for `release`; False when the client closed its connection first."""
        with lock:
            state["hung"] += 1
        try:
            while not released.wait(0.05):
                readable, _, _ = select.select([self.connection], [], [], 0)
                if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                    return False
            return True
        except OSError:
            return False
        finally:
            with lock:
                state["hung"] -= 1

    def log_message(self, *args):
        pass


def commands():
    for line in sys.stdin:
        command = line.strip()
        if command.startswith("secret "):
            with lock:
                state["secret"] = command[len("secret "):]
        elif command.startswith("fail "):
            with lock:
                state["fail"] = int(command[len("fail "):])
        elif command.startswith("hang "):
            with lock:
                state["hang"] = command[len("hang "):]
            released.clear()
        elif command == "release":
            released.set()
        elif command.startswith("status "):
            with lock:
                emit("HUNG %s %d" % (command[len("status "):], state["hung"]))
        else:
            continue
        emit("OK " + command)
    # stdin closed: the test is done with us.
    server.shutdown()


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
emit("READY %d" % server.server_address[1])
threading.Thread(target=commands, daemon=True).start()
server.serve_forever()
