/// The panel's script, served as /static/panel.js (no inline script: the CSP forbids it). It reads
/// the page's JSON data island, draws the map (each latest fix as a marker with its accuracy
/// circle; the history track), shows times in the viewer's time zone, and polls the read API for
/// new positions. Everything works without it except the map and the live updates.
/// `window.findmyPanel` exposes the map's layers (the browser tests read them); `data-map-drawn-at` on
/// `<html>` says when they were drawn (the browser benchmark reads it).
/// Its only API call is a read (`GET /api/find-my/devices`), which the session cookie alone
/// authenticates. A change through `/api/` with the cookie would also need the session's CSRF token
/// in an `X-CSRF-Token` header (the gate answers 403 without it, docs/api.md): the panel's changes
/// are plain form posts carrying the same token in their `csrf` field instead.
let panelScript = #"""
    (function () {
      "use strict";
      var island = document.getElementById("findmy-data");
      if (!island) { return; }
      var data = JSON.parse(island.textContent);
      var status = document.getElementById("live-status");
      var skewMillis = Date.now() - Date.parse(data.now);
      var state = { map: null, markers: {}, circles: {}, track: null, trackPoints: [], updates: 0, lost: false };
      window.findmyPanel = state;

      function say(text, lost) {
        if (!status) { return; }
        status.textContent = text;
        status.className = lost ? "lost" : "";
      }

      // One formatter for the page: toLocaleString with options builds a new one per call, which cost
      // about 0.3 ms per track point, most of a 30-day history's drawing time (docs/benchmarks.md).
      var localFormat = new Intl.DateTimeFormat([], { dateStyle: "medium", timeStyle: "short" });
      function localTime(iso) {
        return localFormat.format(new Date(iso));
      }

      function duration(seconds) {
        if (seconds < 90) { return seconds + " s"; }
        if (seconds < 5400) { return Math.round(seconds / 60) + " min"; }
        if (seconds < 129600) { return Math.round(seconds / 3600) + " h"; }
        return Math.round(seconds / 86400) + " days";
      }

      function relative(iso) {
        var seconds = Math.round((Date.now() - skewMillis - Date.parse(iso)) / 1000);
        if (seconds < -60) { return "in the future: " + duration(-seconds) + " ahead"; }
        if (seconds < 60) { return "just now"; }
        return duration(seconds) + " ago";
      }

      function refreshTimes() {
        document.querySelectorAll("time.local").forEach(function (element) {
          element.textContent = localTime(element.getAttribute("datetime"));
        });
        document.querySelectorAll(".ago[data-at]").forEach(function (element) {
          element.textContent = relative(element.getAttribute("data-at"));
        });
      }

      function localRanges() {
        var midnight = new Date();
        midnight.setHours(0, 0, 0, 0);
        var day = 86400000;
        var ranges = {
          today: [midnight.getTime(), midnight.getTime() + day],
          yesterday: [midnight.getTime() - day, midnight.getTime()]
        };
        document.querySelectorAll("a[data-range]").forEach(function (link) {
          var range = ranges[link.getAttribute("data-range")];
          if (!range) { return; }
          link.href = "/find-my?selected=" + encodeURIComponent(link.getAttribute("data-device")) +
            "&from=" + new Date(range[0]).toISOString() + "&to=" + new Date(range[1]).toISOString();
        });
      }

      function accuracyText(meters) {
        return meters >= 1000 ? (Math.floor(meters / 100) / 10) + " km" : Math.round(meters) + " m";
      }

      function place(device) {
        var fix = device.latest;
        if (!fix) { return; }
        var at = [fix.latitude, fix.longitude];
        var marker = state.markers[device.id];
        if (marker) {
          marker.setLatLng(at);
          state.circles[device.id].setLatLng(at).setRadius(fix.accuracy_m);
        } else {
          marker = L.marker(at, { title: device.name, alt: device.name, keyboard: true }).addTo(state.map);
          marker.on("click", function () { window.location.href = "/find-my?selected=" + device.id; });
          state.markers[device.id] = marker;
          // Always the circle: a 3 km fix must look like a 3 km fix.
          state.circles[device.id] = L.circle(at, {
            radius: fix.accuracy_m, weight: 1, fillOpacity: 0.15, interactive: false
          }).addTo(state.map);
        }
      }

      function drawMap() {
        var element = document.getElementById("map");
        if (!element) { return; }
        if (!window.L) {
          element.textContent = "The map is unavailable (Leaflet is not installed on the server); the list still works.";
          return;
        }
        state.map = L.map(element, { zoomControl: true, keyboard: true });
        var attribution = document.createElement("span");
        attribution.textContent = data.tile_attribution;
        L.tileLayer(data.tile_url, { attribution: attribution.innerHTML, maxZoom: 19 }).addTo(state.map);
        data.devices.forEach(place);
        var bounds = null;
        if (data.track && data.track.length) {
          var line = data.track.map(function (fix) { return [fix.latitude, fix.longitude]; });
          state.track = L.polyline(line, { weight: 3 }).addTo(state.map);
          // Thousands of points as SVG elements are what makes a month slow to draw; one canvas
          // holds them all. Tooltips and focus from the timeline work the same.
          var pointRenderer = L.canvas({ padding: 0.5 });
          data.track.forEach(function (fix) {
            var point = L.circleMarker([fix.latitude, fix.longitude], { radius: 4, weight: 1, renderer: pointRenderer })
              .bindTooltip(localTime(fix.recorded_at) + " · ± " + accuracyText(fix.accuracy_m))
              .addTo(state.map);
            state.trackPoints.push(point);
          });
          bounds = state.track.getBounds();
          document.querySelectorAll("#timeline li[data-index]").forEach(function (item) {
            var point = state.trackPoints[Number(item.getAttribute("data-index"))];
            if (!point) { return; }
            var show = function () { point.openTooltip(); };
            var hide = function () { point.closeTooltip(); };
            item.addEventListener("focus", show);
            item.addEventListener("mouseenter", show);
            item.addEventListener("blur", hide);
            item.addEventListener("mouseleave", hide);
          });
        } else {
          // A circle's own getBounds needs a map view, which is what is being decided here.
          data.devices.forEach(function (device) {
            if (!device.latest || (data.selected !== null && device.id !== data.selected)) { return; }
            var circle = L.latLng(device.latest.latitude, device.latest.longitude).toBounds(2 * device.latest.accuracy_m);
            bounds = bounds ? bounds.extend(circle) : circle;
          });
        }
        if (bounds) {
          state.map.fitBounds(bounds, { maxZoom: 17, padding: [20, 20] });
        } else {
          state.map.setView([20, 0], 2);
        }
        // For ops/bench/panel_browser_bench.py: the moment the map's layers (the track included) are
        // in the DOM, on the page's performance.now() clock; the next paint shows them.
        document.documentElement.dataset.mapDrawnAt = String(performance.now());
      }

      function update(devices) {
        devices.forEach(function (device) {
          if (!device.latest) { return; }
          if (state.map) { place(device); }
          var row = document.querySelector('#device-list li[data-device-id="' + device.id + '"] .ago');
          if (row) { row.setAttribute("data-at", device.latest.recorded_at); }
          if (device.id === data.selected) {
            var taken = document.getElementById("fix-taken");
            if (taken) {
              taken.querySelector("time").setAttribute("datetime", device.latest.recorded_at);
              var ago = taken.querySelector(".ago");
              if (ago) { ago.setAttribute("data-at", device.latest.recorded_at); }
            }
            var accuracy = document.getElementById("accuracy");
            if (accuracy) { accuracy.textContent = "± " + accuracyText(device.latest.accuracy_m); }
            if (state.map && !state.track) { state.map.panTo([device.latest.latitude, device.latest.longitude]); }
          }
        });
        refreshTimes();
      }

      function poll() {
        fetch("/api/find-my/devices", { credentials: "same-origin", cache: "no-store" })
          .then(function (response) {
            if (response.status === 401) {
              say("Your session has ended. Reload the page to log in again.", true);
              return null;
            }
            if (!response.ok) { throw new Error("status " + response.status); }
            return response.json();
          })
          .then(function (body) {
            if (!body) { return; }
            update(body.devices);
            state.updates += 1;
            state.lost = false;
            say("Live: updated " + new Date().toLocaleTimeString(), false);
            schedule();
          })
          .catch(function () {
            if (!state.lost) { state.lostSince = new Date(); }
            state.lost = true;
            say("Connection to the server lost since " + state.lostSince.toLocaleTimeString() +
              "; retrying. Positions shown may be out of date.", true);
            schedule();
          });
      }

      function schedule() { window.setTimeout(poll, Math.max(1, data.poll_seconds) * 1000); }

      refreshTimes();
      localRanges();
      drawMap();
      say("Live: waiting for the first update", false);
      schedule();
    })();
    """#

/// The panel's style sheet, served as /static/panel.css: one column on a phone, list beside the
/// map from tablet width up; visible focus; the map has a plain background when tiles cannot load.
let panelStyle = #"""
    * { box-sizing: border-box; }
    body { margin: 0; font: 16px/1.45 system-ui, sans-serif; color: #1b1f23; background: #fff; }
    a { color: #0b57d0; }
    :focus-visible { outline: 3px solid #f29900; outline-offset: 2px; }
    .skip { position: absolute; left: -999px; }
    .skip:focus { left: 8px; top: 8px; background: #fff; padding: 8px; z-index: 2000; }
    header.top { display: flex; align-items: center; gap: 12px; padding: 8px 16px; border-bottom: 1px solid #d0d7de; flex-wrap: wrap; }
    header.top h1 { font-size: 1.25rem; margin: 0; }
    header.top h1 a { color: inherit; text-decoration: none; }
    header.top .who { margin: 0 0 0 auto; color: #57606a; }
    form.logout { margin: 0; }
    button { font: inherit; padding: 8px 14px; min-height: 44px; border-radius: 6px; border: 1px solid #8c959f; background: #f6f8fa; cursor: pointer; }
    main { display: flex; flex-direction: column; }
    .side { padding: 8px 16px; }
    .side h2 { font-size: 1.1rem; margin: 12px 0 6px; }
    #device-list, .ranges { list-style: none; padding: 0; margin: 0; }
    #device-list li { padding: 8px 0; border-bottom: 1px solid #eaeef2; }
    #device-list a { display: inline-block; min-height: 28px; font-weight: 600; }
    #device-list a[aria-current] { color: #1b1f23; text-decoration: none; border-left: 4px solid #0b57d0; padding-left: 6px; }
    .meta { display: block; color: #57606a; font-size: 0.9rem; }
    dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 12px; margin: 8px 0; }
    dt { color: #57606a; }
    dd { margin: 0; overflow-wrap: anywhere; }
    .stale { background: #fff4e5; border-left: 4px solid #f29900; padding: 8px; }
    .error { background: #ffebe9; border-left: 4px solid #cf222e; padding: 8px; }
    .ranges { display: flex; gap: 12px; flex-wrap: wrap; }
    .ranges a { display: inline-block; padding: 6px 0; }
    #timeline { max-height: 40vh; overflow: auto; padding-left: 1.5rem; font-size: 0.9rem; }
    .mapbox { position: relative; }
    #map { height: 55vh; min-height: 280px; background: #dde6ee; }
    #live-status { margin: 0; padding: 6px 16px; font-size: 0.9rem; color: #57606a; }
    #live-status.lost { background: #ffebe9; color: #82071e; font-weight: 600; }
    main.login { max-width: 24rem; margin: 0 auto; padding: 16px; display: block; }
    main.login form { display: flex; flex-direction: column; gap: 6px; }
    main.login input { font: inherit; padding: 8px; min-height: 44px; border: 1px solid #8c959f; border-radius: 6px; }
    main.login button { margin-top: 12px; }
    nav.links { display: flex; gap: 12px; }
    .visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
    main.forms { display: block; max-width: 48rem; margin: 0 auto; padding: 8px 16px 32px; height: auto; }
    main.forms section { border-top: 1px solid #d0d7de; margin-top: 16px; }
    main.forms form:not(.inline) { display: flex; flex-direction: column; align-items: flex-start; gap: 6px; }
    main.forms form.inline { margin: 0; }
    main.forms input:not([type=radio]), main.forms select { font: inherit; padding: 8px; min-height: 44px; border: 1px solid #8c959f; border-radius: 6px; max-width: 100%; }
    main.forms fieldset { border: 1px solid #d0d7de; border-radius: 6px; display: flex; flex-direction: column; gap: 6px; }
    main.forms label.inline { display: inline; }
    table { border-collapse: collapse; width: 100%; }
    th, td { text-align: left; padding: 6px 8px; border-bottom: 1px solid #eaeef2; vertical-align: middle; }
    .flash { background: #dafbe1; border-left: 4px solid #1a7f37; padding: 8px; }
    .note { color: #57606a; font-size: 0.9rem; }
    code { overflow-wrap: anywhere; }
    button.danger { border-color: #cf222e; color: #82071e; }
    @media (min-width: 800px) {
      main.forms { height: auto; }
      main { flex-direction: row; height: calc(100vh - 62px); }
      .side { width: 24rem; overflow: auto; flex: none; }
      .mapbox { flex: 1; display: flex; flex-direction: column; }
      #map { flex: 1; height: auto; }
    }
    """#
