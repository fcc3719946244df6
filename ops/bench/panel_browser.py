"""The browser half of ops/bench/panel_bench.py --browser: opens a device's 30-day history page in
headless Chromium (Debian's chromium, chromium-driver, python3-selenium) and times each load from
navigation start (performance.timeOrigin) until the panel's script has put the map's layers, the
track included, in the DOM (`<html data-map-drawn-at>`, set by Sources/WebPanel/Resources/panel.js).
Baselines from the same run: the same device's page without history in the same browser, and the
history page's bare HTTP fetch from Python with the same session cookie.
"""
import json, math, random, re, shutil, time, urllib.request
from datetime import timedelta
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WARMUP_LOADS = 3

def commuter_track(now, rfc):
    """30 days at a 5-minute cadence (8,640 fixes) of a person who sleeps at home, drives 12 km to work
    and back on weekdays, walks at lunch, and on weekends drives 20 km to a park and walks there.
    Stationary fixes jitter by a few metres, like a phone's. Seeded, so every run sends the same."""
    rng = random.Random(6)
    home, work, park = (52.500, 13.400), (52.580, 13.520), (52.350, 13.200)
    def toward(a, b, f, bend):
        # A road is not straight: a sideways bulge of `bend` degrees in the middle.
        return (a[0] + (b[0] - a[0]) * f + bend * math.sin(math.pi * f), a[1] + (b[1] - a[1]) * f - bend * math.sin(math.pi * f))
    def loop(center, f, radius):
        return (center[0] + radius * math.sin(2 * math.pi * f), center[1] + 1.6 * radius * (1 - math.cos(2 * math.pi * f)))
    start = now - timedelta(days=30) + timedelta(minutes=1)
    fixes = []
    for slot in range(30 * 288):
        day, s = divmod(slot, 288)
        weekend = day % 7 in (5, 6)
        if not weekend and 96 <= s < 102: at, acc = toward(home, work, (s - 96) / 6, 0.02), 10
        elif not weekend and 204 <= s < 210: at, acc = toward(work, home, (s - 204) / 6, -0.02), 10
        elif not weekend and 144 <= s < 156: at, acc = loop(work, (s - 144) / 12, 0.005), 8
        elif not weekend and 102 <= s < 204: at, acc = work, 25
        elif weekend and 120 <= s < 126: at, acc = toward(home, park, (s - 120) / 6, 0.03), 10
        elif weekend and 150 <= s < 156: at, acc = toward(park, home, (s - 150) / 6, -0.03), 10
        elif weekend and 126 <= s < 150: at, acc = loop(park, (s - 126) / 24, 0.012), 8
        elif weekend and 150 <= s: at, acc = home, 20
        else: at, acc = home, 20
        lat = at[0] + rng.gauss(0, 6 / 111_000)
        lon = at[1] + rng.gauss(0, 6 / 68_000)
        fixes.append({"latitude": lat, "longitude": lon, "accuracy_m": acc, "source": "significant",
                      "recorded_at": rfc(start + timedelta(minutes=5 * slot))})
    return fixes

def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]

def summary(values):
    return {"p50_ms": round(percentile(values, 0.5), 1), "p99_ms": round(percentile(values, 0.99), 1),
            "max_ms": round(max(values), 1)}

def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800", "--lang=en-US"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    return driver

def log_in(driver, url, name):
    driver.delete_all_cookies()
    driver.get(url + "/find-my")
    WebDriverWait(driver, 20).until(lambda d: "/login" in d.current_url)
    driver.find_element(By.ID, "name").send_keys(name)
    driver.find_element(By.ID, "password").send_keys("bench-password")
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(driver, 20).until(lambda d: d.current_url.endswith("/find-my"))

# From navigation start, and from the end of parsing (`domInteractive`, after which the deferred
# scripts run: Leaflet, then the panel's) until the map's layers are in the DOM. The second is the
# drawing itself, without the server's answer and the page's transfer.
TIMING = """
    var n = performance.getEntriesByType("navigation")[0], drawn = Number(document.documentElement.dataset.mapDrawnAt);
    return {drawn: drawn, scripts_to_drawn: drawn - n.domInteractive, responseEnd: n.responseEnd,
            domContentLoaded: n.domContentLoadedEventEnd, bodyBytes: n.decodedBodySize,
            points: window.findmyPanel.trackPoints.length, markers: Object.keys(window.findmyPanel.markers).length}"""

