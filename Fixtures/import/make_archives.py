#!/usr/bin/env python3
"""Writes the .kmz and .zip fixtures of Fixtures/import from the text fixtures beside them.

The archives are committed (each is a few kilobytes); run this again after changing a KML fixture.
Entries carry a fixed date so that the output is the same on every run.
"""
import os
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATE = (2024, 1, 1, 0, 0, 0)


def write(path, entries):
    """entries: (name, bytes or None for a directory, compression) in order."""
    with zipfile.ZipFile(os.path.join(HERE, path), "w") as archive:
        for name, data, compression in entries:
            info = zipfile.ZipInfo(name, date_time=DATE)
            info.compress_type = compression
            if data is None:
                info.external_attr = 0o40755 << 16 | 0x10
                archive.writestr(info, b"")
            else:
                info.external_attr = 0o100644 << 16
                archive.writestr(info, data)


def read(name):
    with open(os.path.join(HERE, name), "rb") as file:
        return file.read()


DEFLATED, STORED = zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED
ICON = bytes(range(64))  # stands for an icon: any bytes that are not KML

# A KMZ whose first entry is not KML, then the document, then a second KML that is not read.
write("kmz/track.kmz", [
    ("files/", None, STORED),
    ("files/icon.png", ICON, STORED),
    ("doc.kml", read("kml/track.kml"), DEFLATED),
    ("other.kml", read("kml/placemarks.kml"), DEFLATED),
])
write("kmz/no-kml.kmz", [("files/icon.png", ICON, STORED)])
whole = read("kmz/track.kmz")
with open(os.path.join(HERE, "kmz/truncated.kmz"), "wb") as file:
    file.write(whole[: whole.index(b"doc.kml") + 200])  # within doc.kml's deflated bytes

# A Takeout archive's shape (the entries' names as Google writes them), with small made-up files.
RECORDS = b"""{"locations": [{"latitudeE7": 525200000, "longitudeE7": 134050000, "accuracy": 20,
  "timestamp": "2019-07-01T09:00:00.000Z"}]}
"""
SEMANTIC = b"""{"timelineObjects": []}
"""
write("zip/takeout.zip", [
    ("Takeout/", None, STORED),
    ("Takeout/archive_browser.html", b"<html><body>Archive</body></html>\n", DEFLATED),
    ("Takeout/Location History/Records.json", RECORDS, DEFLATED),
    ("Takeout/Location History/Semantic Location History/2019/2019_JULY.json", SEMANTIC, STORED),
])

# A Takeout-like archive of every kind the import reads from a zip, with files of no format between.
write("zip/takeout-mixed.zip", [
    ("Takeout/Location History/Settings.json", b'{"deviceSettings": []}\n', DEFLATED),
    ("Takeout/Location History/Records.json", RECORDS, DEFLATED),
    ("Takeout/Location History/Semantic Location History/2019/2019_MAY.json",
     read("google-semantic/2019_MAY.json"), DEFLATED),
    ("Timeline.json", read("google-timeline/Timeline.json"), DEFLATED),
    ("tracks/track-1.1.gpx", read("gpx/track-1.1.gpx"), DEFLATED),
    ("tracks/track.kml", read("kml/track.kml"), STORED),
    ("tracks/history.csv", read("csv/history.csv"), DEFLATED),
    ("tracks/history.geojson", read("geojson/history.geojson"), DEFLATED),
    ("icon.png", ICON, STORED),
    ("tracks/track.kmz", read("kmz/track.kmz"), STORED),
])

# A Takeout archive whose Records.json is cut short inside: the error names the entry.
write("zip/takeout-damaged.zip", [
    ("Takeout/archive_browser.html", b"<html><body>Archive</body></html>\n", DEFLATED),
    ("Takeout/Location History/Records.json", read("google-records/truncated.json"), DEFLATED),
])

# A bomb: 20 MiB of one byte, about 20 KB deflated (a ratio near deflate's ceiling of 1030).
write("zip/bomb.zip", [("bomb.gpx", b"\0" * (20 << 20), DEFLATED)])

# Not a zip at all.
with open(os.path.join(HERE, "zip/not-a-zip.zip"), "wb") as file:
    file.write(b"PK but then nothing an archive reader would take\n")
