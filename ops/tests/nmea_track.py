#!/usr/bin/env python3
"""Writes Fixtures/agent/track.nmea: a synthetic walk for gpsfake, never a recorded one.

Sixty one-second epochs, each an RMC sentence then a GGA sentence (NMEA 0183 v2.3: RMC with its mode
indicator, GGA with fix quality 1 and HDOP), starting 2026-03-14T10:00:00Z at 52.52000 N,
13.40500 E and walking 1.4 m/s: 20 s to the north-east, 20 s to the east, 20 s to the south-east.
A checksum is the XOR of every byte between `$` and `*`, as two upper-case hex digits.

Run from the repository's root: python3 ops/tests/nmea_track.py > Fixtures/agent/track.nmea
The tests read the expected values from the file itself, so a change here needs no change there.
"""

import math

START_LATITUDE = 52.52
START_LONGITUDE = 13.405
SPEED_MPS = 1.4
KNOTS_PER_MPS = 3600 / 1852
EARTH_RADIUS_M = 6_371_000
HEADINGS_DEG = [45.0] * 20 + [90.0] * 20 + [135.0] * 20


def checksum(body: str) -> str:
    value = 0
    for byte in body.encode("ascii"):
        value ^= byte
    return f"{value:02X}"


def sentence(body: str) -> str:
    return f"${body}*{checksum(body)}\r"


def degrees_minutes(value: float, width: int, positive: str, negative: str) -> tuple[str, str]:
    hemisphere = positive if value >= 0 else negative
    value = abs(value)
    whole = int(value)
    minutes = (value - whole) * 60
    return f"{whole:0{width}d}{minutes:08.5f}", hemisphere


def main() -> None:
    print("# Name: a synthetic walk of 60 s (ops/tests/nmea_track.py), not a recorded track")
    print("# Sentences: RMC then GGA each second, 2026-03-14T10:00:00Z to 10:00:59Z")
    latitude, longitude = START_LATITUDE, START_LONGITUDE
    for second, heading in enumerate(HEADINGS_DEG):
        time = f"1000{second:02d}.00"
        lat_text, lat_hemisphere = degrees_minutes(latitude, 2, "N", "S")
        lon_text, lon_hemisphere = degrees_minutes(longitude, 3, "E", "W")
        knots = SPEED_MPS * KNOTS_PER_MPS
        altitude = 34.0 + 0.1 * (second % 5)
        print(sentence(
            f"GPRMC,{time},A,{lat_text},{lat_hemisphere},{lon_text},{lon_hemisphere},"
            f"{knots:.2f},{heading:.1f},140326,,,A"))
        print(sentence(
            f"GPGGA,{time},{lat_text},{lat_hemisphere},{lon_text},{lon_hemisphere},1,08,0.9,"
            f"{altitude:.1f},M,39.4,M,,"))
        step_radians = SPEED_MPS / EARTH_RADIUS_M
        latitude += math.degrees(step_radians * math.cos(math.radians(heading)))
        longitude += math.degrees(
            step_radians * math.sin(math.radians(heading)) / math.cos(math.radians(latitude)))


if __name__ == "__main__":
    main()
