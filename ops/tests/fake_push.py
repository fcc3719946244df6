#!/usr/bin/env python3
"""Local fakes of the push providers findmy talks to, speaking their real protocols over HTTP/2
and TLS, and checking what findmy sends. Used by Tests/PushTests and `findmy-bench push`.

    fake_push.py apns --dir D --team TEAM --key-id KID --bundle BUNDLE
    fake_push.py fcm --dir D --client-email EMAIL --project PROJECT
    fake_push.py unifiedpush --dir D

Each makes the secrets a real provider would hand out, mode 0600, in D: apns AuthKey_KID.p8 (a
PKCS#8 P-256 key, as Apple's developer site gives it), fcm service-account.json (as the Firebase
console gives it, its token_uri pointing at this fake), unifiedpush subscription.json (the
device's p256dh and auth; the private half stays here, to decrypt).
Each makes a CA and a certificate for 127.0.0.1 in D (D/ca.pem is the CA file findmy is given),
listens on a free port and prints `READY <port>`. Every request it accepts is printed as
`REQ <json>` (connection number, path, headers, the payload: APNs and FCM JSON as sent, Web Push
DECRYPTED here with python3-cryptography, an implementation independent of findmy's). A request
that breaks a rule of the protocol gets an error answer whose reason starts with `FakeCheck:`.
Behaviour on demand, by token (APNs device token / FCM token / Web Push path):
    APNs: dead-unregistered 410 Unregistered, dead-expired 410 ExpiredToken, dead-bad 400
          BadDeviceToken, busy 429 (retry-after: 7), broken 503 (no retry-after), wrong-topic 400
          DeviceTokenNotForTopic
    FCM:  dead 404 UNREGISTERED, busy 429 (retry-after: 9), unavailable 503 (retry-after: 11),
          invalid 400 INVALID_ARGUMENT with an FcmError detail (the token is not a valid FCM
          token), bad-payload 400 INVALID_ARGUMENT with a google.rpc.BadRequest field violation,
          invalid-bare 400 INVALID_ARGUMENT with no details
    Web Push: /up/dead 410, /up/gone 404, /up/busy 429 (retry-after: 5)
    Once, then accepted (a retry that succeeds), for any token or path starting with:
    APNs once-busy 429 (retry-after: 1), FCM once-unavailable 503 (retry-after: 1), Web Push
    /up/once-busy 429 (retry-after: 1), /up/once-slow 429 (retry-after: 600)
Commands on stdin, each acknowledged with `OK <command>`:
    expire-before N   APNs: a provider token with iat < N is answered 403 ExpiredProviderToken
    revoke-tokens     FCM: every access token issued so far is answered 401
    quiet             stop printing REQ lines (the benchmark counts with `stats`)
    stats             prints `STATS <json>`: requests, connections, receive times (ns) by command id
"""

import base64
import datetime
import itertools
import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.parse

import h2.config
import h2.connection
import h2.events
import h2.settings
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import NameOID
import ipaddress

lock = threading.Lock()
state = {"expire_before": None, "revoked": set(), "issued": set(), "quiet": False, "requests": 0,
         "received": {}, "connections": 0}