def fleet(url, loads, name, expected):
    """A user's /find-my with `expected` devices, each a marker: until drawn, and the drawing alone."""
    driver = browser()
    try:
        log_in(driver, url, name)
        drawn, drawing = [], []
        for index in range(WARMUP_LOADS + loads):
            driver.get(url + "/find-my")
            WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.documentElement.dataset.mapDrawnAt"))
            timing = driver.execute_script(TIMING)
            if index >= WARMUP_LOADS:
                drawn.append(timing["drawn"]); drawing.append(timing["scripts_to_drawn"])
        assert timing["markers"] == expected, "every device has a marker: %r" % timing["markers"]
        return {"devices": expected, "until_drawn": summary(drawn), "scripts_to_drawn": summary(drawing),
                "page_bytes": timing["bodyBytes"], "target_250_ms_drawing_met_at_p99": summary(drawing)["p99_ms"] < 250}
    finally:
        driver.quit()

def ratios(this, baseline):
    """p50 of this build over the baseline's, for each figure both have."""
    out = {}
    for case in ("synthetic", "commuter"):
        for label in ("until_track_drawn", "until_scripts_to_drawn"):
            if label in this[case]["history"] and label in baseline[case]["history"]:
                out["%s_history_%s" % (case, label)] = round(
                    this[case]["history"][label]["p50_ms"] / baseline[case]["history"][label]["p50_ms"], 2)
    for label in ("until_drawn", "scripts_to_drawn"):
        out["fleet_" + label] = round(this["fleet"][label]["p50_ms"] / baseline["fleet"][label]["p50_ms"], 2)
    return out

def run(url, loads, cases):
    driver = browser()
    result = {"loads": loads, "warmup_loads": WARMUP_LOADS, "chromium": driver.capabilities.get("browserVersion")}
    try:
        for case, (name, plain, history, _) in cases.items():
            log_in(driver, url, name)
            out = {}
            for label, target in (("history", history), ("no_history", plain)):
                drawn, dom, fetch, drawing = [], [], [], []
                for index in range(WARMUP_LOADS + loads):
                    driver.get(url + target)  # returns after the load event
                    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.documentElement.dataset.mapDrawnAt"))
                    timing = driver.execute_script(TIMING)
                    if index >= WARMUP_LOADS:
                        drawn.append(timing["drawn"]); dom.append(timing["domContentLoaded"]); fetch.append(timing["responseEnd"])
                        drawing.append(timing["scripts_to_drawn"])
                out[label] = {"until_track_drawn": summary(drawn), "until_scripts_to_drawn": summary(drawing),
                              "until_dom_content_loaded": summary(dom),
                              "until_response_end": summary(fetch), "page_bytes": timing["bodyBytes"],
                              "points_drawn": timing["points"]}
                if label == "history":
                    text = driver.find_element(By.ID, "range").text
                    counts = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:fix|fixes|drawn)\b", text)]
                    out[label]["range_text"] = text
                    out[label]["fixes_in_range"] = counts[0] if counts else None
            cookie = "; ".join("%s=%s" % (c["name"], c["value"]) for c in driver.get_cookies())
            bare = []
            for index in range(WARMUP_LOADS + loads):
                started = time.perf_counter()
                urllib.request.urlopen(urllib.request.Request(url + history, headers={"Cookie": cookie})).read()
                if index >= WARMUP_LOADS:
                    bare.append((time.perf_counter() - started) * 1000)
            out["history_http_fetch_python"] = summary(bare)
            h = out["history"]["until_track_drawn"]["p50_ms"]
            out["ratio_p50_history_drawn_to_no_history_drawn"] = round(h / out["no_history"]["until_track_drawn"]["p50_ms"], 2)
            out["ratio_p50_history_drawn_to_http_fetch"] = round(h / out["history_http_fetch_python"]["p50_ms"], 2)
            out["target_500_ms_met_at_p99"] = out["history"]["until_track_drawn"]["p99_ms"] < 500
            result[case] = out
    finally:
        driver.quit()
    return result
