#!/usr/bin/python3
"""The web panel in a real browser: headless Chromium driven by Selenium against a started
`findmy serve --projector on` with seeded data. Run by `make test` (ops/tests/browser.sh).

Each check is a step; the run stops at the first failing step (the later ones depend on it) and
prints `browser: N passed, M failed`. Screenshots go to --artifacts (default .build/artifacts/browser).
"""
import argparse
import json
import os
import pwd
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import WebDriverWait

PASSWORD = "correct horse battery"
SCRIPT_NAME = "<script>alert(1)</script>"


def coordinate_in(source, number):
    """Whether `number` (a coordinate such as "40.0") stands in `source` as a number of its own:
    not the seconds of a time ("20:50:40.012Z") nor a part of a longer number."""
    return re.search(r"(?<![\d:.])" + re.escape(number) + r"(?!\d)", source) is not None

def rfc3339(moment):
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Server:
    def __init__(self, binary, data, extra_arguments=()):
        self.binary, self.data = binary, data
        for name in ("alice", "bob", "root"):
            out = subprocess.run([binary, "user", "add", name, "--data-dir", data]
                                 + (["--admin"] if name == "root" else []),
                                 check=True, capture_output=True, text=True).stdout
            token = [word for line in out.splitlines() for word in line.split() if len(word) == 43]
            setattr(self, name + "_token", token[0])
            subprocess.run([binary, "user", "passwd", name, "--data-dir", data],
                           input=PASSWORD + "\n", check=True, capture_output=True, text=True)
        self.process = subprocess.Popen(
            [binary, "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--projector", "on",
             # A tile server that never answers: the panel must work on its plain background.
             "--tile-url", "http://127.0.0.1:9/{z}/{x}/{y}.png"] + list(extra_arguments),
            stdout=subprocess.PIPE, stderr=open(os.path.join(data, "server.log"), "w"), text=True)
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError("findmy serve did not print its URL: %r" % self.url)

    def call(self, path, token, body):
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def request(self, method, path, token, body=None):
        """Any API call: (status, JSON body) whatever the status."""
        request = urllib.request.Request(
            self.url + path, data=None if body is None else json.dumps(body).encode(), method=method,
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def enrol(self, token, name):
        return self.call("/api/find-my/devices", token,
                         {"device_uuid": str(uuid.uuid4()), "name": name, "platform": "ios", "model": "iPhone 15"})

    def report(self, device_token, fixes):
        return self.call("/api/find-my/report", device_token, {"batch_id": str(uuid.uuid4()), "fixes": fixes})

    def report_osmand(self, device_token, latitude, longitude, at):
        """One fix as Traccar Client sends it from a GPS provider: no accuracy (stored as unknown)."""
        query = urllib.parse.urlencode({"id": device_token, "lat": latitude, "lon": longitude,
                                        "timestamp": int(at.timestamp())})
        with urllib.request.urlopen(self.url + "/api/find-my/osmand?" + query, timeout=30) as response:
            if response.status != 200:
                raise RuntimeError("the OsmAnd report was answered %d" % response.status)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


class FakeHeadscale:
    """ops/tests/fake_headscale.py serving Fixtures/headscale/v0.28.json, where alice's node "alice-laptop"
    (id 1) is online. Its stdout (a line per request) is drained by a thread so it never blocks."""
    KEY = "browser-headscale-key"

    def __init__(self, directory):
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.process = subprocess.Popen(
            ["/usr/bin/python3", os.path.join(repo, "ops", "tests", "fake_headscale.py"), "serve",
             "--key", self.KEY, "--fixture", "v0.28"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.process.stdout.readline().split()
        if len(ready) != 2 or ready[0] != "READY":
            raise RuntimeError("the fake headscale did not start: %r" % ready)
        self.url = "http://127.0.0.1:%s" % ready[1]
        self.acknowledged = queue.Queue()
        threading.Thread(target=self.drain, daemon=True).start()
        self.key_file = os.path.join(directory, "headscale.key")
        descriptor = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as key:
            key.write(self.KEY + "\n")

    def drain(self):
        for line in self.process.stdout:
            if line.startswith("OK "):
                self.acknowledged.put(line[3:].strip())

    def command(self, text):
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        if self.acknowledged.get(timeout=30) != text:
            raise RuntimeError("the fake headscale did not acknowledge %r" % text)

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


class Receiver:
    """ops/tests/webhook_receiver.py on loopback: the owner's ntfy topic and webhook for "notify when
    found". Each request it got (path, headers, body) is kept, in order, by a thread draining its
    stdout; `wait_for` waits for them without sleeping."""

    def __init__(self):
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.process = subprocess.Popen(
            ["/usr/bin/python3", os.path.join(repo, "ops", "tests", "webhook_receiver.py"), "receiver"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.process.stdout.readline().split()
        if len(ready) != 2 or ready[0] != "READY":
            raise RuntimeError("the receiver did not start: %r" % ready)
        self.url = "http://127.0.0.1:%s" % ready[1]
        self.received = []
        self.changed = threading.Condition()
        threading.Thread(target=self.drain, daemon=True).start()

    def drain(self):
        for line in self.process.stdout:
            if line.startswith("REQ "):
                with self.changed:
                    self.received.append(json.loads(line[4:]))
                    self.changed.notify_all()

    def wait_for(self, count, timeout=60):
        """The requests once at least `count` arrived (fewer if `timeout` passed first)."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.received) >= count, timeout=timeout)
            return list(self.received)

    def stop(self):
        if self.process.poll() is None:
            self.process.stdin.close()  # the receiver shuts down when its stdin closes
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def fix(latitude, longitude, accuracy, at, battery=None, charging=None):
    value = {"latitude": latitude, "longitude": longitude, "accuracy_m": accuracy,
             "source": "significant", "recorded_at": rfc3339(at)}
    if battery is not None:
        value["battery_pct"] = battery
    if charging is not None:
        value["is_charging"] = charging
    return value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--findmy", default=os.environ.get("FINDMY_BIN", ".build/debug/findmy"))
    parser.add_argument("--artifacts", default=".build/artifacts/browser")
    parser.add_argument("--only", default="",
                        help="comma-separated parts of step names: run only the steps named so (and logging in)")
    arguments = parser.parse_args()
    only = [part for part in arguments.only.split(",") if part]
    os.makedirs(arguments.artifacts, exist_ok=True)
    data = tempfile.mkdtemp(prefix="findmy-browser-")
    passed, failed, skipped = [], [], []
    server = driver = other = headscale = receiver = None
    headscale_directory = tempfile.mkdtemp(prefix="findmy-browser-headscale-")
    try:
        headscale = FakeHeadscale(headscale_directory)
        server = Server(os.path.abspath(arguments.findmy), data, [
            "--headscale-url", headscale.url, "--headscale-api-key-file", headscale.key_file,
            "--headscale-poll-seconds", "1",
            # "Notify when found" sends to a receiver on loopback, which findmy refuses otherwise.
            "--allow-private-targets", "127.0.0.0/8"])
        now = datetime.now(timezone.utc)
        phone = server.enrol(server.alice_token, "Anna's phone")
        script = server.enrol(server.alice_token, SCRIPT_NAME)
        bobs = server.enrol(server.bob_token, "Bob's secret tablet")
        watch = server.enrol(server.alice_token, "Anna's watch")
        # The phone walked north for 20 fixes over the last 100 minutes; its latest: 52.52, 13.405 ± 120 m.
        track = [fix(52.50 + i * 0.001, 13.405, 30, now - timedelta(minutes=100 - i * 5), battery=90 - i)
                 for i in range(19)]
        track.append(fix(52.52, 13.405, 120, now - timedelta(minutes=3), battery=71, charging=True))
        server.report(phone["device_token"], track)
        # Nearly flat: the low-battery mark on its pin and its row.
        server.report(script["device_token"], [fix(48.85, 2.35, 3000, now - timedelta(minutes=30), battery=5)])
        # Appended before bob's report, so projected once that is.
        server.report_osmand(watch["device_token"], 48.2082, 16.3738, now - timedelta(minutes=8))
        last = server.report(bobs["device_token"], [fix(40.0, -3.7, 10, now - timedelta(minutes=1))])
        wait_projected(server, last["offset"])

        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800",
                     "--lang=en-US"):
            options.add_argument(flag)
        def new_driver():
            started = webdriver.Chrome(
                service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
            started.set_page_load_timeout(30)
            # The page itself at 1280x800: the window's frame is added to the size asked for.
            frame = started.execute_script("return window.outerHeight - window.innerHeight")
            started.set_window_size(1280, 800 + frame)
            return started

        driver = new_driver()
        # A second browser (its own cookies) for the other users: bob, then the admin.
        other = None
        passwords = {"alice": PASSWORD, "bob": PASSWORD, "root": PASSWORD}
        wait = WebDriverWait(driver, 20)
        phone_id, script_id, bobs_id = phone["device_id"], script["device_id"], bobs["device_id"]
        watch_id = watch["device_id"]

        def step(name, check):
            if only and name != "log in" and not any(part in name for part in only):
                skipped.append(name)
                return
            try:
                check()
            except Exception as error:  # noqa: BLE001 - every failure is reported, then the run stops
                failed.append(name)
                print("FAIL %s: %s: %s" % (name, type(error).__name__, error), flush=True)
                shot("failed-" + name.replace(" ", "-"))
                raise StopRun()
            passed.append(name)
            print("ok   %s" % name, flush=True)

        def shot(name):
            try:
                driver.save_screenshot(os.path.join(arguments.artifacts, name + ".png"))
            except Exception:  # noqa: BLE001
                pass

        def expect(condition, message):
            if not condition:
                raise AssertionError(message)

        def map_ready():
            wait.until(lambda d: d.execute_script(
                "return !!(window.findmyPanel && window.findmyPanel.map)"))

        def layers(device_id):
            return driver.execute_script(
                "var p = window.findmyPanel, m = p.markers[arguments[0]], c = p.circles[arguments[0]];"
                "if (!m || !c) { return null; }"
                "return {lat: m.getLatLng().lat, lng: m.getLatLng().lng, clat: c.getLatLng().lat,"
                " clng: c.getLatLng().lng, radius: c.getRadius(), onMap: p.map.hasLayer(c) && p.map.hasLayer(m)};",
                device_id)

        def log_in(browser=None, name="alice"):
            browser = browser or driver
            browser.get(server.url + "/find-my")
            WebDriverWait(browser, 20).until(lambda d: "/login" in d.current_url)
            expect(browser.find_element(By.CSS_SELECTOR, "label[for=name]").text == "Name", "labelled name field")
            if browser is driver and name == "alice":
                shot("01-login")
            browser.find_element(By.ID, "name").send_keys(name)
            browser.find_element(By.ID, "password").send_keys(passwords[name])
            browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            WebDriverWait(browser, 20).until(lambda d: d.current_url.endswith("/find-my"))

        step("log in", log_in)

        def devices_listed():
            links = driver.find_elements(By.CSS_SELECTOR, "#device-list li a")
            names = sorted(link.text for link in links)
            expect(names == sorted(["Anna's phone", "Anna's watch", SCRIPT_NAME]),
                   "alice's three devices, got %r" % names)
            expect(all(link.get_attribute("href").startswith(server.url + "/find-my?selected=") for link in links),
                   "each row is a real link")
            map_ready()
            # The first view fits every device with room for its pin: none is cut at an edge.
            cut = driver.execute_script(
                "var m = document.getElementById('map').getBoundingClientRect(), p = window.findmyPanel.markers;"
                "return Object.keys(p).filter(function (id) {"
                " var r = p[id].findmyPin.getBoundingClientRect();"
                " return r.left < m.left || r.right > m.right || r.top < m.top || r.bottom > m.bottom; });")
            expect(cut == [], "every pin is whole inside the map: %r cut (%r)" % (cut, driver.execute_script(
                "var p = window.findmyPanel; return [p.fitPadding, p.map.getSize().x, p.map.getSize().y,"
                " Object.keys(p.markers).map(function (id) { var r = p.markers[id].findmyPin.getBoundingClientRect();"
                " return [id, r.left, r.right, r.top, r.bottom]; })];")))
            shot("02-devices")

        step("see the devices", devices_listed)

        def escaped():
            try:
                text = driver.switch_to.alert.text
                raise AssertionError("an alert ran: %r" % text)
            except NoAlertPresentException:
                pass
            expect(driver.find_elements(By.XPATH, "//a[text()='%s']" % SCRIPT_NAME), "the name shows as text")
            expect(not driver.execute_script(
                "return Array.from(document.scripts).some(function (s) { return s.text === 'alert(1)'; })"),
                "no script element was created from the name")

        step("a device named <script> renders as text", escaped)

        def follow_link():
            driver.find_element(By.LINK_TEXT, "Anna's phone").click()
            wait.until(lambda d: d.current_url.endswith("/find-my?selected=%d" % phone_id))
            details = driver.find_element(By.ID, "details").text
            for expected in ("Anna's phone", "ios (iPhone 15)", "Fix taken at", "3 min ago", "± 120 m",
                             "71 %, charging", "significant", "Reporting", "Directions"):
                expect(expected in details, "details show %r: %r" % (expected, details))
            expect(driver.find_element(By.ID, "directions-geo").get_attribute("href") == "geo:52.52,13.405",
                   "a geo: link to the fix")
            expect(driver.find_element(By.ID, "directions-osm").get_attribute("href")
                   == "https://www.openstreetmap.org/directions?to=52.52%2C13.405", "an OpenStreetMap route to it")
            expect(driver.find_element(By.CSS_SELECTOR, "a[aria-current=page]").text == "Anna's phone",
                   "the selected row is marked")
            map_ready()
            shot("03-device")

        step("follow a device link: URL and details", follow_link)

        def marker_and_circle():
            state = layers(phone_id)
            expect(state is not None and state["onMap"], "a marker and a circle for the phone: %r" % state)
            expect(abs(state["lat"] - 52.52) < 1e-9 and abs(state["lng"] - 13.405) < 1e-9, "marker at the fix")
            expect(abs(state["clat"] - 52.52) < 1e-9 and abs(state["clng"] - 13.405) < 1e-9, "circle at the fix")
            expect(state["radius"] == 120, "circle radius is accuracy_m: %r" % state["radius"])
            other = layers(script_id)
            expect(other is not None and other["radius"] == 3000, "a 3 km fix draws a 3 km circle: %r" % other)

        step("marker and accuracy circle at the right place", marker_and_circle)

        def pin_state(device_id):
            return driver.execute_script(
                "var m = window.findmyPanel.markers[arguments[0]], p = m && m.findmyPin;"
                "if (!p) { return null; }"
                "var r = p.getBoundingClientRect(), name = p.querySelector('.pin-name');"
                "return {name: name.textContent, nameShown: name.offsetWidth > 0, classes: p.className,"
                " facts: p.querySelector('.pin-facts').textContent, inDom: document.body.contains(p),"
                " top: r.top, bottom: r.bottom, left: r.left, right: r.right};", device_id)

        def named_marker():
            # 1280x800: the list beside the map, the phone's pin named on the map and inside it.
            size = driver.execute_script("return [window.innerWidth, window.innerHeight]")
            expect(size == [1280, 800], "a 1280x800 page: %r" % size)
            state = pin_state(phone_id)
            expect(state and state["inDom"] and state["name"] == "Anna's phone" and state["nameShown"],
                   "the phone's pin shows its name: %r" % state)
            expect("age-live" in state["classes"] and "charging" in state["classes"],
                   "a 3-minute-old fix looks live, and charging: %r" % state)
            box = driver.execute_script(
                "var m = document.getElementById('map').getBoundingClientRect(),"
                " s = document.getElementById('sheet').getBoundingClientRect();"
                "return {top: m.top, bottom: m.bottom, left: m.left, right: m.right, sheetLeft: s.left};")
            expect(box["sheetLeft"] >= box["right"] - 1, "the list is beside the map: %r" % box)
            expect(box["top"] <= state["top"] and state["bottom"] <= box["bottom"] and box["left"] <= state["left"]
                   and state["right"] <= box["right"], "the pin is whole inside the map: %r vs %r" % (state, box))
            shot("03c-named-marker-1280x800")

        step("a marker shows its device's name", named_marker)

        def low_battery():
            row = driver.find_element(By.CSS_SELECTOR, "#device-list li[data-device-id='%d'] .battery-low" % script_id)
            expect(row.text == "battery 5 % (low)", "the row marks 5 %% as low: %r" % row.text)
            expect(not driver.find_elements(By.CSS_SELECTOR, "#device-list li[data-device-id='%d'] .battery-low"
                                            % phone_id), "71 % is not marked low")
            state = pin_state(script_id)
            expect(state and "battery-low" in state["classes"] and "5 %" in state["facts"],
                   "the pin marks the battery: %r" % state)
            driver.execute_script("window.findmyPanel.map.setView([48.85, 2.35], 12, {animate: false});")
            shot("03d-low-battery-1280x800")
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            map_ready()

        step("the low-battery mark for a device at 5 %", low_battery)

        def unknown_accuracy_layers(device_id):
            return driver.execute_script(
                "var p = window.findmyPanel, m = p.markers[arguments[0]], circles = 0;"
                "if (!m) { return null; }"
                "p.map.eachLayer(function (l) { if (l instanceof L.Circle && l.getLatLng().equals(m.getLatLng()))"
                " { circles += 1; } });"
                "return {lat: m.getLatLng().lat, lng: m.getLatLng().lng, onMap: p.map.hasLayer(m),"
                " title: m.getElement() ? m.getElement().title : '', tracked: !!p.circles[arguments[0]],"
                " circles: circles};",
                device_id)

        def unknown_accuracy():
            # The watch's latest fix came without accuracy (stored NULL): a marker, never a circle.
            for selected in (phone_id, watch_id):
                driver.get(server.url + "/find-my?selected=%d" % selected)
                map_ready()
                state = unknown_accuracy_layers(watch_id)
                expect(state is not None and state["onMap"], "a marker for the watch: %r" % state)
                expect(abs(state["lat"] - 48.2082) < 1e-9 and abs(state["lng"] - 16.3738) < 1e-9,
                       "the watch's marker at its fix: %r" % state)
                expect("accuracy unknown" in state["title"], "the marker says accuracy unknown: %r" % state)
                expect(not state["tracked"] and state["circles"] == 0, "no accuracy circle: %r" % state)
                known = layers(phone_id)
                expect(known is not None and known["onMap"] and known["radius"] == 120,
                       "the phone, whose accuracy is known, keeps its circle: %r" % known)
            details = driver.find_element(By.ID, "details").text
            expect("Anna's watch" in details and "accuracy unknown" in driver.find_element(By.ID, "accuracy").text,
                   "the watch's details say accuracy unknown: %r" % details)
            expect("±" not in details, "no ± for an unknown accuracy: %r" % details)
            shot("03b-accuracy-unknown")
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            map_ready()

        step("a fix of unknown accuracy: marker, 'accuracy unknown', no circle", unknown_accuracy)

        def not_found():
            driver.get(server.url + "/find-my?selected=%d" % bobs_id)
            text = driver.find_element(By.TAG_NAME, "body").text
            expect("Device not found" in text, "another user's device is not found")
            expect("Bob" not in text and "secret tablet" not in driver.page_source
                   and not coordinate_in(driver.page_source, "40.0"), "nothing of bob's device shows")
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            map_ready()

        step("another user's device id shows not found", not_found)

        def history():
            driver.find_element(By.LINK_TEXT, "Last 7 days").click()
            wait.until(lambda d: "from=" in d.current_url and "to=" in d.current_url)
            map_ready()
            points = driver.execute_script(
                "var t = window.findmyPanel.track; return t ? t.getLatLngs().length : 0;")
            expect(points == 20, "the track has the 20 fixes: %r" % points)
            # The raw fixes are one click away, under the stays.
            driver.find_element(By.CSS_SELECTOR, "#fixes summary").click()
            rows = driver.find_elements(By.CSS_SELECTOR, "#timeline li")
            expect(len(rows) == 20, "the timeline lists 20 fixes: %d" % len(rows))
            expect("± 30 m" in rows[0].text, "a timeline row shows its accuracy: %r" % rows[0].text)
            rows[0].send_keys("")  # focus
            driver.execute_script("arguments[0].focus();", rows[0])
            tooltip = driver.execute_script(
                "var p = window.findmyPanel.trackPoints[0]; return p.isTooltipOpen() && p.getTooltip().getContent();")
            expect(tooltip and "± 30 m" in tooltip, "focusing a row shows the point's accuracy: %r" % tooltip)
            shot("04-history")

        step("open a history range and see the track", history)

        def back():
            driver.back()
            wait.until(lambda d: d.current_url.endswith("/find-my?selected=%d" % phone_id))
            map_ready()
            expect(driver.execute_script("return window.findmyPanel.track") is None, "no track after going back")

        step("go back", back)

        def stays_and_slider():
            # A bag that stayed 40 minutes at one place, travelled 2 km north-east, and stayed 40
            # minutes at another: two stays and the move between them.
            bag = server.enrol(server.alice_token, "Anna's bag")
            start = datetime.now(timezone.utc) - timedelta(hours=3)
            home, work = (52.5000, 13.4000), (52.5150, 13.4200)
            fixes = [fix(home[0] + (i % 2) * 0.00005, home[1], 15, start + timedelta(minutes=5 * i)) for i in range(9)]
            fixes += [fix(home[0] + (work[0] - home[0]) * k / 4, home[1] + (work[1] - home[1]) * k / 4, 20,
                          start + timedelta(minutes=40 + 3 * k)) for k in range(1, 4)]
            fixes += [fix(work[0], work[1] + (i % 2) * 0.00005, 15, start + timedelta(minutes=52 + 5 * i)) for i in range(9)]
            last = server.report(bag["device_token"], fixes)
            wait_projected(server, last["offset"])
            driver.get(server.url + "/find-my?selected=%d&from=%s&to=%s" % (
                bag["device_id"], rfc3339(start - timedelta(minutes=10)), rfc3339(start + timedelta(hours=2))))
            map_ready()
            kinds = [item.get_attribute("class") for item in driver.find_elements(By.CSS_SELECTOR, "#stays li")]
            expect(kinds == ["stay", "move", "stay"], "two stays and the move between: %r" % kinds)
            first = driver.find_element(By.CSS_SELECTOR, "#stays li.stay").text
            expect(first.startswith("Stayed") and "(40 min)" in first, "a stay says its times and length: %r" % first)
            move = driver.find_element(By.CSS_SELECTOR, "#stays li.move").text
            expect(move.startswith("Moved") and " km" in move, "a move says how far: %r" % move)
            circles = driver.execute_script("return (window.findmyPanel.stays || []).length")
            expect(circles == 2, "two stay circles on the map: %r" % circles)
            expect(not driver.find_element(By.ID, "timeline").is_displayed(), "the raw fixes are folded away")
            slider = driver.find_element(By.ID, "track-slider")
            expect(slider.is_displayed(), "the time slider shows")
            def scrub(value):
                driver.execute_script(
                    "var s = document.getElementById('track-slider'); s.value = arguments[0];"
                    "s.dispatchEvent(new Event('input'));", value)
                return driver.execute_script(
                    "var p = window.findmyPanel.scrubMarker.getLatLng(); return [p.lat, p.lng];")
            at_end = scrub(slider.get_attribute("max"))
            expect(abs(at_end[0] - work[0]) < 1e-3 and abs(at_end[1] - work[1]) < 1e-3, "at the end: %r" % at_end)
            at_start = scrub("0")
            expect(abs(at_start[0] - home[0]) < 1e-3 and abs(at_start[1] - home[1]) < 1e-3,
                   "at the start: %r" % at_start)
            # 46 minutes in: half-way along the move.
            middle = scrub(str(46 * 60))
            expect(home[0] + 0.003 < middle[0] < work[0] - 0.003, "on the way: %r" % middle)
            expect(driver.find_element(By.ID, "scrub-time").text != "", "the slider says when")
            shot("04b-stays-and-slider-1280x800")
            # Pointing at a stay's circle, beside its dots, shows its times (the stays and the dots
            # share one canvas, so the dots' layer does not take the pointer's events).
            hovered = driver.execute_script("""
                var map = window.findmyPanel.map, circle = window.findmyPanel.stays[0];
                map.setView(circle.getLatLng(), 18, {animate: false});
                var canvases = map.getPanes().overlayPane.querySelectorAll("canvas");
                var at = map.latLngToContainerPoint(circle.getLatLng()), box = map.getContainer().getBoundingClientRect();
                canvases[canvases.length - 1].dispatchEvent(new MouseEvent("mousemove", {bubbles: true,
                    clientX: box.left + at.x + 0.8 * circle._radius, clientY: box.top + at.y}));
                return [canvases.length, Array.prototype.map.call(
                    document.querySelectorAll(".leaflet-tooltip"), function (e) { return e.textContent; })];""")
            expect(hovered[0] == 1 and any(text.startswith("Stayed") for text in hovered[1]),
                   "pointing at a stay shows its times: %r" % hovered)
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
            driver.refresh()
            map_ready()
            shot("04c-stays-phone-390x844")
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            map_ready()

        step("stays listed for a track with two stays, and the slider moves the marker", stays_and_slider)

        def phone_layout():
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            map_ready()
            box = driver.execute_script(
                "var m = document.getElementById('map').getBoundingClientRect(),"
                " s = document.getElementById('sheet').getBoundingClientRect();"
                "return {top: m.top, bottom: m.bottom, width: m.width, sheetTop: s.top, sheetHeight: s.height,"
                " scrolled: window.scrollY, pageHeight: document.documentElement.scrollHeight,"
                " state: document.getElementById('sheet').getAttribute('data-state')};")
            expect(box["scrolled"] == 0 and box["pageHeight"] <= 844, "the page does not scroll: %r" % box)
            expect(box["top"] < 70 and box["bottom"] >= 843 and box["width"] >= 389,
                   "the map fills the screen under a slim header: %r" % box)
            expect(box["state"] == "half" and 844 * 0.4 < box["sheetTop"] < 844 * 0.7,
                   "the sheet covers the map's lower part: %r" % box)
            state = pin_state(phone_id)
            expect(state and state["nameShown"] and box["top"] <= state["top"] and state["bottom"] <= box["sheetTop"],
                   "the phone's pin is whole in the map above the sheet: %r vs %r" % (state, box))
            shot("05a-map-first-phone-390x844")
            toggle = driver.find_element(By.ID, "sheet-toggle")
            expect(toggle.get_attribute("aria-expanded") == "false", "collapsed to start")
            toggle.click()
            wait.until(lambda d: d.find_element(By.ID, "sheet").get_attribute("data-state") == "full")
            height = lambda: driver.execute_script(
                "return document.getElementById('sheet').getBoundingClientRect().height")
            wait.until(lambda d: height() > box["sheetHeight"] + 200)
            expect(toggle.get_attribute("aria-expanded") == "true", "the button says it is expanded")
            expect("sheet=full" in driver.current_url, "the URL keeps it: %r" % driver.current_url)
            links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#device-list li a")]
            expect(all("sheet=full" in href for href in links), "and the links carry it: %r" % links)
            shot("05c-sheet-expanded-phone-390x844")
            driver.find_element(By.ID, "sheet-toggle").send_keys("\n")  # by keyboard: Enter on the button
            wait.until(lambda d: d.find_element(By.ID, "sheet").get_attribute("data-state") == "peek")
            driver.refresh()
            map_ready()
            expect(driver.find_element(By.ID, "sheet").get_attribute("data-state") == "peek",
                   "a reload keeps the sheet as it was")
            shot("05d-sheet-peek-phone-390x844")
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            map_ready()

        step("phone: the map fills the screen and the sheet expands by its control", phone_layout)

        def dark_mode():
            colours = lambda: driver.execute_script(
                "var b = getComputedStyle(document.body), p = window.findmyPanel.markers[arguments[0]].findmyPin;"
                "return [b.backgroundColor, b.color, getComputedStyle(p).backgroundColor];", phone_id)
            light = colours()
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                   {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
            try:
                dark = colours()
                expect(dark[0] == "rgb(13, 17, 23)" and dark[1] == "rgb(230, 237, 243)" and dark[2] == "rgb(22, 27, 34)",
                       "dark page and pins from the browser's preference: %r (light: %r)" % (dark, light))
                expect(light[0] == "rgb(255, 255, 255)", "light otherwise: %r" % light)
                # A visible focus on the pins too: Tab reaches the selected device's pin.
                driver.execute_script("window.findmyPanel.markers[arguments[0]].getElement().focus();", phone_id)
                outline = driver.execute_script(
                    "return getComputedStyle(window.findmyPanel.markers[arguments[0]].findmyPin).outlineStyle;", phone_id)
                expect(outline == "solid", "the focused pin is outlined: %r" % outline)
                shot("05e-dark-mode-1280x800")
            finally:
                driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

        step("dark mode from the browser's preference, and a focused pin is outlined", dark_mode)

        def phone_screenshot():
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
            driver.refresh()
            map_ready()
            width = driver.execute_script("return document.documentElement.scrollWidth")
            expect(width <= 390, "no horizontal scrolling on a phone: %r" % width)
            shot("05-device-phone-390x844")
            driver.find_element(By.ID, "new-geofence").click()
            width = driver.execute_script("return document.documentElement.scrollWidth")
            expect(width <= 390, "the geofence form fits a phone: %r" % width)
            driver.execute_script("document.getElementById('geofence-form').scrollIntoView();")
            shot("05b-geofence-form-phone-390x844")
            driver.find_element(By.ID, "geofence-cancel").click()
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            driver.refresh()
            map_ready()

        step("phone-sized device view", phone_screenshot)

        def live_update():
            driver.execute_script("window.findmyNoReload = true;")
            server.report(phone["device_token"],
                          [fix(52.53, 13.41, 45, datetime.now(timezone.utc), battery=70)])
            WebDriverWait(driver, 30).until(lambda d: (layers(phone_id) or {}).get("radius") == 45)
            state = layers(phone_id)
            expect(abs(state["lat"] - 52.53) < 1e-9 and abs(state["lng"] - 13.41) < 1e-9, "the marker moved")
            expect(driver.execute_script("return window.findmyNoReload === true"), "without a reload")
            expect("± 45 m" in driver.find_element(By.ID, "accuracy").text, "the details follow")
            expect("Live" in driver.find_element(By.ID, "live-status").text, "the status says live")
            shot("06-live")

        step("see a live update arrive", live_update)

        def locate_progress():
            # Locate now: the progress says asked, then sent through the app's report answer, then
            # answered with a new position once the phone reports in reply (docs/commands.md).
            driver.find_element(By.ID, "locate-now").click()
            progress = lambda d: d.find_element(By.ID, "command-progress").text
            WebDriverWait(driver, 30).until(lambda d: progress(d).startswith("asked "))
            carried = server.report(phone["device_token"],
                                    [fix(52.53, 13.41, 40, datetime.now(timezone.utc), battery=69)])
            expect(len(carried["commands"]) == 1 and carried["commands"][0]["kind"] == "locate",
                   "the report answer carries the locate")
            WebDriverWait(driver, 30).until(lambda d: "sent to the app" in progress(d))
            server.call("/api/find-my/report", phone["device_token"],
                        {"batch_id": str(uuid.uuid4()), "in_reply_to": carried["commands"][0]["command_id"],
                         "fixes": [fix(52.531, 13.411, 20, datetime.now(timezone.utc), battery=69)]})
            WebDriverWait(driver, 30).until(lambda d: "with a new position" in progress(d))
            expect(driver.find_element(By.ID, "command-progress").get_attribute("data-state") == "answered",
                   "the state is answered")
            WebDriverWait(driver, 30).until(
                lambda d: "located by alice" in d.find_element(By.ID, "command-log").text)
            shot("06b-locate")

        step("locate now and follow its progress", locate_progress)

        # Notify when found (docs/found-notices.md), as the owner does it: the alert targets on the
        # account page, then the button on a lost device's card; the device reports again over
        # HTTP and the receiver on loopback gets one notice per target, naming the device, while the
        # card says it went off and was delivered. At 1280x800, then again at 390x844.
        receiver = Receiver()
        tablet = {}

        def found_notices(count):
            """The receiver's requests once `count` arrived, by path: one notice per target each time."""
            received = receiver.wait_for(count)
            expect(len(received) == count, "%d requests at the receiver: %r" % (count, received))
            return ([r for r in received if r["path"] == "/anna-found"],
                    [r for r in received if r["path"] == "/found"])

        def notify_round(notices_before):
            expect(driver.find_element(By.ID, "notify-state").get_attribute("data-armed") == "false",
                   "not armed to start")
            button = driver.find_element(By.ID, "notify-when-found")
            button.click()
            # The form's answer is a new page (303 back to the device).
            wait.until(staleness_of(button))
            wait.until(lambda d: d.find_element(By.ID, "notify-state").get_attribute("data-armed") == "true")
            expect("error" not in driver.current_url, "armed without an error: %r" % driver.current_url)
            expect("Notify when found is on since" in driver.find_element(By.ID, "notify-state").text,
                   "the card says it is armed: %r" % driver.find_element(By.ID, "notify-state").text)
            expect(driver.find_element(By.ID, "notify-when-found").text == "Turn off notify when found",
                   "the button turns it off")
            driver.execute_script("window.findmyNoReload = true;")
            yield "armed"
            answer = server.report(tablet["device_token"], [fix(45.4642, 9.19, 15, datetime.now(timezone.utc))])
            topics, hooks = found_notices(notices_before + 2)
            for request in (topics[-1], hooks[-1]):
                expect(request["headers"].get("idempotency-key") == "found-d%d-o%d" % (tablet["device_id"],
                                                                                       answer["offset"]),
                       "the notice of this report: %r" % request)
            expect(topics[-1]["headers"].get("title") == "Anna's tablet was found", "ntfy names it: %r" % topics[-1])
            expect(json.loads(hooks[-1]["body"])["device_name"] == "Anna's tablet", "the webhook names it")
            # The card follows without a reload: it went off, then both targets delivered.
            delivery = lambda d: d.find_element(By.ID, "notify-delivery")
            WebDriverWait(driver, 60).until(
                lambda d: d.find_element(By.ID, "notify-state").get_attribute("data-armed") == "false"
                and delivery(d).get_attribute("data-state") == "delivered")
            state = driver.find_element(By.ID, "notify-state")
            expect(state.get_attribute("data-armed") == "false" and "went off" in state.text,
                   "the card says it went off: %r" % state.text)
            text = delivery(driver).text
            expect("ntfy: delivered" in text and "the webhook: delivered" in text, "delivered to both: %r" % text)
            expect(driver.find_element(By.ID, "notify-when-found").text == "Notify when found", "it can be armed again")
            expect(driver.execute_script("return window.findmyNoReload === true"), "without a reload")
            # Exactly one notice per target: the delivery log has settled, and nothing more arrived.
            status, log = server.request("GET", "/api/find-my/devices/%d/found-notices/deliveries"
                                         % tablet["device_id"], server.alice_token)
            expect(status == 200 and len(log["deliveries"]) == notices_before + 2
                   and all(d["state"] == "delivered" for d in log["deliveries"]), "the delivery log: %r" % log)
            expect(len(receiver.received) == notices_before + 2, "one notice per target: %r" % receiver.received)
            yield "delivered"

        def notify_when_found():
            driver.find_element(By.LINK_TEXT, "Account").click()
            wait.until(lambda d: d.current_url.endswith("/find-my/account"))
            driver.find_element(By.ID, "notify_ntfy_url").send_keys(receiver.url + "/anna-found")
            driver.find_element(By.ID, "notify_webhook_url").send_keys(receiver.url + "/found")
            driver.find_element(By.XPATH, "//button[text()='Save alert targets']").click()
            wait.until(lambda d: d.current_url.endswith("?done=targets"))
            shot("06c-alert-targets")
            # A tablet whose last fix is two days old, marked as lost.
            tablet.update(server.enrol(server.alice_token, "Anna's tablet"))
            last = server.report(tablet["device_token"],
                                 [fix(45.46, 9.18, 25, datetime.now(timezone.utc) - timedelta(days=2), battery=3)])
            wait_projected(server, last["offset"])
            status, body = server.request("POST", "/api/find-my/devices/%d/commands" % tablet["device_id"],
                                          server.alice_token, {"kind": "lost", "message": "Please call Anna"})
            expect(status in (200, 201, 202), "marked as lost: %r %r" % (status, body))
            driver.get(server.url + "/find-my?selected=%d" % tablet["device_id"])
            map_ready()
            expect("marked as lost" in driver.find_element(By.ID, "commands").text, "the card says it is lost")
            for moment in notify_round(0):
                driver.execute_script("document.getElementById('notify-state').scrollIntoView({block: 'center'});")
                shot("06d-notify-%s-1280x800" % moment)
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
            try:
                driver.get(server.url + "/find-my?selected=%d&sheet=full" % tablet["device_id"])
                map_ready()
                expect("ntfy: delivered" in WebDriverWait(driver, 30).until(
                    lambda d: d.find_element(By.ID, "notify-delivery").text),
                    "a reload shows the last notice's deliveries")
                for moment in notify_round(2):
                    driver.execute_script(
                        "document.getElementById('notify-state').scrollIntoView({block: 'center'});")
                    shot("06e-notify-%s-phone-390x844" % moment)
                width = driver.execute_script("return document.documentElement.scrollWidth")
                expect(width <= 390, "no horizontal scrolling on a phone: %r" % width)
            finally:
                driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            map_ready()

        step("notify when found: delivered to a receiver on loopback after a lost device reports again",
             notify_when_found)

        # Geofences (docs/geofences.md, "In the panel"): a bike enrolled for them alone, a fence drawn
        # by clicking the map where nothing else is, then the bike's comings and goings.
        bike, fence = {}, {}

        def fence_layer(fence_id):
            return driver.execute_script(
                "var p = window.findmyPanel, c = p.fences[arguments[0]];"
                "return c ? {lat: c.getLatLng().lat, lng: c.getLatLng().lng, radius: c.getRadius(),"
                " onMap: p.map.hasLayer(c)} : null;", fence_id)

        def draft_layer():
            return driver.execute_script(
                "var p = window.findmyPanel, d = p.draft;"
                "return d ? {lat: d.circle.getLatLng().lat, lng: d.circle.getLatLng().lng,"
                " radius: d.circle.getRadius(), onMap: p.map.hasLayer(d.circle)} : null;")

        def field(element_id):
            return driver.find_element(By.ID, element_id)

        def draw_fence():
            bike.update(server.enrol(server.alice_token, "Anna's bike"))
            wait_projected(server, bike["offset"])
            driver.get(server.url + "/find-my")
            map_ready()
            wait.until(lambda d: "No geofences yet" in d.find_element(By.ID, "geofence-list").text)
            field("new-geofence").click()
            expect(field("geofence-form").is_displayed(), "the form opens")
            expect("drawing" in field("map").get_attribute("class"), "the map is in drawing mode")
            # An empty part of the map, then a click in its middle.
            driver.execute_script("window.findmyPanel.map.setView([52.40, 13.10], 16, {animate: false});")
            expected = driver.execute_script(
                "var m = window.findmyPanel.map, p = m.containerPointToLatLng(m.getSize().divideBy(2));"
                "return [p.lat, p.lng];")
            ActionChains(driver).move_to_element_with_offset(field("map"), 0, 0).click().perform()
            wait.until(lambda d: d.find_element(By.ID, "geofence-latitude").get_attribute("value") != "")
            latitude = float(field("geofence-latitude").get_attribute("value"))
            longitude = float(field("geofence-longitude").get_attribute("value"))
            # Within a few pixels (1.5 m each at this zoom) of the map's middle.
            expect(abs(latitude - expected[0]) < 1e-4 and abs(longitude - expected[1]) < 1e-4,
                   "the centre is where the click was: %r vs %r" % ((latitude, longitude), expected))
            draft = draft_layer()
            expect(draft and draft["onMap"] and draft["radius"] == 150 and abs(draft["lat"] - latitude) < 1e-6,
                   "a 150 m circle drawn at the click: %r" % draft)
            # The handle on the circle's edge, dragged 60 px outwards (in two moves, a frame apart, as a hand does).
            handle = driver.find_element(By.CSS_SELECTOR, ".geofence-handle")
            ActionChains(driver).click_and_hold(handle).move_by_offset(30, 0).pause(0.3) \
                .move_by_offset(30, 0).pause(0.3).release().perform()
            dragged = float(field("geofence-radius").get_attribute("value"))
            draft = draft_layer()
            expect(180 < dragged < 300, "dragging the handle 60 px out grows the radius: %r" % dragged)
            expect(draft["radius"] == dragged, "the circle follows the handle: %r vs %r" % (draft, dragged))
            expect(abs(draft["lat"] - latitude) < 1e-6 and abs(draft["lng"] - longitude) < 1e-6 and
                   float(field("geofence-longitude").get_attribute("value")) == longitude,
                   "the drag moved no centre: %r vs %r" % (draft, (latitude, longitude)))
            # While drawing, a device's marker is a place to centre on, not a link away from the form.
            at = driver.execute_script("var m = window.findmyPanel.markers[arguments[0]];"
                                       "m.fire('click'); return m.getLatLng().lat;", phone_id)
            wait.until(lambda d: d.find_element(By.ID, "geofence-latitude").get_attribute("value") == "%.6f" % at)
            expect(driver.current_url.endswith("/find-my") and field("geofence-form").is_displayed(),
                   "still on the form: %r" % driver.current_url)
            field("geofence-latitude").clear()
            field("geofence-latitude").send_keys(str(latitude))
            field("geofence-longitude").clear()
            field("geofence-longitude").send_keys(str(longitude))
            draft = draft_layer()
            expect(abs(draft["lat"] - latitude) < 1e-6 and abs(draft["lng"] - longitude) < 1e-6,
                   "typing the centre moves the circle back: %r" % draft)
            fence.update(latitude=latitude, longitude=longitude)
            shot("11-geofence-drawn")

        step("draw a geofence: click the map for the centre, drag the radius", draw_fence)

        def fence_error():
            field("geofence-name").send_keys("Home")
            field("geofence-radius").clear()
            field("geofence-radius").send_keys("5")
            driver.find_element(By.CSS_SELECTOR, "input[name=device][value='%d']" % bike["device_id"]).click()
            field("geofence-save").click()
            wait.until(lambda d: d.find_element(By.ID, "geofence-error").is_displayed())
            error = field("geofence-error").text
            expect("radius_m must be between 10 and 100000 metres" in error, "the API's message: %r" % error)
            expect(field("geofence-form").is_displayed(), "the form stays open to correct it")
            status, body = server.request("GET", "/api/find-my/geofences", server.alice_token)
            expect(status == 200 and body["geofences"] == [], "nothing saved: %r" % body)
            shot("12-geofence-error")

        step("a geofence the API refuses shows its error", fence_error)

        def save_fence():
            field("geofence-radius").clear()
            field("geofence-radius").send_keys("200")
            field("geofence-save").click()
            wait.until(lambda d: not d.find_element(By.ID, "geofence-form").is_displayed())
            wait.until(lambda d: "Home" in d.find_element(By.ID, "geofence-list").text)
            listed = field("geofence-list").text
            expect("200 m" in listed and "Anna's bike" in listed, "listed with radius and devices: %r" % listed)
            expect("Saved “Home”." in field("geofence-status").text, "says it is saved")
            status, body = server.request("GET", "/api/find-my/geofences", server.alice_token)
            expect(status == 200 and len(body["geofences"]) == 1, "one fence: %r" % body)
            saved = body["geofences"][0]
            expect(saved["name"] == "Home" and saved["radius_m"] == 200 and saved["device_ids"] == [bike["device_id"]]
                   and abs(saved["latitude"] - fence["latitude"]) < 1e-6
                   and abs(saved["longitude"] - fence["longitude"]) < 1e-6, "as drawn: %r" % saved)
            fence.update(saved)
            drawn = fence_layer(saved["geofence_id"])
            expect(drawn and drawn["onMap"] and drawn["radius"] == 200 and abs(drawn["lat"] - saved["latitude"]) < 1e-9,
                   "drawn on the map: %r" % drawn)
            expect(draft_layer() is None and "drawing" not in field("map").get_attribute("class"), "the draft is gone")
            driver.refresh()
            map_ready()
            wait.until(lambda d: "Home" in d.find_element(By.ID, "geofence-list").text)
            drawn = fence_layer(saved["geofence_id"])
            expect(drawn and drawn["onMap"] and drawn["radius"] == 200, "drawn after a reload: %r" % drawn)
            shot("13-geofence-saved")

        step("save a geofence: listed and drawn", save_fence)

        def fence_name_as_text():
            # A fence's name is its owner's text: on the map's tooltip it is shown, never run as HTML.
            name = '<img src=x onerror="window.fenceNameRan=1">Shed'
            status, body = server.request("POST", "/api/find-my/geofences", server.alice_token, {
                "name": name, "latitude": 52.41, "longitude": 13.11, "radius_m": 100,
                "device_ids": [bike["device_id"]]})
            expect(status == 201, "created: %r" % body)
            fence_id = body["geofence_id"]
            driver.refresh()
            map_ready()
            wait.until(lambda d: "Shed" in d.find_element(By.ID, "geofence-list").text)
            shown = driver.execute_script(
                "var c = window.findmyPanel.fences[arguments[0]], t = c.getTooltip();"
                "c.openTooltip(); var n = t.getElement();"
                "return {text: n.textContent, images: n.getElementsByTagName('img').length,"
                " ran: !!window.fenceNameRan};", fence_id)
            expect(shown["text"] == name and shown["images"] == 0 and not shown["ran"],
                   "the tooltip shows the name as text: %r" % shown)
            status, body = server.request("DELETE", "/api/find-my/geofences/%d" % fence_id, server.alice_token)
            expect(status in (200, 204), "deleted: %r" % body)
            driver.refresh()
            map_ready()
            wait.until(lambda d: "Shed" not in d.find_element(By.ID, "geofence-list").text)

        step("a geofence's name on the map is text, not HTML", fence_name_as_text)

        def edit_fence():
            driver.find_element(By.CSS_SELECTOR, "button[aria-label='Edit Home']").click()
            expect(field("geofence-form").is_displayed(), "the form opens")
            expect(field("geofence-name").get_attribute("value") == "Home", "filled in")
            field("geofence-radius").clear()
            field("geofence-radius").send_keys("250")
            field("geofence-save").click()
            wait.until(lambda d: "250 m" in d.find_element(By.ID, "geofence-list").text)
            status, body = server.request("GET", "/api/find-my/geofences/%d" % fence["geofence_id"], server.alice_token)
            expect(status == 200 and body["radius_m"] == 250, "changed by the API: %r" % body)
            drawn = fence_layer(fence["geofence_id"])
            expect(drawn and drawn["radius"] == 250, "redrawn: %r" % drawn)

        step("edit a geofence's radius", edit_fence)

        def timeline_transitions():
            # Out, in, out, reported together now (late, as after an offline morning), then in, at once.
            now = datetime.now(timezone.utc)
            far = fence["latitude"] + 0.03  # about 3.3 km north
            server.report(bike["device_token"], [
                fix(far, fence["longitude"], 20, now - timedelta(hours=4)),
                fix(fence["latitude"], fence["longitude"], 15, now - timedelta(hours=3)),
                fix(far, fence["longitude"], 25, now - timedelta(hours=2, minutes=30))])
            # The bike's own view, as OwnTracks reports a region it was given (docs/geofences.md).
            status, _ = server.request("POST", "/api/find-my/owntracks", bike["device_token"], {
                "_type": "transition", "event": "leave", "desc": "Office", "t": "c", "wtst": 1, "tid": "bk",
                "tst": int((now - timedelta(hours=2)).timestamp()), "lat": far, "lon": fence["longitude"], "acc": 30})
            expect(status == 200, "OwnTracks took the transition: %d" % status)
            last = server.report(bike["device_token"],
                                 [fix(fence["latitude"], fence["longitude"], 12, datetime.now(timezone.utc))])
            status, body = server.request(
                "GET", "/api/find-my/geofences/%d/transitions?after_offset=%d" % (fence["geofence_id"], last["offset"]),
                server.alice_token)
            expect(status == 200 and [t["event"] for t in body["transitions"]] == ["enter", "leave", "enter"],
                   "the server found them: %r" % body)
            wait_projected(server, last["offset"])  # the main projection too: the page shows the bike's position
            driver.get(server.url + "/find-my?selected=%d" % bike["device_id"])
            map_ready()
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#transition-list li")) == 4)
            # The card says where the latest fix is, from the reader's geofences.
            wait.until(lambda d: d.find_element(By.ID, "at-place").is_displayed())
            expect(field("at-place").text == "at Home", "the card names the fence: %r" % field("at-place").text)
            rows = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "#transition-list li")]
            kinds = [row.get_attribute("class") for row in driver.find_elements(By.CSS_SELECTOR, "#transition-list li")]
            # Newest first, as the API answers.
            expect(kinds == ["server-view", "device-view", "server-view", "server-view"], "the sources: %r" % kinds)
            expect(rows[0].startswith("entered Home at ") and "known at" not in rows[0] and "± 12 m" in rows[0],
                   "one known at once says only when: %r" % rows[0])
            expect(rows[1].startswith("the device says: left Office at ") and ", known at " in rows[1]
                   and "± 30 m" in rows[1], "the device's own report, marked as its view: %r" % rows[1])
            expect(rows[2].startswith("left Home at ") and ", known at " in rows[2] and "± 25 m" in rows[2],
                   "a late leave says when it was known: %r" % rows[2])
            expect(rows[3].startswith("entered Home at ") and ", known at " in rows[3] and "± 15 m" in rows[3],
                   "a late enter says when it was known: %r" % rows[3])
            driver.execute_script("document.getElementById('transitions').scrollIntoView();")
            shot("14-transitions")

        step("a device's transitions on its timeline", timeline_transitions)

        def delete_fence():
            driver.get(server.url + "/find-my")
            map_ready()
            wait.until(lambda d: "Home" in d.find_element(By.ID, "geofence-list").text)
            expect(fence_layer(fence["geofence_id"]) is not None, "drawn before")
            driver.find_element(By.CSS_SELECTOR, "button[aria-label='Delete Home']").click()
            confirm = driver.find_element(By.CSS_SELECTOR, "#geofence-list .confirm")
            expect("cannot be undone" in confirm.text, "asks first: %r" % confirm.text)
            status, body = server.request("GET", "/api/find-my/geofences", server.alice_token)
            expect(len(body["geofences"]) == 1, "nothing deleted before the confirmation")
            shot("15-geofence-delete-confirm")
            field("geofence-delete-confirm").click()
            wait.until(lambda d: "No geofences yet" in d.find_element(By.ID, "geofence-list").text)
            expect("Deleted “Home”." in field("geofence-status").text, "says it is deleted")
            expect(fence_layer(fence["geofence_id"]) is None, "no longer drawn")
            status, body = server.request("GET", "/api/find-my/geofences", server.alice_token)
            expect(status == 200 and body["geofences"] == [], "deleted by the API: %r" % body)

        step("delete a geofence after confirming", delete_fence)

        def presence():
            laptop = server.enrol(server.alice_token, "Anna's laptop")
            wait_projected(server, laptop["offset"])
            deadline = time.time() + 60
            while True:  # the first poll of the fake headscale must have been answered
                status, body = server.request("PUT", "/api/find-my/devices/%d/presence" % laptop["device_id"],
                                              server.alice_token, {"headscale_node": "alice-laptop"})
                if status == 200 or time.time() > deadline:
                    break
                time.sleep(0.2)
            expect(status == 200, "linked: %d %r" % (status, body))
            driver.get(server.url + "/find-my")
            map_ready()
            row = lambda d: d.find_element(By.CSS_SELECTOR, "#device-list li[data-device-id='%d']" % laptop["device_id"]).text
            expect("online on the tailnet" in row(driver), "the row says online: %r" % row(driver))
            driver.execute_script("window.findmyNoReload = true;")
            headscale.command("set 1 offline " + rfc3339(datetime.now(timezone.utc) - timedelta(hours=2)))
            WebDriverWait(driver, 60).until(lambda d: "offline, last seen 2 h ago" in row(d))
            expect(driver.execute_script("return window.findmyNoReload === true"), "without a reload")
            shot("16-presence-list")
            driver.find_element(By.LINK_TEXT, "Anna's laptop").click()
            wait.until(lambda d: d.current_url.endswith("/find-my?selected=%d" % laptop["device_id"]))
            detail = field("presence").text
            expect(detail.startswith("offline, last seen 2 h ago"), "the details say the same: %r" % detail)
            expect("reachable, not where it is" in field("presence-note").text, "and what it cannot tell")
            shot("17-presence-device")

        step("presence from the tailnet in the list and the details", presence)

        def device_names(browser):
            return [link.text for link in browser.find_elements(By.CSS_SELECTOR, "#device-list li a")]

        def share_and_revoke():
            nonlocal other
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            driver.find_element(By.ID, "settings-link").click()
            wait.until(lambda d: d.current_url.endswith("/find-my/devices/%d/settings" % phone_id))
            expect("On: the device reports" in driver.find_element(By.ID, "paused").text, "pause switch shown")
            driver.find_element(By.ID, "share-user").send_keys("bob")
            driver.find_element(By.CSS_SELECTOR, "form[action$='/shares'] button[type=submit]").click()
            wait.until(lambda d: d.current_url.endswith("?done=shared"))
            expect("The device is shared." in driver.find_element(By.ID, "flash").text, "flash after sharing")
            expect("bob" in driver.find_element(By.ID, "shares").text, "the share is listed")
            shot("08-settings-shared")
            other = new_driver()
            log_in(other, "bob")
            expect("Anna's phone" in device_names(other), "bob sees the shared device: %r" % device_names(other))
            other.get(server.url + "/find-my/admin")
            expect("Administrators only" in other.find_element(By.TAG_NAME, "body").text, "a member gets 403")
            driver.find_element(By.CSS_SELECTOR, "#shares button[type=submit]").click()
            wait.until(lambda d: d.current_url.endswith("?done=revoked"))
            expect("no longer sees" in driver.find_element(By.ID, "flash").text, "flash after revoking")
            other.get(server.url + "/find-my")
            expect("Anna's phone" not in device_names(other), "gone for bob: %r" % device_names(other))

        step("add and revoke a share: the device appears and disappears for bob", share_and_revoke)

        def erase_history():
            driver.find_element(By.CSS_SELECTOR, "form[action$='/erase'] button[type=submit]").click()
            wait.until(lambda d: "/erase?scope=all" in d.current_url)
            expect("This cannot be undone" in driver.find_element(By.TAG_NAME, "main").text, "a confirmation step")
            shot("09-erase-confirm")
            driver.find_element(By.CSS_SELECTOR, "button.danger").click()
            wait.until(lambda d: d.current_url.endswith("?done=erased"))
            expect("history is erased" in driver.find_element(By.ID, "flash").text, "flash after erasing")
            driver.get(server.url + "/find-my?selected=%d" % phone_id)
            driver.find_element(By.LINK_TEXT, "Last 7 days").click()
            deadline = time.time() + 20
            while True:
                map_ready()
                points = driver.execute_script(
                    "var t = window.findmyPanel.track; return t ? t.getLatLngs().length : 0;")
                if points == 0 or time.time() > deadline:
                    break
                time.sleep(0.3)
                driver.refresh()
            expect(points == 0, "no track after erasing: %r points" % points)
            expect(": 0 fixes" in driver.find_element(By.ID, "range").text, "the range holds nothing")

        step("erase the history: the track is gone", erase_history)

        def track_after_refresh(browser):
            browser.refresh()
            map_ready()
            return browser.execute_script("var t = window.findmyPanel.track; return t ? t.getLatLngs().length : 0;")

        def import_history():
            # A GPX walk of 2024: three fixes with a time (a fourth point has none), all older than the
            # 30-day window. "Check first" says so and how far to widen it; once widened, the import
            # stores them and the device page draws them.
            repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            fixture = os.path.join(repo, "Fixtures", "import", "gpx", "track-1.1.gpx")
            driver.get(server.url + "/find-my/devices/%d/settings" % phone_id)
            summary = lambda d: d.find_element(By.ID, "import-summary").text
            # The script gives the summary the class "done" or "failed" once the import has ended.
            finished = lambda d: d.find_element(By.ID, "import-summary").get_attribute("class") in ("done", "failed")
            driver.find_element(By.ID, "import-file").send_keys(fixture)
            driver.find_element(By.ID, "import-check").click()
            WebDriverWait(driver, 60).until(finished)
            expect("Checked (done)" in summary(driver), "the check is done: %r" % summary(driver))
            outside = driver.find_element(By.ID, "import-outside").text
            expect(outside.startswith("3 of the fixes are older"), "the check counts 3 outside: %r" % outside)
            needed = re.search(r"at least (\d+)", outside)
            expect(needed is not None, "the check says how far to widen the window: %r" % outside)
            driver.execute_script("arguments[0].scrollIntoView();", driver.find_element(By.ID, "import-summary"))
            shot("09b-import-checked")
            days = driver.find_element(By.ID, "days")
            days.clear()
            days.send_keys(needed.group(1))
            driver.find_element(By.CSS_SELECTOR, "form[action$='/retention'] button[type=submit]").click()
            wait.until(lambda d: d.current_url.endswith("?done=retention"))
            driver.find_element(By.ID, "import-file").send_keys(fixture)
            driver.find_element(By.ID, "import-start").click()
            WebDriverWait(driver, 60).until(finished)
            text = summary(driver)
            expect("Import done." in text, "the import is done: %r" % text)
            expect(re.search(r"Stored\s+3\b", text) is not None, "3 fixes stored: %r" % text)
            expect(driver.find_elements(By.ID, "import-outside") == [], "none outside the window now: %r" % text)
            driver.execute_script("arguments[0].scrollIntoView();", driver.find_element(By.ID, "import-summary"))
            shot("09c-import-done")
            driver.get(server.url + "/find-my?selected=%d&from=2024-03-01T00:00:00Z&to=2024-03-02T00:00:00Z"
                       % phone_id)
            WebDriverWait(driver, 30).until(lambda d: track_after_refresh(d) == 3)
            expect(": 3 fixes" in driver.find_element(By.ID, "range").text, "the range holds the imported fixes")
            shot("09d-imported-track")

        step("import a GPX file from the settings page: the track is drawn", import_history)

        def download_range():
            # The range shown, as a file: the export route, authenticated by the session cookie.
            link = driver.find_element(By.CSS_SELECTOR, "#download a[data-format=gpx]")
            href = link.get_attribute("href")
            expect("/export?format=gpx&from=2024-03-01T00:00:00" in href, "the link names the range: %r" % href)
            answer = driver.execute_async_script(
                "var done = arguments[arguments.length - 1];"
                "fetch(arguments[0], {credentials: 'same-origin'}).then(function (r) {"
                " return r.text().then(function (t) { done({status: r.status, type: r.headers.get('Content-Type'),"
                " disposition: r.headers.get('Content-Disposition'), body: t}); }); })"
                ".catch(function (e) { done({status: 0, body: String(e)}); });", href)
            expect(answer["status"] == 200, "the export answers 200: %r" % answer)
            expect("attachment" in (answer["disposition"] or ""), "a download: %r" % answer["disposition"])
            expect(answer["body"].count("<trkpt") == 3, "the 3 fixes of the range: %r" % answer["body"][:400])

        step("download the range shown as GPX", download_range)

        def change_password():
            driver.find_element(By.LINK_TEXT, "Account").click()
            wait.until(lambda d: d.current_url.endswith("/find-my/account"))
            driver.find_element(By.ID, "current").send_keys(PASSWORD)
            driver.find_element(By.ID, "new").send_keys("a brand new passphrase")
            driver.find_element(By.ID, "again").send_keys("a brand new passphrase")
            driver.find_element(By.CSS_SELECTOR, "form[action$='/password'] button[type=submit]").click()
            wait.until(lambda d: d.current_url.endswith("?done=password"))
            expect("password is changed" in driver.find_element(By.ID, "flash").text, "flash after the change")
            driver.find_element(By.CSS_SELECTOR, "form.logout button").click()
            wait.until(lambda d: "/login" in d.current_url)
            passwords["alice"] = "a brand new passphrase"
            log_in()

        step("change the password, then log in with the new one", change_password)

        def admin_page():
            other.find_element(By.CSS_SELECTOR, "form.logout button").click()
            WebDriverWait(other, 20).until(lambda d: "/login" in d.current_url)
            log_in(other, "root")
            other.find_element(By.LINK_TEXT, "Admin").click()
            WebDriverWait(other, 20).until(lambda d: d.current_url.endswith("/find-my/admin"))
            users = other.find_element(By.ID, "users").text
            for name in ("alice", "bob", "root"):
                expect(name in users, "%s listed: %r" % (name, users))
            devices = other.find_element(By.ID, "devices").text
            expect("Anna's phone" in devices and "Bob's secret tablet" in devices, "devices listed: %r" % devices)
            source = other.page_source
            for position in ("52.5", "13.40", "40.0"):
                expect(not coordinate_in(source, position), "no position on the admin page: found %r" % position)
            for text in ("battery", "±"):
                expect(text not in source, "no position on the admin page: found %r" % text)
            other.save_screenshot(os.path.join(arguments.artifacts, "10-admin.png"))

        step("the admin page lists users and devices without positions", admin_page)

        def log_out():
            driver.find_element(By.CSS_SELECTOR, "form.logout button").click()
            wait.until(lambda d: "/login" in d.current_url)
            expect("You are logged out" in driver.find_element(By.TAG_NAME, "body").text, "says logged out")
            driver.get(server.url + "/find-my")
            wait.until(lambda d: "/login" in d.current_url)

        step("log out", log_out)

        def connection_lost():
            log_in()
            map_ready()
            server.stop()
            WebDriverWait(driver, 30).until(
                lambda d: "Connection to the server lost" in d.find_element(By.ID, "live-status").text)
            shot("07-connection-lost")

        step("show when the connection is lost", connection_lost)
    except StopRun:
        pass
    except Exception as error:  # noqa: BLE001 - setup failures count as a failed run
        failed.append("setup")
        print("FAIL setup: %s: %s" % (type(error).__name__, error), flush=True)
    finally:
        if driver is not None:
            driver.quit()
        if other is not None:
            other.quit()
        if server is not None:
            server.stop()
        if headscale is not None:
            headscale.stop()
        if receiver is not None:
            receiver.stop()
        shutil.rmtree(headscale_directory, ignore_errors=True)
        if server is not None:
            if failed:
                with open(os.path.join(data, "server.log")) as log:
                    print("server log (last lines):\n" + "".join(log.readlines()[-20:]))
        # The cluster may live under /var/lib/findmy (mkdtemp is private) and, as root, runs as an OS
        # user made for this data directory: both go with it.
        cluster = os.path.realpath(os.path.join(data, "postgres"))
        try:
            owner = pwd.getpwuid(os.stat(cluster + "/data/PG_VERSION").st_uid).pw_name
        except (OSError, KeyError):
            owner = ""
        if cluster != os.path.join(data, "postgres"):
            shutil.rmtree(cluster, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
        if owner.startswith("findmy-"):
            subprocess.run(["userdel", owner], capture_output=True)
    print("browser: %d passed, %d failed%s (screenshots in %s)" % (
        len(passed), len(failed), ", %d skipped (--only)" % len(skipped) if skipped else "", arguments.artifacts))
    return 1 if failed or not passed else 0


def wait_projected(server, offset):
    """Waits until the projection holds `offset` (the read API's after_offset), so pages show the seed."""
    request = urllib.request.Request(server.url + "/api/find-my/devices?after_offset=%d" % offset,
                                     headers={"Authorization": "Bearer " + server.alice_token})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


class StopRun(Exception):
    pass


if __name__ == "__main__":
    sys.exit(main())