counter = itertools.count(1)


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def emit(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Refusal(Exception):
    def __init__(self, status, reason, headers=(), details=None, message=None):
        self.status, self.reason, self.headers = status, reason, list(headers)
        # FCM: the error's `details` and `message` when they are not the plain FcmError of `reason`.
        self.details, self.message = details, message


refused_once = set()


def refuse_once(key, status, reason, retry_after):
    """The first request for `key` is refused with Retry-After; later ones pass."""
    with lock:
        first = key not in refused_once
        refused_once.add(key)
    if first:
        raise Refusal(status, reason, [("retry-after", str(retry_after))])


def check(condition, what):
    if not condition:
        raise Refusal(400, "FakeCheck: " + what)


def make_certificates(directory):
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "findmy fake push CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    with open(os.path.join(directory, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(os.path.join(directory, "server.pem"), "wb") as f:
        f.write(leaf.public_bytes(serialization.Encoding.PEM))
    with open(os.path.join(directory, "server-key.pem"), "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


verified_jwts = {}


def verify_jwt(token, public_key, algorithm):
    """The JWT's header and claims once its signature verifies under `public_key`."""
    if token in verified_jwts:
        return verified_jwts[token]
    parts = token.split(".")
    check(len(parts) == 3, "a JWT has three parts")
    header, claims = json.loads(b64url_decode(parts[0])), json.loads(b64url_decode(parts[1]))
    signature = b64url_decode(parts[2])
    signed = (parts[0] + "." + parts[1]).encode()
    check(header.get("alg") == algorithm, "JWT alg must be " + algorithm)
    try:
        if algorithm == "ES256":
            check(len(signature) == 64, "an ES256 signature is raw R||S, 64 bytes (got %d)" % len(signature))
            der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
            public_key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
        else:
            public_key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except Refusal:
        raise
    except Exception:
        raise Refusal(403, "FakeCheck: the JWT signature does not verify with the key's public half")
    verified_jwts[token] = (header, claims)
    return header, claims


def payload_json(body):
    try:
        payload = json.loads(body)
    except Exception:
        raise Refusal(400, "FakeCheck: the payload is not JSON")
    check(isinstance(payload, dict) and payload, "the payload is a non-empty JSON object")
    check(isinstance(payload.get("command_id"), str) and len(payload["command_id"]) == 36,
          "the payload carries the command id")
    return payload


def apns_handler(args, public_key):
    def handle(headers, body, port):
        check(headers.get(":method") == "POST", "POST")
        path = headers.get(":path", "")
        check(path.startswith("/3/device/"), "path /3/device/<token>")
        token = path[len("/3/device/"):]
        auth = headers.get("authorization", "")
        if not auth:
            raise Refusal(403, "MissingProviderToken")
        check(auth.startswith("bearer "), "authorization: bearer <JWT>")
        jwt_header, claims = verify_jwt(auth[len("bearer "):], public_key, "ES256")
        check(jwt_header.get("kid") == args.key_id, "JWT kid is the key id")
        check(claims.get("iss") == args.team, "JWT iss is the team id")
        check(isinstance(claims.get("iat"), int), "JWT iat is an integer")
        check(set(claims) == {"iss", "iat"}, "JWT claims are iss and iat")
        with lock:
            expire_before = state["expire_before"]
        if expire_before is not None and claims["iat"] < expire_before:
            raise Refusal(403, "ExpiredProviderToken")
        push_type = headers.get("apns-push-type")
        topic = headers.get("apns-topic")
        priority = headers.get("apns-priority")
        check(headers.get("apns-expiration", "").isdigit(), "apns-expiration is a number")
        payload = payload_json(body)
        check(isinstance(payload.get("aps"), dict), "an aps dictionary")
        if push_type == "location":
            check(topic == args.bundle + ".location-query", "a location push's topic is <bundle>.location-query")
            check(priority == "10", "a location push has priority 10")
        elif push_type == "background":
            check(topic == args.bundle, "topic is the bundle id")
            check(priority == "5", "a background push has priority 5")
            check(payload["aps"] == {"content-available": 1}, "a background push is content-available only")
        elif push_type == "alert":
            check(topic == args.bundle, "topic is the bundle id")
            check(priority == "10", "an alert here has priority 10")
            check(isinstance(payload["aps"].get("alert"), dict), "an alert push has aps.alert")
        else:
            raise Refusal(400, "FakeCheck: unknown apns-push-type %r" % push_type)
        if token == "dead-unregistered":
            raise Refusal(410, "Unregistered")
        if token == "dead-expired":
            raise Refusal(410, "ExpiredToken")
        if token == "dead-bad":
            raise Refusal(400, "BadDeviceToken")
        if token == "busy":
            raise Refusal(429, "TooManyRequests", [("retry-after", "7")])
        if token == "broken":
            raise Refusal(503, "ServiceUnavailable")
        if token == "wrong-topic":
            raise Refusal(400, "DeviceTokenNotForTopic")
        if token.startswith("once-busy"):
            refuse_once(("apns", token), 429, "TooManyRequests", 1)
        apns_id = "%08X-0000-4000-8000-%012X" % (next(counter), 0)
        record = {"path": path, "push_type": push_type, "topic": topic, "priority": priority,
                  "payload": payload, "iat": claims["iat"], "apns_id": apns_id}
        return 200, [("apns-id", apns_id)], b"", record
    return handle


def fcm_handler(args, public_key):
    def handle(headers, body, port):
        path = headers.get(":path", "")
        check(headers.get(":method") == "POST", "POST")
        if path == "/token":
            check(headers.get("content-type") == "application/x-www-form-urlencoded", "a form")
            form = urllib.parse.parse_qs(body.decode(), strict_parsing=True)
            check(form.get("grant_type") == ["urn:ietf:params:oauth:grant-type:jwt-bearer"], "grant_type jwt-bearer")
            _, claims = verify_jwt(form["assertion"][0], public_key, "RS256")
            check(claims.get("iss") == args.client_email, "iss is the service account's email")
            check(claims.get("aud") == "https://127.0.0.1:%d/token" % port, "aud is the token endpoint")
            check(claims.get("scope") == "https://www.googleapis.com/auth/firebase.messaging", "the FCM scope")
            check(0 < claims["exp"] - claims["iat"] <= 3600, "exp at most an hour after iat")
            access = "ya29.fake-%d" % next(counter)
            with lock:
                state["issued"].add(access)
            record = {"path": path, "access_token": access}
            return 200, [("content-type", "application/json")], json.dumps(
                {"access_token": access, "expires_in": 3599, "token_type": "Bearer"}).encode(), record
        check(path == "/v1/projects/%s/messages:send" % args.project, "path /v1/projects/<project>/messages:send")
        auth = headers.get("authorization", "")
        access = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        with lock:
            known = access in state["issued"] and access not in state["revoked"]
        if not known:
            raise Refusal(401, "UNAUTHENTICATED")
        try:
            message = json.loads(body)["message"]
        except Exception:
            raise Refusal(400, "FakeCheck: {\"message\": ...}")
        check(message.get("android", {}).get("priority") == "high", "android.priority high")
        data = message.get("data", {})
        check(all(isinstance(v, str) for v in data.values()), "data values are strings")
        check(len(data.get("command_id", "")) == 36, "data carries the command id")
        check("notification" not in message, "a data message")
        token = message.get("token")
        if token == "dead":
            raise Refusal(404, "UNREGISTERED")
        if token == "busy":
            raise Refusal(429, "QUOTA_EXCEEDED", [("retry-after", "9")])
        if token == "unavailable":
            raise Refusal(503, "UNAVAILABLE", [("retry-after", "11")])
        if token == "invalid":
            raise Refusal(400, "INVALID_ARGUMENT", message="The registration token is not a valid FCM registration token")
        if token == "invalid-bare":
            raise Refusal(400, "INVALID_ARGUMENT", message="Request contains an invalid argument.", details=[])
        if token == "bad-payload":
            violation = "Invalid value at 'message.data[0].value' (TYPE_STRING), 12"
            raise Refusal(400, "INVALID_ARGUMENT", message=violation, details=[
                {"@type": "type.googleapis.com/google.rpc.BadRequest",
                 "fieldViolations": [{"field": "message.data[0].value", "description": violation}]}])
        if token.startswith("once-unavailable"):
            refuse_once(("fcm", token), 503, "UNAVAILABLE", 1)
        name = "projects/%s/messages/%d" % (args.project, next(counter))
        record = {"path": path, "token": token, "data": data, "payload": data, "access_token": access, "name": name}
        return 200, [("content-type", "application/json")], json.dumps({"name": name}).encode(), record
    return handle


def decrypt_aes128gcm(body, receiver, auth):
    """RFC 8291 / RFC 8188, written from the RFCs with python3-cryptography."""
    check(len(body) > 86, "an aes128gcm body has a header")
    salt, rs, idlen = body[:16], int.from_bytes(body[16:20], "big"), body[20]
    check(idlen == 65, "keyid is the sender's 65-byte public key")
    check(rs >= 18, "record size")
    sender_bytes = body[21:86]
    sender = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sender_bytes)
    receiver_bytes = receiver.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    shared = receiver.exchange(ec.ECDH(), sender)
    ikm = HKDF(hashes.SHA256(), 32, auth, b"WebPush: info\x00" + receiver_bytes + sender_bytes).derive(shared)
    cek = HKDF(hashes.SHA256(), 16, salt, b"Content-Encoding: aes128gcm\x00").derive(ikm)
    nonce = HKDF(hashes.SHA256(), 12, salt, b"Content-Encoding: nonce\x00").derive(ikm)
    record = body[86:]
    check(len(record) <= rs, "one record")
    try:
        plain = AESGCM(cek).decrypt(nonce, record, None)
    except Exception:
        raise Refusal(400, "FakeCheck: the payload does not decrypt")
    plain = plain.rstrip(b"\x00")
    check(plain.endswith(b"\x02"), "the last record ends with delimiter 0x02")
    return plain[:-1]


def unifiedpush_handler(args, receiver):
    auth_secret = b64url_decode(args.auth)

    def handle(headers, body, port):
        path = headers.get(":path", "")
        check(headers.get(":method") == "POST", "POST")
        check(path.startswith("/up/"), "path /up/<id>")
        check(headers.get("content-encoding") == "aes128gcm", "content-encoding aes128gcm")
        check(headers.get("ttl", "").isdigit(), "a TTL in seconds")
        check(headers.get("urgency") == "high", "urgency high")
        auth = headers.get("authorization", "")
        check(auth.startswith("vapid t="), "authorization: vapid t=..., k=...")
        parts = dict(part.strip().split("=", 1) for part in auth[len("vapid "):].split(","))
        vapid_key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64url_decode(parts["k"]))
        jwt_header, claims = verify_jwt(parts["t"], vapid_key, "ES256")
        check(jwt_header.get("typ") == "JWT", "VAPID JWT typ")
        check(claims.get("aud") == "https://127.0.0.1:%d" % port, "aud is the endpoint's origin")
        check(0 < claims.get("exp", 0) - time.time() <= 24 * 3600, "exp within 24 hours")
        check(str(claims.get("sub", "")).startswith(("mailto:", "https:")), "sub is mailto: or https:")
        if path == "/up/dead":
            raise Refusal(410, "Gone")
        if path == "/up/gone":
            raise Refusal(404, "Not Found")
        if path == "/up/busy":
            raise Refusal(429, "Too Many Requests", [("retry-after", "5")])
        if path.startswith("/up/once-busy"):
            refuse_once(("unifiedpush", path), 429, "Too Many Requests", 1)
        if path.startswith("/up/once-slow"):
            refuse_once(("unifiedpush", path), 429, "Too Many Requests", 600)
        payload = payload_json(decrypt_aes128gcm(body, receiver, auth_secret))
        location = "https://127.0.0.1:%d/m/%d" % (port, next(counter))
        record = {"path": path, "payload": payload, "vapid_k": parts["k"], "location": location}
        return 201, [("location", location)], b"", record
    return handle


