#!/usr/bin/env python3
"""The Overland batch ids pinned by Tests/ClientsTests/OverlandBatchIDTests.swift, computed apart
from the Swift code: SHA-256 over the encoding that `AppBatch.encodedForBatchID`
(Sources/Clients/AppBatch.swift) documents, of the batches those test bodies decode to, cut to a
version-4-shaped UUID. Run: python3 ops/tests/overland-batch-ids.py
"""
import hashlib, struct, datetime
def micros(text):
    d = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp()) * 1_000_000
def bits(x): return struct.pack("<d", x)
def text(s):
    b = s.encode(); return struct.pack("<I", len(b)) + b
def fix(index, t, lat, lon, acc=None, alt=None, speed=None, heading=None, battery=None, charging=None, source="track"):
    out = struct.pack("<Iq", index, t) + bits(lat) + bits(lon)
    presence = 0
    for i, v in enumerate([acc, alt, speed, heading, battery]):
        if v is not None: presence |= 1 << i
    if charging is not None: presence |= 0b1100000 if charging else 0b0100000
    out += bytes([presence])
    for v in [acc, alt, speed, heading, battery]:
        if v is not None: out += bits(v)
    return out + text(source)
def batch_id(device, protocol, fixes, rejections):
    data = struct.pack("<QBB", device, protocol, 1) + struct.pack("<I", len(fixes)) + b"".join(fixes)
    data += struct.pack("<I", len(rejections))
    for index, code, detail in rejections:
        data += struct.pack("<I", index) + text(code) + text(detail)
    d = bytearray(hashlib.sha256(data).digest()[:16])
    d[6] = (d[6] & 0x0F) | 0x40
    d[8] = (d[8] & 0x3F) | 0x80
    h = d.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", len(data)

fixes = [
    fix(0, micros("2026-12-01T08:00:00Z"), 52.5200456, 13.4050123, acc=5.0, alt=34.5, speed=1.25, heading=90.0, battery=0.57 * 100, charging=True),
    fix(1, micros("2026-12-01T08:01:00Z"), 52.521, 13.406),
    fix(3, micros("2026-12-01T07:30:00Z"), 52.53, 13.41, acc=65.0, source="visit"),
]
rejections = [(4, "missing_field", "properties: a location needs a properties object")]
print("full", batch_id(7, 3, fixes, rejections))
print("one", batch_id(0x0123456789ABCDEF, 3, [fix(0, micros("2026-12-01T08:00:00Z"), 52.5, 13.4, acc=10.0)], []))
print("rejection only", batch_id(7, 3, [], [(0, "not_an_object", "a location must be a GeoJSON Feature object, found number")]))