def serve_connection(raw, context, handler, port):
    try:
        sock = context.wrap_socket(raw, server_side=True)
    except Exception:
        raw.close()
        return
    with lock:
        state["connections"] += 1
        connection = state["connections"]
    # h2's own header validation is most of its cost per request; the handlers check what matters.
    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=False, header_encoding="utf-8", validate_inbound_headers=False,
        normalize_inbound_headers=False, validate_outbound_headers=False, normalize_outbound_headers=False))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
    sock.sendall(conn.data_to_send())
    streams = {}
    try:
        while True:
            data = sock.recv(65536)
            received_ns = time.time_ns()
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    streams[event.stream_id] = (dict(event.headers), bytearray())
                elif isinstance(event, h2.events.DataReceived):
                    streams[event.stream_id][1].extend(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    headers, body = streams.pop(event.stream_id)
                    respond(conn, event.stream_id, headers, bytes(body), handler, port, connection, received_ns)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return
            sock.sendall(conn.data_to_send())
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    finally:
        sock.close()


def respond(conn, stream_id, headers, body, handler, port, connection, received_ns):
    try:
        try:
            status, response_headers, response_body, record = handler(headers, body, port)
        except Refusal:
            raise
        except Exception as error:  # a malformed JWT, header or body: a refusal, not a dead fake
            raise Refusal(400, "FakeCheck: malformed request: %r" % (error,))
        record["connection"] = connection
        with lock:
            state["requests"] += 1
            command = record.get("payload", {}).get("command_id")
            if command:
                state["received"][command] = received_ns
            quiet = state["quiet"]
        if not quiet:
            record["headers"] = {k: v for k, v in headers.items() if k != "authorization"}
            emit("REQ " + json.dumps(record))
    except Refusal as refusal:
        status, response_headers = refusal.status, refusal.headers
        key = "error" if "/messages:send" in headers.get(":path", "") or headers.get(":path") == "/token" else "reason"
        if key == "error":
            details = refusal.details if refusal.details is not None else [
                {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": refusal.reason}]
            response_body = json.dumps({"error": {"code": refusal.status, "status": refusal.reason,
                                                  "message": refusal.message or refusal.reason,
                                                  "details": details}}).encode()
        else:
            response_body = json.dumps({"reason": refusal.reason}).encode()
        if not state["quiet"]:
            emit("REFUSED " + json.dumps({"status": status, "reason": refusal.reason, "path": headers.get(":path")}))
    conn.send_headers(stream_id, [(":status", str(status)), ("content-length", str(len(response_body)))]
                      + response_headers, end_stream=not response_body)
    if response_body:
        conn.send_data(stream_id, response_body, end_stream=True)


def read_commands():
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        with lock:
            if words[0] == "expire-before":
                state["expire_before"] = int(words[1])
                verified_jwts.clear()
            elif words[0] == "revoke-tokens":
                state["revoked"] |= state["issued"]
            elif words[0] == "quiet":
                state["quiet"] = True
        if words[0] == "stats":
            with lock:
                stats = {"requests": state["requests"], "connections": state["connections"],
                         "received": state["received"]}
            emit("STATS " + json.dumps(stats))
        emit("OK " + line.strip())
    os._exit(0)  # stdin closed: the test that started us is gone


def main():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["apns", "fcm", "unifiedpush"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--team")
    parser.add_argument("--key-id")
    parser.add_argument("--bundle")
    parser.add_argument("--client-email")
    parser.add_argument("--project")
    args = parser.parse_args()
    make_certificates(args.dir)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]

    def secret(name, data):
        path = os.path.join(args.dir, name)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(descriptor, data)
        os.close(descriptor)

    pkcs8 = dict(encoding=serialization.Encoding.PEM, format=serialization.PrivateFormat.PKCS8,
                 encryption_algorithm=serialization.NoEncryption())
    if args.mode == "apns":
        key = ec.generate_private_key(ec.SECP256R1())
        secret("AuthKey_%s.p8" % args.key_id, key.private_bytes(**pkcs8))
        handler = apns_handler(args, key.public_key())
    elif args.mode == "fcm":
        from cryptography.hazmat.primitives.asymmetric import rsa
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        account = {"type": "service_account", "project_id": args.project, "private_key_id": "fake-key-1",
                   "private_key": key.private_bytes(**pkcs8).decode(), "client_email": args.client_email,
                   "client_id": "1", "auth_uri": "https://127.0.0.1:%d/auth" % port,
                   "token_uri": "https://127.0.0.1:%d/token" % port}
        secret("service-account.json", json.dumps(account, indent=2).encode())
        handler = fcm_handler(args, key.public_key())
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        args.auth = b64url(os.urandom(16))
        p256dh = b64url(key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint))
        secret("subscription.json", json.dumps({"p256dh": p256dh, "auth": args.auth}).encode())
        handler = unifiedpush_handler(args, key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(os.path.join(args.dir, "server.pem"), os.path.join(args.dir, "server-key.pem"))
    context.set_alpn_protocols(["h2"])
    threading.Thread(target=read_commands, daemon=True).start()
    emit("READY %d" % port)
    while True:
        raw, _ = listener.accept()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve_connection, args=(raw, context, handler, port), daemon=True).start()


if __name__ == "__main__":
    main()
